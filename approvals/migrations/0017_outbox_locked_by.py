"""The outbox lease held by the delivering worker's database session (`Outbox.locked_by`): a worker that dies
while it delivers gives the row back within seconds, not after the lease's 60 s (docs/operating.md)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0016_question_text_signed"),
    ]

    operations = [
        migrations.AddField(
            model_name="outbox",
            name="locked_by",
            field=models.IntegerField(blank=True, null=True),
        ),
    ]
