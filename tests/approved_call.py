"""One gated call whose arguments three parties shape, for the tests of "what runs is what was approved"
(docs/approving.md): the agent proposes them, a `command` hook rewrites them, a `redact` hook masks a
secret in what is stored and shown, and the approver edits one before approving.

    proposed  {"invoice_id": "INV-7", "amount": 900, "card": "4111 1111 1111 1111", "memo": "laptop"}
    the hook  amount capped at 500, and "route": "escrow" added
    stored    the card "[redacted]" (the gateway never keeps it)
    the edit  memo: "laptop for Dana"
    runs      {"invoice_id": "INV-7", "amount": 500, "card": "4111 1111 1111 1111", "memo": "laptop for Dana",
               "route": "escrow"}

The card comes back from the agent's own call, never from the approver (who saw a mask).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import yaml

TOOL = "pay_invoice"
PROPOSED = {"invoice_id": "INV-7", "amount": 900, "card": "4111 1111 1111 1111", "memo": "laptop"}
EDITS = {"memo": "laptop for Dana"}
APPROVED = {
    "invoice_id": "INV-7", "amount": 500, "card": "4111 1111 1111 1111", "memo": "laptop for Dana", "route": "escrow"
}  # fmt: skip
SHOWN = {**APPROVED, "card": "[redacted]"}  # what the request holds: approved, the secret masked
REASON = "approved by web:alice with edited arguments: memo"

CAP_AND_ROUTE = (  # a `command` hook (Claude Code's protocol): cap the amount, pay through escrow
    "import json,sys; e=json.load(sys.stdin); a=e['tool_input']; "
    "a['amount']=min(a['amount'],500); a['route']='escrow'; print(json.dumps({'tool_args': a}))"
)
FROM_VAULT = (  # a `command` hook that puts a secret in: a vault reference becomes the token itself
    "import json,sys; e=json.load(sys.stdin); a=e['tool_input']; "
    "a['api_token']='tok_live_from_vault' if a.get('api_token')=='vault:payments' else a.get('api_token'); "
    "print(json.dumps({'tool_args': a}))"
)


def hooks(tools: list[str], *, channel: str = "web", approvers: list[str] | None = None) -> list[dict[str, Any]]:
    """The agent's hooks: the rewrite, the mask, and a gate whose approver may edit `memo`."""
    return [
        {
            "kind": "command",
            "name": "cap-and-route",
            "event": "pre_tool_use",
            "tools": tools,
            "command": [sys.executable, "-c", CAP_AND_ROUTE],
        },
        {"kind": "redact", "name": "no-cards", "keys": ["card", "api_token"]},
        {
            "kind": "approval_gate",
            "name": "ask-alice",
            "tools": tools,
            "channel": channel,
            "approvers": approvers or ["alice"],
            "timeout_seconds": 600,
            "allow_edit": ["memo"],
        },
    ]


def configure(agent: str, tools: list[str] | None = None) -> str:
    """Apply a config with the web channel and `agent` (these hooks on `tools`); a new API key for it."""
    from approvals import services
    from approvals.models import Agent
    from tests.conftest import apply_config

    agents = [{"name": agent, "hooks": hooks(tools or [TOOL])}]
    config = {"channels": [{"name": "web", "kind": "web"}], "agents": agents}
    apply_config(yaml.safe_dump(config))
    _, key = services.api_key_create(agent=Agent.objects.get(name=agent))
    return key


def approve_with_edits(confirmation_id: Any, edits: dict[str, Any] | None = EDITS, actor: str = "alice") -> None:
    """alice edits the request (`edits`; None: as proposed) and approves it, through the service every
    channel calls."""
    from approvals import services
    from gateway_contract import Callback

    callback = Callback(confirmation_id=str(confirmation_id), decision="approve", actor=actor, edits=edits)
    outcome = services.confirmation_respond(channel_name="web", callback=callback)
    assert outcome.applied, outcome


class EditingApprover:
    """alice, in another thread: she edits and approves the first pending request as soon as there is one."""

    def __init__(self, edits: dict[str, Any] | None = EDITS) -> None:
        self.edits = edits
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="editing-approver", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from django.db import connection

        from approvals.models import ConfirmationRequest

        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                pending = ConfirmationRequest.objects.filter(status="pending").order_by("created_at").first()
                if pending is not None:
                    approve_with_edits(pending.pk, self.edits)
                    return
                time.sleep(0.05)
            raise AssertionError("no request to approve appeared")
        except BaseException as exc:
            self.error = exc
        finally:
            connection.close()

    def join(self) -> None:
        self.thread.join(40)
        assert not self.thread.is_alive(), "the approver never decided"
        if self.error is not None:
            raise self.error
