from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("approvals", "0005_tamper_evident_audit")]

    operations = [
        migrations.AddField(
            model_name="agent",
            name="generation",
            field=models.PositiveBigIntegerField(default=0, editable=False),
        ),
    ]
