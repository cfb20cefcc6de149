"""An edited call is judged again (docs/approving.md, "Judged again"): an approver's edit, posted on the
approval page over real HTTP, is run through the agent's pre-tool-use chain before the approval takes.
A deny rule, the read-only guard, a full rate limit, an ask routed to another gate, or hooks that would
rewrite the edit refuse it — the approver is told why, nothing is decided, the agent keeps waiting — and
judging never counts as a call. Edited values keep their JSON type unless the gate declares another."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
import yaml
from django.core.management import call_command

from approvals.models import ApproverResponse, ConfirmationEvent, ConfirmationRequest
from hooks.models import HookState
from tests.channels_ext.contract import SPENDING_CAP, TOOL
from tests.channels_ext.web.conftest import PASSWORD, HeldCall
from tests.conftest import AgentClient, apply_config, make_agent_client
from tests.support import SignedIn

pytestmark = pytest.mark.django_db(transaction=True)

GATE = {
    "kind": "approval_gate",
    "name": "finance-gate",
    "tools": [TOOL],
    "channel": "web",
    "approvers": ["alice", "bob"],
    "timeout_seconds": 1800,
    "allow_edit": ["amount"],
}


@pytest.fixture
def deploy(live_gateway, people):
    """Configure purchasing-bot with `hooks` (the finance gate first unless given); its client."""
    clients: list[AgentClient] = []

    def deploy_(*hooks: dict[str, Any], gate: dict[str, Any] | None = None) -> AgentClient:
        listed = list(hooks) if any(h["kind"] == "approval_gate" for h in hooks) else [{**GATE, **(gate or {})}, *hooks]
        config = {"channels": [{"name": "web", "kind": "web"}], "agents": [{"name": "purchasing-bot", "hooks": listed}]}
        apply_config(yaml.safe_dump(config))
        clients.append(make_agent_client(live_gateway, "purchasing-bot"))
        return clients[-1]

    yield deploy_
    for client in clients:
        client.http.close()


@pytest.fixture
def alice(live_gateway, people):
    session = SignedIn(live_gateway.url, "alice", PASSWORD)
    yield session
    session.close()


def ask(agent: AgentClient, args: dict[str, Any], **extra: Any) -> str:
    answer = agent.pre_tool_use(TOOL, args, user_id="u-42", **extra).json()
    assert answer["decision"] == "pending", answer
    return answer["confirmation_id"]


def edit(approver: SignedIn, confirmation_id: str, **typed: str) -> tuple[int, list[str]]:
    """The approver types values into the page's edit fields and presses Approve: (status, what the page says)."""
    fields = {f"edit.{path}": text for path, text in typed.items()}
    response = approver.post(f"/approvals/{confirmation_id}/", {"decision": "approve", "reason": "", **fields})
    return response.status_code, SignedIn.messages(response)


def untouched(confirmation_id: str) -> bool:
    """Nothing decided and no response recorded."""
    confirmation = ConfirmationRequest.objects.get(pk=confirmation_id)
    return confirmation.status == "pending" and not ApproverResponse.objects.filter(confirmation=confirmation).exists()


def test_a_deny_rule_refuses_an_edit_the_agent_waits_and_an_edit_it_allows_runs(deploy, alice):
    agent = deploy(SPENDING_CAP)
    held = HeldCall(agent, TOOL, {"amount": 1000, "vendor": "ACME"}, wait_seconds=60, user_id="u-42")

    response = alice.post(
        f"/approvals/{held.confirmation_id}/", {"decision": "approve", "reason": "", "edit.amount": "9000"}
    )

    refusal = "The edited call is refused by spending-cap: payments over 5000 need the CFO. Nothing was decided."
    assert (response.status_code, SignedIn.messages(response)) == (400, [refusal])
    assert 'name="edit.amount"' in response.text and ">9000</textarea>" in response.text  # what she typed, kept
    assert untouched(held.confirmation_id) and held.still_waiting()
    event = ConfirmationEvent.objects.get(confirmation_id=held.confirmation_id, kind="refused_click")
    assert (event.actor, event.message) == ("web:alice", refusal)

    assert edit(alice, held.confirmation_id, amount="2500") == (200, ["Approved with your edits."])

    answer = held.result()
    assert (answer["decision"], answer["tool_args"]) == ("allow", {"amount": 2500, "vendor": "ACME"})
    judged = ConfirmationEvent.objects.get(confirmation_id=held.confirmation_id, kind="approved").data["judged_again"]
    assert [(d["hook"], d["decision"]) for d in judged] == [("finance-gate", "ask"), ("spending-cap", "allow")]


def test_the_read_only_guard_switched_on_after_the_ask_refuses_an_edited_approval(deploy, alice):
    agent = deploy({"kind": "readonly_guard", "name": "freeze", "tools": [TOOL]})
    confirmation_id = ask(agent, {"amount": 1000})

    call_command("set_read_only", "purchasing-bot", "on")
    refused = edit(alice, confirmation_id, amount="900")

    assert refused == (
        400,
        [
            "The edited call is refused by freeze: agent purchasing-bot is read-only: oa__purchase_pay is a write "
            "tool (freeze). Nothing was decided."
        ],
    )
    assert untouched(confirmation_id)


def test_a_full_rate_limit_refuses_an_edit_and_judging_an_edit_never_counts(deploy, alice):
    agent = deploy({"kind": "rate_limit", "name": "three-an-hour", "tools": [TOOL], "limit": 3, "window_seconds": 3600})
    counted = HookState.objects.filter(scope="rate_limit:three-an-hour", key="user:u-42")
    first, second = ask(agent, {"amount": 1000}), ask(agent, {"amount": 2000})
    assert counted.get().counter == 2

    assert edit(alice, first, amount="1500") == (200, ["Approved with your edits."])
    assert counted.get().counter == 2  # judged, not counted: one slot is still free
    ask(agent, {"amount": 3000})  # takes it: the window is full
    status, (said,) = edit(alice, second, amount="2500")

    assert status == 400
    assert said.startswith(
        "The edited call is refused by three-an-hour: rate limit of 3 calls per 3600 s per user reached (three-an-hour); "
        "retry in "
    )
    assert said.endswith(" seconds. Nothing was decided.")
    assert untouched(second)
    assert counted.get().counter == 3


def test_an_edit_a_policy_routes_to_another_gate_is_refused_and_one_routed_to_this_gate_is_this_approval(deploy, alice):
    def routing(name: str, priority: int, over: int, gate: str, reason: str) -> dict[str, Any]:
        rule = {"effect": "ask", "tools": [TOOL], "when": f"args.amount > {over}", "reason": reason}
        return {"kind": "policy", "name": name, "priority": priority, "rules": [rule], "ask_via": gate}

    agent = deploy(
        routing("cfo-rule", 10, 5000, "cfo-gate", "payments over 5000 need the CFO"),
        routing("finance-rule", 20, 500, "finance-gate", "payments over 500 need finance"),
        {**GATE, "tools": ["*"]},
        {"kind": "approval_gate", "name": "cfo-gate", "channel": "web", "approvers": ["olga"]},
    )
    held = HeldCall(agent, TOOL, {"amount": 1000}, wait_seconds=60)  # finance asks

    refused = edit(alice, held.confirmation_id, amount="9000")

    assert refused == (
        400,
        [
            "The edited call needs approval through cfo-gate (payments over 5000 need the CFO), not this request's "
            "finance-gate. Nothing was decided: approve it as proposed, or reject it so the agent can ask again."
        ],
    )
    assert untouched(held.confirmation_id) and held.still_waiting()
    assert edit(alice, held.confirmation_id, amount="800") == (200, ["Approved with your edits."])
    assert held.result()["tool_args"] == {"amount": 800}


def test_hooks_that_would_rewrite_the_edit_refuse_it(deploy, alice):
    cap = (
        "import json,sys; e=json.load(sys.stdin); a=e['tool_input']; "
        "a['amount']=min(a['amount'],100); print(json.dumps({'tool_args': a}))"
    )
    capping = [sys.executable, "-c", cap]
    agent = deploy({"kind": "command", "name": "cap-at-100", "event": "pre_tool_use", "command": capping})
    confirmation_id = ask(agent, {"amount": 50})

    refused = edit(alice, confirmation_id, amount="500")

    assert refused == (
        400,
        [
            "The agent's hooks would change the edited arguments (amount), so the agent would not run what you "
            "approve. Nothing was decided: edit them to values the hooks leave as they are."
        ],
    )
    assert untouched(confirmation_id)
    assert edit(alice, confirmation_id, amount="80") == (200, ["Approved with your edits."])


def test_command_hooks_are_told_it_is_a_check_and_see_masked_values_as_their_mask(deploy, alice, tmp_path):
    log = tmp_path / "events.jsonl"
    record = [sys.executable, "-c", "import sys; open(sys.argv[1], 'a').write(sys.stdin.read() + '\\n')", str(log)]
    agent = deploy(
        {"kind": "redact", "name": "no-cards", "keys": ["card"]},
        {"kind": "command", "name": "audit-log", "event": "pre_tool_use", "command": record},
    )
    held = HeldCall(agent, TOOL, {"amount": 1000, "card": "4111111111111111"}, wait_seconds=60)

    assert edit(alice, held.confirmation_id, amount="900") == (200, ["Approved with your edits."])

    asked, judged = [json.loads(line) for line in log.read_text().splitlines()]
    assert "check_only" not in asked and asked["tool_input"] == {"amount": 1000, "card": "4111111111111111"}
    assert judged["check_only"] is True
    assert judged["tool_input"] == {"amount": 900, "card": "[redacted]"}  # the stored arguments: masked
    assert (judged["session_id"], judged["user_id"], judged["tool_name"]) == (asked["session_id"], asked["user_id"], TOOL)
    # The agent runs its own card number with the approved amount.
    assert held.result()["tool_args"] == {"amount": 900, "card": "4111111111111111"}


def test_a_gate_may_declare_another_type_for_an_edited_value(deploy, alice):
    agent = deploy(gate={"allow_edit": ["amount", "vendor"], "edit_types": {"amount": "number"}})
    held = HeldCall(agent, TOOL, {"amount": 1000, "vendor": "ACME"}, wait_seconds=60)

    approved = edit(alice, held.confirmation_id, amount="12.5", vendor='"Globex"')  # the form shows text as JSON

    assert approved == (200, ["Approved with your edits."])
    assert held.result()["tool_args"] == {"amount": 12.5, "vendor": "Globex"}
