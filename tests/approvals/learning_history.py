"""A recorded history of 500 tool calls of two agents, made through the gateway's own services (the
pre-tool-use chain, the approvers' clicks), for `suggest_policies` and `simulate_config` to learn from
and to replay (docs/policies.md, "Learning from what people approved", "Trying a config on the past").

Each group of calls is named by what it is for: the patterns that must be suggested (`update`,
`delete`, `transfer`) and the near misses that must not (a rejection, too few approvals, an edited
approval, approvals too old), with calls the suggestions must leave as they are around them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools

from django.utils import timezone

from approvals import services
from approvals.models import Agent, ConfirmationRequest
from gateway_contract import Callback
from tests.conftest import apply_config
from tests.support import rewrite_request

CONFIG = """
channels:
  - {name: web, kind: web}
agents:
  - name: crm-bot
    hooks:
      - kind: approval_gate        # runs only when crm-policy asks
        name: crm-approval
        channel: web
        approvers: ["alice", "bob"]
        allow_edit: true
      - kind: policy
        name: crm-policy
        ask_via: crm-approval
        default: ask
        rules:
          - {effect: allow, tools: ["crm__search"], reason: routine search}
          - {effect: deny, tools: ["crm__*"], when: "has(metadata.region) && metadata.region == 'eu'", reason: EU data}
          - {effect: ask, tools: ["crm__delete_contact"], reason: deleting a contact needs a human}
  - name: pay-bot
    hooks:
      - kind: approval_gate
        name: pay-gate
        tools: ["pay__transfer"]
        channel: web
        approvers: ["alice"]
"""


@dataclasses.dataclass
class History:
    """The ids of the recorded calls, by group (each a list of ToolCall ids as strings)."""

    groups: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    def __getitem__(self, name: str) -> list[str]:
        return self.groups[name]

    def total(self) -> int:
        return sum(len(ids) for ids in self.groups.values())


_sessions = itertools.count()


def _call(history: History, group: str, agent: Agent, tool: str, args: dict, **extra) -> str | None:
    """One call through the pre-tool-use service; returns its request's id if a human is asked."""
    answer = services.tool_call_pre(
        agent=agent, session_id=f"s-{next(_sessions)}", tool_name=tool, tool_args=args, user_id="u-1", **extra
    )
    request = ConfirmationRequest.objects.filter(pk=answer.confirmation_id).first() if answer.confirmation_id else None
    call_id = str(request.tool_call.pk) if request is not None else _last_call_id(agent)
    history.groups.setdefault(group, []).append(call_id)
    return str(request.pk) if request is not None else None


def _last_call_id(agent: Agent) -> str:
    return str(agent.tool_calls.order_by("-created_at").values_list("pk", flat=True).first())


def _decide(confirmation_id: str, decision: str = "approve", **extra) -> None:
    services.confirmation_respond(
        channel_name="web", callback=Callback(confirmation_id=confirmation_id, decision=decision, actor="alice", **extra)
    )


def _asked_and(history: History, group: str, agent: Agent, tool: str, args: dict, decision: str = "approve", **extra) -> str:
    confirmation_id = _call(history, group, agent, tool, args)
    assert confirmation_id is not None, (group, tool, args)
    _decide(confirmation_id, decision, **extra)
    return confirmation_id


def build_history() -> History:
    """500 calls: 298 of crm-bot, 202 of pay-bot (see each group's comment)."""
    apply_config(CONFIG)
    crm, pay = Agent.objects.get(name="crm-bot"), Agent.objects.get(name="pay-bot")
    h = History()
    # Suggested: crm__update_contact {field, id}, approved 12 times (ids 3..40, email or phone).
    for n, (id_, field) in enumerate(zip([3, 7, 12, 40, 18, 9, 22, 31, 5, 27, 14, 33], itertools.cycle(["email", "phone"]))):
        _asked_and(h, "update_approved", crm, "crm__update_contact", {"id": id_, "field": field})
    h.groups["update_pending_in_range"] = []
    for args in ({"id": 5, "field": "email"}, {"id": 39, "field": "phone"}):
        _call(h, "update_pending_in_range", crm, "crm__update_contact", args)
    _call(h, "update_pending_out_of_range", crm, "crm__update_contact", {"id": 999, "field": "email"})
    _call(h, "update_pending_other_value", crm, "crm__update_contact", {"id": 7, "field": "address"})
    # Another shape of the same tool, approved only 3 times: not suggested.
    for id_ in (1, 2, 3):
        _asked_and(h, "update_other_shape", crm, "crm__update_contact", {"id": id_, "field": "email", "value": "x"})
    # Suggested: crm__delete_contact {id}, approved 11 times (ids 100..110); the exact ask rule is narrowed.
    for id_ in range(100, 111):
        _asked_and(h, "delete_approved", crm, "crm__delete_contact", {"id": id_})
    # In range but from the EU: the exact ask outranks the EU deny today, and a learned allow must not outrank it.
    for id_ in (101, 102):
        _call(h, "delete_eu_pending", crm, "crm__delete_contact", {"id": id_}, metadata={"region": "eu"})
    # Near miss: approved 15 times and rejected once.
    for n in range(15):
        _asked_and(h, "merge_approved", crm, "crm__merge", {"a": n, "b": n + 1})
    _asked_and(h, "merge_rejected", crm, "crm__merge", {"a": 3, "b": 4}, decision="reject")
    # Near miss: approved 9 times (one short of 10).
    for n in range(9):
        _asked_and(h, "tag_approved", crm, "crm__tag", {"id": n, "tag": "vip"})
    # Near miss: approved 10 times as asked, and once with an argument edited by the approver.
    for n in range(10):
        _asked_and(h, "note_approved", crm, "crm__note", {"id": n, "text": "ok"})
    _asked_and(h, "note_edited", crm, "crm__note", {"id": 99, "text": "typo"}, edits={"text": "fixed"})
    # Near miss: approved 10 times, 6 of them 40 days ago (outside --days 30).
    export_ids = [_asked_and(h, "export_approved", crm, "crm__export", {"fmt": "csv"}) for _ in range(10)]
    rewrite_request(export_ids[:6], decided_at=timezone.now() - dt.timedelta(days=40))
    # Allowed and denied by the policy as it is.
    for n in range(200):
        _call(h, "search_allowed", crm, "crm__search", {"q": f"drop table {n}" if n % 40 == 0 else f"acme {n}"})
    for n in range(20):
        _call(h, "update_eu_denied", crm, "crm__update_contact", {"id": n, "field": "email"}, metadata={"region": "eu"})
    # Suggested: pay__transfer {amount, currency}, approved 10 times (100..900, EUR or USD); the gate is narrowed.
    for amount, currency in zip(range(100, 1000, 90), itertools.cycle(["EUR", "USD"])):
        _asked_and(h, "transfer_approved", pay, "pay__transfer", {"amount": amount, "currency": currency})
    _call(h, "transfer_pending_in_range", pay, "pay__transfer", {"amount": 250.5, "currency": "USD"})
    _call(h, "transfer_pending_out_of_range", pay, "pay__transfer", {"amount": 5000, "currency": "EUR"})
    for n in range(190):
        _call(h, "balance_allowed", pay, "pay__balance", {})
    assert h.total() == 500, h.total()
    return h


def row_counts() -> dict[str, int]:
    """How many rows each record a replay or a suggestion must not write holds."""
    from approvals.models import (
        AgentConfigVersion,
        ApproverResponse,
        AuditEntry,
        ConfirmationEvent,
        Grant,
        Outbox,
        ToolCall,
    )
    from hooks.models import HookState

    models = (ToolCall, ConfirmationRequest, ConfirmationEvent, ApproverResponse, Outbox, Grant, AuditEntry,
              AgentConfigVersion, HookState)  # fmt: skip
    return {model.__name__: model.objects.count() for model in models}
