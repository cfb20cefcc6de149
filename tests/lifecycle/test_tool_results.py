"""After the call: results cut to size, rewritten by hooks, recorded once, and replayed
(`skip`) to an agent that retries a call which already completed."""

from __future__ import annotations

import json

import pytest

from approvals.models import ToolCall
from tests.lifecycle.conftest import agent_config

pytestmark = pytest.mark.django_db(transaction=True)

TRUNCATE_20 = "      - {kind: truncate_result, name: cut, max_chars: 20}\n"


def test_an_oversized_result_is_cut_with_a_marker_and_its_full_size_recorded(configure):
    bot = configure(agent_config(TRUNCATE_20))
    bot.pre_tool_use("fs__read", {"path": "/var/log/big"}, tool_call_id="call_1")
    big = "x" * 5000

    answer = bot.event("post-tool-use", tool_call_id="call_1", result=big).json()

    assert answer["result"] == "x" * 20 + "\n[truncated by the gateway: showing the first 20 of 5000 characters]"
    assert answer["side_effects"] == ["result_truncated:cut:5000"]
    call = ToolCall.objects.get()
    assert call.result_size == 5000
    assert call.result == answer["result"]  # what the model got is what is kept


def test_a_structured_result_is_cut_as_its_json_text(configure):
    bot = configure(agent_config(TRUNCATE_20))
    bot.pre_tool_use("db__query", {}, tool_call_id="call_1")
    rows = {"rows": [{"id": n, "name": f"customer {n}"} for n in range(50)]}

    answer = bot.event("post-tool-use", tool_call_id="call_1", result=rows).json()

    full = json.dumps(rows, ensure_ascii=False)
    assert answer["result"].startswith(full[:20] + "\n[truncated by the gateway")
    assert ToolCall.objects.get().result_size == len(full)


def test_a_result_within_the_limit_reaches_the_model_untouched(configure):
    bot = configure(agent_config(TRUNCATE_20))
    bot.pre_tool_use("fs__read", {}, tool_call_id="call_1")

    answer = bot.event("post-tool-use", tool_call_id="call_1", result={"ok": True}).json()

    assert answer == {"result": {"ok": True}, "side_effects": []}


def test_a_hook_rewrites_the_result_and_later_hooks_see_the_rewrite(configure, recorders):
    upper = recorders("upper")
    bot = configure(
        agent_config(
            f"""      - {{kind: command, name: shout, event: post_tool_use, priority: 10,
           command: {upper.hook("--upper-result")}}}
      - {{kind: truncate_result, name: cut, priority: 20, max_chars: 11}}
"""
        )
    )
    bot.pre_tool_use("web__fetch", {}, tool_call_id="call_1")

    answer = bot.event("post-tool-use", tool_call_id="call_1", result="hello world and more").json()

    assert answer["result"] == "HELLO WORLD\n[truncated by the gateway: showing the first 11 of 20 characters]"
    assert upper.events()[0]["result"] == "hello world and more"  # the hook saw the tool's own result
    call = ToolCall.objects.get()
    assert call.result == answer["result"]
    assert call.result_size == 20  # the size of what the tool returned


def test_a_repeated_post_tool_use_does_not_run_the_hooks_again(configure, recorders):
    observer = recorders("observer")
    bot = configure(
        agent_config(f"      - {{kind: command, event: post_tool_use, command: {observer.hook('--upper-result')}}}\n")
    )
    bot.pre_tool_use("x", {}, tool_call_id="call_1")

    first = bot.event("post-tool-use", tool_call_id="call_1", result="once").json()
    second = bot.event("post-tool-use", tool_call_id="call_1", result="twice").json()

    assert first == {"result": "ONCE", "side_effects": []}
    assert second == {"result": "ONCE", "side_effects": ["already_completed"]}
    assert len(observer.events()) == 1


def pay(bot, **extra):
    return bot.pre_tool_use(
        "oa__purchase_pay", {"amount": 80000}, tool_call_id="call_1", idempotency_key="order-17", **extra
    )


def test_a_repeated_idempotent_call_that_completed_is_answered_skip_with_its_stored_result(configure):
    bot = configure(agent_config(TRUNCATE_20))
    assert pay(bot).json()["decision"] == "allow"
    done = bot.event("post-tool-use", tool_call_id="call_1", result={"payment_id": "pay_123", "status": "paid"})

    again = pay(bot)

    assert again.status_code == 200
    body = again.json()
    assert body["decision"] == "skip"
    assert body["result"] == done.json()["result"]  # the result as the model first got it (here: cut)
    assert body["result"].startswith('{"payment_id": "pay_')
    assert body["tool_args"] == {"amount": 80000}
    assert "idempotent_replay" in body["side_effects"]
    assert ToolCall.objects.count() == 1  # no second call recorded, nothing paid twice


def test_an_idempotent_call_is_not_skipped_before_it_completes(configure):
    bot = configure(agent_config("      []\n"))
    pay(bot)

    again = pay(bot).json()

    assert again["decision"] == "allow"
    assert "result" not in again


def test_an_idempotent_call_that_failed_is_not_skipped(configure):
    bot = configure(agent_config("      []\n"))
    pay(bot)
    bot.event("post-tool-use", tool_call_id="call_1", result="card declined", outcome="error")

    again = pay(bot).json()

    assert again["decision"] == "allow"


def test_the_skip_window_is_configurable(configure, settings):
    bot = configure(agent_config("      []\n"))
    pay(bot)
    bot.event("post-tool-use", tool_call_id="call_1", result="paid")

    settings.GATEWAY_IDEMPOTENT_SKIP_WINDOW_SECONDS = 0  # completed longer ago than the window
    outside = pay(bot).json()
    settings.GATEWAY_IDEMPOTENT_SKIP_WINDOW_SECONDS = 3600
    inside = pay(bot).json()

    assert outside["decision"] == "allow"
    assert (inside["decision"], inside["result"]) == ("skip", "paid")
