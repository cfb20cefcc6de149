"""A quorum counts people, and an edited value keeps its type unless the gate declares another
(docs/approving.md).

- `ApproverResponse.person`: the person behind each response (`approvals.selectors.person_of`):
  `web:<username>` and `admin:<username>` of one Django user are `user:<id>`; any other identity is
  itself. One response per (request, person) replaces one per (request, approver).
- `ConfirmationRequest.edit_types`: the gate's declared JSON types of editable paths (`edit_types`);
  requests made before have none, so their edits keep the type of the value they replace.

Existing responses get their person. Where one Django user had already answered a request under two
identities (the double count this change ends), the earliest response is that user's and the later
ones keep their own identity as person: the record is not rewritten or deleted, and the unique
constraint holds for every row.
"""

from django.db import migrations, models

DJANGO_USER_KINDS = ("web", "admin")  # approvals.selectors.DJANGO_USER_KINDS


def forwards(apps, schema_editor):
    User = apps.get_model("auth", "User")
    Response = apps.get_model("approvals", "ApproverResponse")
    users = dict(User.objects.values_list("username", "pk"))
    taken: set[tuple[object, str]] = set()
    rows = Response.objects.order_by("confirmation_id", "created_at", "id").values_list("pk", "confirmation_id", "approver")
    for pk, confirmation_id, approver in rows.iterator(chunk_size=2000):
        kind, _, native = approver.partition(":")
        person = approver
        if kind in DJANGO_USER_KINDS and native in users:
            person = f"user:{users[native]}"
        if (confirmation_id, person) in taken:
            person = approver  # this user answered the request before under another identity: kept apart
        taken.add((confirmation_id, person))
        Response.objects.filter(pk=pk).update(person=person)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0007_leaner_indexes"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [
        migrations.AddField(
            model_name="approverresponse",
            name="person",
            field=models.CharField(default="", max_length=200),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="confirmationrequest",
            name="edit_types",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.RunPython(forwards, migrations.RunPython.noop),
        migrations.RemoveConstraint(model_name="approverresponse", name="uniq_response_per_approver"),
        migrations.AddConstraint(
            model_name="approverresponse",
            constraint=models.UniqueConstraint(fields=("confirmation", "person"), name="uniq_response_per_person"),
        ),
    ]
