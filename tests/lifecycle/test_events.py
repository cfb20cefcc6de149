"""Every lifecycle event over real HTTP against the real database: the answers of
docs/reference/api.md, deciding versus observing chains, and values an outer level set
reaching the hooks of an inner one."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from approvals.models import ToolCall
from hooks.models import HookState
from tests.lifecycle.conftest import agent_config

pytestmark = pytest.mark.django_db(transaction=True)


def test_each_event_answers_with_the_fields_of_the_contract(configure):
    bot = configure(agent_config("      []\n"))

    start = bot.event("session-start", user_id="u-42")
    turn = bot.event("pre-turn", turn_id="t-1")
    bot.pre_tool_use("web__search", {"q": "x"}, tool_call_id="call_1")
    post = bot.event("post-tool-use", tool_call_id="call_1", result="ok")
    bot.pre_tool_use("web__search", {"q": "y"}, tool_call_id="call_2")
    error = bot.event("tool-error", tool_call_id="call_2", error="boom")
    end_turn = bot.event("post-turn", turn_id="t-1")
    end = bot.event("session-end")

    assert [r.status_code for r in (start, turn, post, error, end_turn, end)] == [200] * 6
    assert start.json() == {"decision": "allow", "reason": "", "messages": [], "side_effects": []}
    assert turn.json() == {"decision": "allow", "reason": "", "messages": [], "side_effects": []}
    assert post.json() == {"result": "ok", "side_effects": []}
    assert error.json() == {
        "action": "raise",
        "delay_seconds": 0.0,
        "result": None,
        "reason": "no hook asked to retry or recover",
        "side_effects": [],
    }
    assert end_turn.json() == {"side_effects": []}
    assert end.json() == {"side_effects": []}


def test_a_deciding_event_stops_at_the_first_deny(configure, recorders):
    first, second = recorders("first"), recorders("second")
    bot = configure(
        agent_config(
            f"""      - {{kind: command, name: gatekeeper, event: session_start, priority: 10,
           command: {first.hook("--exit", "2", "--stderr", "sessions are closed today")}}}
      - {{kind: command, name: after-the-deny, event: session_start, priority: 20, command: {second.hook()}}}
      - {{kind: command, name: turn-gatekeeper, event: pre_turn, priority: 10,
           command: {first.hook("--exit", "2", "--stderr", "no more turns")}}}
      - {{kind: command, name: turn-after-the-deny, event: pre_turn, priority: 20, command: {second.hook()}}}
"""
        )
    )

    start = bot.event("session-start").json()
    turn = bot.event("pre-turn", turn_id="t-1").json()

    assert (start["decision"], start["reason"]) == ("deny", "sessions are closed today")
    assert (turn["decision"], turn["reason"]) == ("deny", "no more turns")
    assert len(first.events()) == 2
    assert second.events() == []  # never ran: the chain stopped at the deny


@pytest.mark.parametrize("slug,event", [("post-turn", "post_turn"), ("session-end", "session_end")])
def test_an_observing_event_runs_every_hook_even_after_a_deny(configure, recorders, slug, event):
    first, second = recorders("first"), recorders("second")
    bot = configure(
        agent_config(
            f"""      - {{kind: command, name: objector, event: {event}, priority: 10,
           command: {first.hook("--exit", "2", "--stderr", "I object")}}}
      - {{kind: command, name: observer, event: {event}, priority: 20, command: {second.hook()}}}
"""
        )
    )

    answer = bot.event(slug, turn_id="t-1")

    assert answer.status_code == 200
    assert answer.json() == {"side_effects": []}
    assert [e["hook"] for e in first.events() + second.events()] == ["objector", "observer"]


def test_post_tool_use_runs_every_hook_even_after_a_deny(configure, recorders):
    first, second = recorders("first"), recorders("second")
    bot = configure(
        agent_config(
            f"""      - {{kind: command, name: objector, event: post_tool_use, priority: 10,
           command: {first.hook("--exit", "2", "--stderr", "I object")}}}
      - {{kind: command, name: observer, event: post_tool_use, priority: 20, command: {second.hook()}}}
"""
        )
    )
    bot.pre_tool_use("web__search", {}, tool_call_id="call_1")

    answer = bot.event("post-tool-use", tool_call_id="call_1", result="fine").json()

    assert answer["result"] == "fine"
    assert len(second.events()) == 1
    decisions = ToolCall.objects.get().hook_decisions
    assert [(d["hook"], d["decision"], d["event"]) for d in decisions] == [
        ("objector", "deny", "post_tool_use"),
        ("observer", "none", "post_tool_use"),
    ]


def test_a_session_s_user_and_metadata_reach_the_hooks_of_its_turns_and_tool_calls(configure, recorders):
    turn_hook, call_hook = recorders("turn"), recorders("call")
    bot = configure(
        agent_config(
            f"""      - {{kind: command, name: turn-observer, event: pre_turn, command: {turn_hook.hook()}}}
      - {{kind: command, name: call-observer, event: post_tool_use, priority: 10, command: {call_hook.hook()}}}
      - kind: truncate_result
        name: acme-only
        priority: 20
        max_chars: 5
        when: 'session.user_id == "u-42" && metadata.org_id == "acme" && user == "u-42"'
"""
        )
    )

    bot.event("session-start", user_id="u-42", metadata={"org_id": "acme", "tier": "gold"})
    bot.event("pre-turn", turn_id="t-7", metadata={"tier": "silver"})
    # the agent says nothing about the user at the tool call itself
    bot.pre_tool_use("crm__lookup", {"id": 1}, tool_call_id="call_1")
    post = bot.event("post-tool-use", tool_call_id="call_1", result="a long crm record").json()

    [turn] = turn_hook.events()
    assert turn["user_id"] == "u-42"
    assert turn["metadata"] == {"org_id": "acme", "tier": "silver"}  # the turn's own key wins
    assert turn["turn_id"] == "t-7"
    [call] = call_hook.events()
    assert (call["user_id"], call["metadata"]["org_id"], call["turn_id"]) == ("u-42", "acme", "t-7")
    assert call["tool_use_id"] == "call_1"
    assert post["result"].startswith("a lon\n[truncated")  # the `when` matched on outer values
    assert ToolCall.objects.get().turn_id == "t-7"
    context = HookState.objects.get(scope="session:s-1", key="context").value
    assert context["user_id"] == "u-42"
    assert context["metadata"] == {"org_id": "acme", "tier": "gold"}  # the session's own, not the turn's
    assert context["turn_id"] == "t-7"


def test_sessions_keep_their_own_context(configure, recorders):
    call_hook = recorders("call")
    bot = configure(agent_config(f"      - {{kind: command, event: tool_error, command: {call_hook.hook()}}}\n"))

    bot.event("session-start", session_id="s-a", user_id="alice")
    bot.event("session-start", session_id="s-b", user_id="bob")
    bot.pre_tool_use("x", {}, session_id="s-b", tool_call_id="c")
    bot.event("tool-error", session_id="s-b", tool_call_id="c", error="e")

    assert call_hook.events()[0]["user_id"] == "bob"


def test_a_completed_call_is_recorded_with_outcome_duration_and_result_size(configure):
    bot = configure(agent_config("      []\n"))
    bot.pre_tool_use("db__query", {"sql": "select 1"}, tool_call_id="call_1")

    answer = bot.event("post-tool-use", tool_call_id="call_1", result={"rows": [[1]]}, duration_ms=42)

    assert answer.json() == {"result": {"rows": [[1]]}, "side_effects": []}
    call = ToolCall.objects.get()
    assert (call.outcome, call.result, call.duration_ms) == ("success", {"rows": [[1]]}, 42)
    assert call.result_size == len(json.dumps({"rows": [[1]]}))
    assert call.completed_at is not None


def test_a_completed_call_without_a_duration_is_timed_from_when_it_was_allowed(configure):
    bot = configure(agent_config("      []\n"))
    bot.pre_tool_use("db__query", {}, tool_call_id="call_1")

    bot.event("post-tool-use", tool_call_id="call_1", result="x", outcome="error")

    call = ToolCall.objects.get()
    assert call.outcome == "error"
    assert 0 <= call.duration_ms < 30_000
    assert call.duration_ms == int((call.completed_at - call.created_at).total_seconds() * 1000)


def test_post_tool_use_for_a_denied_call_is_refused(configure, recorders):
    bot = configure(
        agent_config(
            f"      - {{kind: command, event: pre_tool_use, command: {recorders('x').hook('--exit', '2')}}}\n"
        )
    )
    assert bot.pre_tool_use("oa__pay", {}, tool_call_id="call_1").json()["decision"] == "deny"

    answer = bot.event("post-tool-use", tool_call_id="call_1", result="paid anyway")

    assert answer.status_code == 409
    assert answer.json()["error"]["code"] == "conflict"
    assert "never allowed" in answer.json()["error"]["message"]
    assert ToolCall.objects.get().completed_at is None


def test_post_tool_use_for_a_call_still_waiting_for_approval_is_refused(configure):
    bot = configure(agent_config("      - {kind: approval_gate, channel: web}\n"))
    assert bot.pre_tool_use("oa__pay", {}, tool_call_id="call_1").json()["decision"] == "pending"

    answer = bot.event("post-tool-use", tool_call_id="call_1", result="paid anyway")

    assert answer.status_code == 409
    assert ToolCall.objects.get().completed_at is None


def test_post_tool_use_for_a_call_never_announced_is_not_found_and_one_without_an_id_is_invalid(configure):
    bot = configure(agent_config("      []\n"))

    unknown = bot.event("post-tool-use", tool_call_id="call_404", result="x")
    missing = bot.event("post-tool-use", result="x")

    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "not_found")
    assert (missing.status_code, missing.json()["error"]["code"]) == (400, "invalid")


def test_another_agent_cannot_complete_a_call(configure):
    bot = configure(agent_config("      []\n"))
    intruder = configure(agent_config("      []\n", name="intruder"), agent="intruder")
    bot.pre_tool_use("x", {}, tool_call_id="call_1")

    answer = intruder.event("post-tool-use", tool_call_id="call_1", result="x")

    assert answer.status_code == 404


def test_describe_toolcall_shows_one_call_in_full(configure, capsys):
    from tests.conftest import decide

    bot = configure(
        agent_config(
            """      - {kind: approval_gate, name: finance-gate, channel: web, approvers: [alice]}
      - {kind: truncate_result, name: cut, max_chars: 4}
"""
        )
    )
    pending = bot.pre_tool_use("oa__pay", {"amount": 80000}, tool_call_id="call_1", user_id="u-42").json()
    decide(pending["confirmation_id"], "approve", actor="alice", reason="budgeted")
    bot.event("post-tool-use", tool_call_id="call_1", result="paid 80000", duration_ms=1500)
    call = ToolCall.objects.get()

    call_command("describe_toolcall", str(call.pk))
    text = capsys.readouterr().out
    call_command("describe_toolcall", "call_1", "--json")
    audit = json.loads(capsys.readouterr().out)

    for expected in (
        "oa__pay",
        '"amount": 80000',
        "[pre_tool_use] finance-gate (approval_gate, config v1) → ask",
        "[post_tool_use] cut (truncate_result, config v1) → none: result cut to 4 of 10 characters",
        "approved",
        "alice",
        "budgeted",
        "created",
        "result size    10 characters",
        "duration       1500 ms",
        "paid",
    ):
        assert expected in text
    assert audit["id"] == str(call.pk)
    assert audit["approval"]["status"] == "approved"
    assert [e["kind"] for e in audit["approval"]["events"]][0] == "created"
    assert "approved" in [e["kind"] for e in audit["approval"]["events"]]
    assert [d["event"] for d in audit["hook_decisions"]] == ["pre_tool_use", "post_tool_use"]
    assert audit["result_size"] == 10


def test_describe_toolcall_names_an_unknown_id(transactional_db):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="no tool call 'nope'"):
        call_command("describe_toolcall", "nope")
