"""Helpers shared by the policy-kind tests (tests/hooks/test_kinds_*.py, test_composition.py, test_policy_api.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from approvals import services
from approvals.models import Outbox, OutboxStatus
from approvals.config_schema import load_config_file

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "policies"


def apply_example(name: str, environ: Mapping[str, str] | None = None) -> None:
    """Apply examples/policies/<name>.yaml as `manage.py apply_config` would."""
    path = EXAMPLES / f"{name}.yaml"
    services.config_apply(config=load_config_file(path, environ=environ), source=f"apply_config {path}")


def deliver_outbox() -> None:
    """Deliver every outbox row still pending (cards, redraws, reminders), as the worker would, in the order
    they were queued (a table's physical order is no order: emptied by DELETE, it reuses the freed space)."""
    pending = Outbox.objects.filter(status=OutboxStatus.PENDING).order_by("created_at", "pk")
    for outbox_id in pending.values_list("pk", flat=True):
        services.outbox_deliver(outbox_id=outbox_id)
