"""`decided_by` and each approver's response become channel-qualified ids (docs/reference/api.md,
"Who decided"): `slack:U…`, `feishu:ou_…`, `web:<username>`, `admin:<username>`.

Before, a Slack decision stored the clicker's display name (two people can share one)
and the others their channel-native id. What can be rebuilt is rebuilt:

- every `ApproverResponse.approver` gets its channel's kind as prefix (the response
  names its channel; `admin` for the admin's actions, `web` for staff on the page);
- an approved or rejected request's `decided_by` becomes the deciding response's id
  (the reject, or the last approval), the old value kept as `decided_by_name`;
- a request cancelled in the admin (no response; the old value is the staff
  user's name) becomes `admin:<name>`.

What cannot be rebuilt stays as it was: a decision whose deciding response is
missing, and the `actor` of past events (the append-only history is not rewritten).
`gateway` and `agent:<name>` were already unambiguous.
"""

from django.db import migrations

ADMIN_CHANNEL = "admin"  # approvals.admin.ADMIN_CHANNEL
WEB_PAGE_CHANNEL = "web page"  # channels_ext.web.display.WEB_PAGE_CHANNEL
KINDS = ("web", "slack", "feishu", "admin")


def _kind(channel: str, kinds: dict[str, str]) -> str:
    if channel == ADMIN_CHANNEL:
        return "admin"
    if channel == WEB_PAGE_CHANNEL:
        return "web"
    return kinds.get(channel, "web")


def _qualified(value: str) -> bool:
    return value.partition(":")[0] in KINDS and ":" in value


def forwards(apps, schema_editor):
    Channel = apps.get_model("approvals", "Channel")
    Request = apps.get_model("approvals", "ConfirmationRequest")
    Response = apps.get_model("approvals", "ApproverResponse")
    kinds = dict(Channel.objects.values_list("name", "kind"))

    for response in Response.objects.iterator(chunk_size=1000):
        if _qualified(response.approver):
            continue
        native = response.approver
        response.approver = f"{_kind(response.channel, kinds)}:{native}"
        response.approver_name = response.approver_name or native
        response.save(update_fields=["approver", "approver_name"])

    decided = Request.objects.filter(status__in=["approved", "rejected"]).exclude(decided_by="gateway")
    for request in decided.iterator(chunk_size=1000):
        if _qualified(request.decided_by):
            continue
        responses = Response.objects.filter(confirmation_id=request.pk).order_by("created_at", "id")
        decisive = (
            responses.filter(decision="reject").first()
            if request.status == "rejected"
            else responses.filter(decision="approve").last()
        )
        if decisive is None:
            continue  # nothing to rebuild it from
        name = request.decided_by
        Request.objects.filter(pk=request.pk).update(decided_by=decisive.approver, decided_by_name=name)
        Response.objects.filter(pk=decisive.pk).update(approver_name=name)

    staff_cancels = (
        Request.objects.filter(status="cancelled").exclude(decided_by="").exclude(decided_by__startswith="agent:")
    )
    for request in staff_cancels.iterator(chunk_size=1000):
        if not _qualified(request.decided_by):
            Request.objects.filter(pk=request.pk).update(
                decided_by=f"admin:{request.decided_by}", decided_by_name=request.decided_by
            )


def backwards(apps, schema_editor):
    Request = apps.get_model("approvals", "ConfirmationRequest")
    Response = apps.get_model("approvals", "ApproverResponse")
    for response in Response.objects.iterator(chunk_size=1000):
        if _qualified(response.approver):
            Response.objects.filter(pk=response.pk).update(approver=response.approver.partition(":")[2])
    for request in Request.objects.exclude(decided_by_name="").iterator(chunk_size=1000):
        if _qualified(request.decided_by):
            Request.objects.filter(pk=request.pk).update(decided_by=request.decided_by_name)


class Migration(migrations.Migration):
    dependencies = [("approvals", "0003_approvers_edits_grants_turns")]

    operations = [migrations.RunPython(forwards, backwards)]
