"""A grant's scope includes the user the approved call was made for (docs/approving.md).

Existing grants take the `user_id` of the request they came from, which is whom they were approved
for: a grant made for one user stops covering another user's calls, and one made without a user
keeps covering calls without one.
"""

from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def scope_existing_grants(apps, schema_editor):
    Grant = apps.get_model("approvals", "Grant")
    ConfirmationRequest = apps.get_model("approvals", "ConfirmationRequest")
    requested_for = ConfirmationRequest.objects.filter(pk=OuterRef("confirmation_id")).values("user_id")[:1]
    Grant.objects.update(user_id=Subquery(requested_for))


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0008_one_person_and_judged_edits"),
    ]

    operations = [
        migrations.AddField(
            model_name="grant",
            name="user_id",
            field=models.CharField(
                blank=True,
                default="",
                help_text="Whom the approved call was made for: the grant covers their calls only.",
                max_length=200,
            ),
            preserve_default=False,
        ),
        migrations.RunPython(scope_existing_grants, migrations.RunPython.noop, elidable=True),
    ]
