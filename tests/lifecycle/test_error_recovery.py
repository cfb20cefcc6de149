"""Error recovery at tool-error: retry with doubling backoff, recover with a value, abort, or
raise — and the attempt and total-time caps the gateway enforces whatever a hook answers."""

from __future__ import annotations

import pytest

from approvals.models import ToolCall
from tests.lifecycle.conftest import agent_config

pytestmark = pytest.mark.django_db(transaction=True)

RETRY = "      - {kind: retry_on_error, name: retry, max_attempts: 3, backoff_seconds: 1, max_total_seconds: 60}\n"


def failing_call(bot, tool: str = "erp__sync") -> None:
    assert bot.pre_tool_use(tool, {"id": 7}, tool_call_id="call_1").json()["decision"] == "allow"


def error(bot, attempt: int, elapsed: float = 0.0, message: str = "503 Service Unavailable", **extra) -> dict:
    response = bot.event(
        "tool-error", tool_call_id="call_1", error=message, attempt=attempt, elapsed_seconds=elapsed, **extra
    )
    assert response.status_code == 200
    return response.json()


def test_errors_are_retried_with_a_doubling_delay_until_max_attempts(configure, recorders):
    observer = recorders("observer")
    bot = configure(
        agent_config(
            RETRY + f"      - {{kind: command, name: observer, event: tool_error, command: {observer.hook()}}}\n"
        )
    )
    failing_call(bot)

    answers = [error(bot, 1, 0.2), error(bot, 2, 1.5), error(bot, 3, 3.9)]

    assert [(a["action"], a["delay_seconds"]) for a in answers] == [("retry", 1.0), ("retry", 2.0), ("raise", 0.0)]
    assert answers[0]["reason"] == "attempt 1 of 3 failed; retrying in 1 s"
    assert answers[2]["reason"] == "gave up after 3 attempts (max_attempts 3)"
    # the attempt number reaches every hook, not only the one that retries
    assert [(e["attempt"], e["elapsed_seconds"], e["error"]) for e in observer.events()] == [
        (1, 0.2, "503 Service Unavailable"),
        (2, 1.5, "503 Service Unavailable"),
        (3, 3.9, "503 Service Unavailable"),
    ]
    call = ToolCall.objects.get()
    assert call.outcome == "error"
    assert call.result == {"error": "503 Service Unavailable", "action": "raise", "attempt": 3}
    assert [(d["hook"], d["attempt"]) for d in call.hook_decisions if d.get("event") == "tool_error"] == [
        ("retry", 1),
        ("observer", 1),
        ("retry", 2),
        ("observer", 2),
        ("retry", 3),
        ("observer", 3),
    ]


def test_a_retry_that_would_pass_max_total_seconds_is_not_made(configure):
    bot = configure(
        agent_config("      - {kind: retry_on_error, max_attempts: 10, backoff_seconds: 4, max_total_seconds: 10}\n")
    )
    failing_call(bot)

    within = error(bot, 1, elapsed=6.0)  # 6 + 4 = 10: just fits
    beyond = error(bot, 2, elapsed=6.5)  # 6.5 + 8 > 10

    assert (within["action"], within["delay_seconds"]) == ("retry", 4.0)
    assert (beyond["action"], beyond["delay_seconds"]) == ("raise", 0.0)
    assert "max_total_seconds 10" in beyond["reason"]


def test_the_gateway_enforces_the_caps_whatever_a_hook_answers(configure):
    # `generous` answers first (first action wins) and would retry far beyond `strict`'s caps.
    bot = configure(
        agent_config(
            """      - {kind: retry_on_error, name: generous, priority: 10, max_attempts: 50, backoff_seconds: 1, max_total_seconds: 1000}
      - {kind: retry_on_error, name: strict, priority: 20, max_attempts: 2, backoff_seconds: 1, max_total_seconds: 5}
"""
        )
    )
    failing_call(bot)

    first = error(bot, 1, elapsed=0.0)
    too_many = error(bot, 2, elapsed=1.0)
    too_long = error(bot, 1, elapsed=4.5)

    assert (first["action"], first["delay_seconds"]) == ("retry", 1.0)
    assert (too_many["action"], too_many["reason"]) == ("raise", "gave up after 2 attempts (max_attempts 2)")
    assert too_many["side_effects"] == ["retry_capped:max_attempts"]
    assert too_long["action"] == "raise"
    assert too_long["side_effects"] == ["retry_capped:max_total_seconds"]


def test_an_error_matching_none_of_the_patterns_is_raised(configure):
    bot = configure(agent_config("      - {kind: retry_on_error, errors: ['timed? ?out'], max_attempts: 9}\n"))
    failing_call(bot)

    other = error(bot, 1, message="permission denied")
    timeout = error(bot, 1, message="read timed out")

    assert other["action"] == "raise"
    assert other["reason"] == "the error matches none of this hook's patterns"
    assert timeout["action"] == "retry"


def test_a_hook_recovers_with_a_value(configure, recorders):
    fallback = recorders("fallback")
    bot = configure(
        agent_config(
            RETRY
            + f"""      - {{kind: command, name: cached-copy, event: tool_error, priority: 200,
           command: {fallback.hook("--answer", '{"result": {"rows": [], "stale": true}, "reason": "served the cached copy"}')}}}
"""
        )
    )
    failing_call(bot)

    retried = error(bot, 1)
    recovered = error(bot, 3)  # retries used up: the retry hook has no opinion, the fallback recovers

    assert retried["action"] == "retry"
    assert recovered == {
        "action": "recover",
        "delay_seconds": 0.0,
        "result": {"rows": [], "stale": True},
        "reason": "gave up after 3 attempts (max_attempts 3); served the cached copy",
        "side_effects": [],
    }
    call = ToolCall.objects.get()
    assert (call.outcome, call.result) == ("recovered", {"rows": [], "stale": True})


def test_a_hook_aborts_the_run(configure, recorders):
    guard = recorders("guard")
    bot = configure(
        agent_config(
            f"""      - {{kind: command, name: card-guard, event: tool_error, priority: 10,
           command: {guard.hook("--exit", "2", "--stderr", "card declined: do not retry payments")}}}
"""
            + RETRY
        )
    )
    failing_call(bot, tool="oa__purchase_pay")

    answer = error(bot, 1, message="card declined")

    assert (answer["action"], answer["reason"]) == ("abort", "card declined: do not retry payments")
    assert answer["delay_seconds"] == 0.0
    assert ToolCall.objects.get().outcome == "error"


def test_with_no_hooks_the_error_is_raised(configure):
    bot = configure(agent_config("      []\n"))
    failing_call(bot)

    assert error(bot, 1)["action"] == "raise"


def test_a_retry_that_then_succeeds_completes_the_call(configure):
    bot = configure(agent_config(RETRY))
    failing_call(bot)

    assert error(bot, 1)["action"] == "retry"
    done = bot.event("post-tool-use", tool_call_id="call_1", result="synced", duration_ms=2100).json()

    assert done["result"] == "synced"
    call = ToolCall.objects.get()
    assert (call.outcome, call.result, call.duration_ms) == ("success", "synced", 2100)
    assert [(d["hook"], d["event"]) for d in call.hook_decisions] == [("retry", "tool_error")]


def test_a_tool_error_for_a_call_never_allowed_is_refused(configure, recorders):
    bot = configure(
        agent_config(f"      - {{kind: command, event: pre_tool_use, command: {recorders('x').hook('--exit', '2')}}}\n")
    )
    bot.pre_tool_use("x", {}, tool_call_id="call_1")

    answer = bot.event("tool-error", tool_call_id="call_1", error="e")

    assert answer.status_code == 409
