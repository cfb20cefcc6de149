"""The audit keyed (docs/audit.md): every chain entry re-signed with HMAC-SHA256 under the audit key, and
every decision row (request, approver response, grant) signed (`decision_mac`) and linked into its
agent's chain.

Run `verify_audit` before upgrading: this signs the chains and rows as they are.
"""

import django.db.models.deletion
from django.db import migrations, models


# What a request's MAC signed at this migration, written out: later migrations add fields and sign anew
# (0016 `reason`, 0018 `risk`), and this one must sign what they expect to find.
REQUEST_SIGNED_0015 = (
    "id", "agent_id", "session_id", "tool_name", "tool_args", "user_id", "channel_id", "approvers",
    "approvals_required", "allow_self_approval", "status", "decided_by", "decided_at", "decision_reason",
    "hook_name", "editable_paths", "edit_types", "arg_edits", "approved_args", "grant_options", "args_fingerprint",
    "turn_id", "expires_at", "on_timeout", "escalate_channel_id", "escalate_approvers", "callback_url",
    "approver_people", "escalate_approver_people", "kind", "answer_schema", "answer", "default_answer",
)  # fmt: skip


def sign_everything(apps, schema_editor):
    from approvals.audit import link_decisions, resign_chains, sign_decisions

    sign_decisions(apps, request_fields=REQUEST_SIGNED_0015)
    # each decision row's state as it is, a `recorded` entry of its agent's chain
    link_decisions(apps, request_fields=REQUEST_SIGNED_0015)
    resign_chains(apps)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0014_teams_and_sign_in"),
    ]

    operations = [
        migrations.AddField(
            model_name="auditentry",
            name="key_id",
            field=models.CharField(default="", max_length=32),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="confirmationrequest",
            name="decision_mac",
            field=models.CharField(blank=True, editable=False, max_length=100),
        ),
        migrations.AddField(
            model_name="approverresponse",
            name="decision_mac",
            field=models.CharField(blank=True, editable=False, max_length=100),
        ),
        migrations.AddField(
            model_name="grant",
            name="decision_mac",
            field=models.CharField(blank=True, editable=False, max_length=100),
        ),
        migrations.AlterField(
            model_name="auditentry",
            name="action",
            field=models.CharField(
                choices=[
                    ("asked", "Asked"), ("completed", "Completed"), ("noted", "Noted"), ("event", "Event"),
                    ("retained", "Retained"), ("recorded", "Recorded"),
                ],
                max_length=12,
            ),
        ),
        migrations.AddField(
            model_name="auditentry",
            name="confirmation",
            field=models.ForeignKey(
                db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+", to="approvals.confirmationrequest",
            ),
        ),
        migrations.AddField(
            model_name="auditentry",
            name="response",
            field=models.ForeignKey(
                db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+", to="approvals.approverresponse",
            ),
        ),
        migrations.AddField(
            model_name="auditentry",
            name="grant",
            field=models.ForeignKey(
                db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+", to="approvals.grant",
            ),
        ),
        migrations.AddIndex(
            model_name="auditentry",
            index=models.Index(
                condition=models.Q(("confirmation__isnull", False)), fields=["confirmation", "seq"],
                name="audit_entry_request",
            ),
        ),
        migrations.AddIndex(
            model_name="auditentry",
            index=models.Index(
                condition=models.Q(("response__isnull", False)), fields=["response", "seq"], name="audit_entry_response"
            ),
        ),
        migrations.AddIndex(
            model_name="auditentry",
            index=models.Index(
                condition=models.Q(("grant__isnull", False)), fields=["grant", "seq"], name="audit_entry_grant"
            ),
        ),
        migrations.RunPython(sign_everything, migrations.RunPython.noop),
    ]
