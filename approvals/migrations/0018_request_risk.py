"""A request's `risk` (low | medium | high, docs/policies.md "Risk"): how risky its call is, as its gate or
policy rated it. It decides where the request goes (posted at once or gathered into a digest) and what
the approvers are shown, so it joins what the request's `decision_mac` signs and its chain entries hash
(`approvals.audit.REQUEST_SIGNED`, docs/audit.md). Requests made before it are `medium`.

Every request that verified before is signed anew over the new fields, and linked again into its agent's
chain (a `retained` entry), under the key set at migration time; one that did not verify stays so.
"""

from django.db import migrations, models

# `REQUEST_SIGNED` before and after this migration, written out: a later change of the tuple must not
# change what this migration does.
BEFORE = (
    "id", "agent_id", "session_id", "tool_name", "tool_args", "user_id", "channel_id", "approvers",
    "approvals_required", "allow_self_approval", "status", "decided_by", "decided_at", "decision_reason",
    "hook_name", "editable_paths", "edit_types", "arg_edits", "approved_args", "grant_options", "args_fingerprint",
    "turn_id", "expires_at", "on_timeout", "escalate_channel_id", "escalate_approvers", "callback_url",
    "approver_people", "escalate_approver_people", "kind", "answer_schema", "answer", "default_answer",
    "reason",
)  # fmt: skip
AFTER = (*BEFORE, "risk")


def forwards(apps, schema_editor):
    from approvals.audit_fields import resign_requests

    resign_requests(apps, before=BEFORE, after=AFTER)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0017_outbox_locked_by"),
    ]

    operations = [
        migrations.AddField(
            model_name="confirmationrequest",
            name="risk",
            field=models.CharField(
                choices=[("low", "Low"), ("medium", "Medium"), ("high", "High")], default="medium", max_length=6
            ),
        ),
        migrations.RunPython(forwards, migrations.RunPython.noop),
    ]
