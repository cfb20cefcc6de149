from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("approvals", "0002_hook_state_moves_to_hooks")]

    operations = [
        migrations.AddField(
            model_name="agent",
            name="generation",
            field=models.PositiveBigIntegerField(default=0, editable=False),
        ),
    ]
