"""The audit keyed (docs/audit.md): every chain entry re-signed with HMAC-SHA256 under the audit key, and
every decision row (request, approver response, grant) signed (`decision_mac`).

Run `verify_audit` before upgrading: this signs the chains and rows as they are.
"""

from django.db import migrations, models


def sign_everything(apps, schema_editor):
    from approvals.audit import resign_chains, sign_decisions

    resign_chains(apps)
    sign_decisions(apps)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0010_channel_kinds"),
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
        migrations.RunPython(sign_everything, migrations.RunPython.noop),
    ]
