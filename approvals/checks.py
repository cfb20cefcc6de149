"""System checks: the gateway refuses to run on the published development audit key (docs/audit.md)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks


@checks.register("gateway")
def audit_key_check(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """`approvals.E001`: GATEWAY_AUDIT_KEY unset (the development key in use) outside development."""
    if settings.GATEWAY_AUDIT_KEY_ID != settings.GATEWAY_AUDIT_DEV_KEY_ID or settings.GATEWAY_ALLOW_DEV_AUDIT_KEY:
        return []
    return [
        checks.Error(
            "GATEWAY_AUDIT_KEY is not set: the audit chain and the decision records would be signed with the "
            "development key, which is published in the source.",
            hint="Set GATEWAY_AUDIT_KEY=<key id>:<secret of 32+ characters> (docs/audit.md, \"The audit key\"); "
            "for development only, GATEWAY_ALLOW_DEV_AUDIT_KEY=1.",
            id="approvals.E001",
        )
    ]
