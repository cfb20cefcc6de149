"""The `rate_limit` kind over the agent API: exact under concurrent calls, per user/session/agent,
and a deny that says when to retry."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.utils import timezone

from approvals.models import ToolCall
from hooks.models import HookState
from approvals.tasks import run_timers
from tests.conftest import apply_config, make_agent_client
from tests.hooks.policy_support import apply_example

pytestmark = pytest.mark.django_db(transaction=True)



@pytest.fixture
def crm_reader(live_gateway, transactional_db):
    apply_example("rate_limit")
    return make_agent_client(live_gateway, "crm-reader")


def limited(agent: str, limit: int, window: int, per: str) -> str:
    return f"""
channels: []
agents:
  - name: {agent}
    hooks: [{{kind: rate_limit, name: rl, limit: {limit}, window_seconds: {window}, per: {per}}}]
"""


def test_the_example_allows_ten_calls_a_minute_per_user_and_says_when_to_retry(crm_reader):
    decisions = [crm_reader.pre_tool_use("crm__search", {"q": n}, user_id="u-1").json() for n in range(11)]

    assert [d["decision"] for d in decisions] == ["allow"] * 10 + ["deny"]
    reason = decisions[-1]["reason"]
    assert reason.startswith("rate limit of 10 calls per 60 s per user reached (crm-per-user); retry in ")
    wait = int(reason.rsplit("retry in ", 1)[1].removesuffix(" seconds"))
    assert 55 <= wait <= 60
    assert ToolCall.objects.filter(decision="deny").get().decided_by_hook == "crm-per-user"


def test_the_example_counts_each_user_apart_and_only_crm_tools(crm_reader):
    for n in range(10):
        crm_reader.pre_tool_use("crm__search", {"q": n}, user_id="u-1")

    assert crm_reader.pre_tool_use("crm__search", {}, user_id="u-1").json()["decision"] == "deny"
    assert crm_reader.pre_tool_use("crm__search", {}, user_id="u-2").json()["decision"] == "allow"
    assert crm_reader.pre_tool_use("web__search", {}, user_id="u-1").json()["decision"] == "allow"


def test_fifty_concurrent_calls_against_a_limit_of_ten_allow_exactly_ten(crm_reader):
    start = threading.Barrier(50)
    decisions: list[str] = []
    lock = threading.Lock()

    def call(n: int) -> None:
        start.wait()
        decision = crm_reader.pre_tool_use("crm__search", {"n": n}, user_id="u-race").json()["decision"]
        with lock:
            decisions.append(decision)

    threads = [threading.Thread(target=call, args=(n,)) for n in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(decisions) == ["allow"] * 10 + ["deny"] * 40
    assert ToolCall.objects.filter(decision="allow").count() == 10
    state = HookState.objects.get(scope="rate_limit:crm-per-user")
    assert (state.key, state.counter) == ("user:u-race", 10)


def test_the_deny_counts_down_the_seconds_left_in_the_window(live_gateway, transactional_db):
    apply_config(limited("countdown", 1, 3600, "agent"))
    agent = make_agent_client(live_gateway, "countdown")
    agent.pre_tool_use("t")
    HookState.objects.update(expires_at=timezone.now() + dt.timedelta(seconds=7))

    reason = agent.pre_tool_use("t").json()["reason"]

    assert reason.endswith("retry in 7 seconds") or reason.endswith("retry in 6 seconds")


def test_a_window_that_has_ended_starts_again(live_gateway, transactional_db):
    apply_config(limited("windows", 2, 60, "user"))
    agent = make_agent_client(live_gateway, "windows")
    for _ in range(3):
        agent.pre_tool_use("t", user_id="u")
    HookState.objects.update(expires_at=timezone.now() - dt.timedelta(seconds=1))  # the minute is over

    assert [agent.pre_tool_use("t", user_id="u").json()["decision"] for _ in range(3)] == ["allow", "allow", "deny"]
    assert HookState.objects.get().counter == 2


def test_per_session_counts_each_session_apart(live_gateway, transactional_db):
    apply_config(limited("sessions", 1, 60, "session"))
    agent = make_agent_client(live_gateway, "sessions")

    assert agent.pre_tool_use("t", session_id="s-a", user_id="u").json()["decision"] == "allow"
    assert agent.pre_tool_use("t", session_id="s-a", user_id="u").json()["decision"] == "deny"
    assert agent.pre_tool_use("t", session_id="s-b", user_id="u").json()["decision"] == "allow"


def test_per_agent_counts_every_user_together_and_agents_apart(live_gateway, transactional_db):
    apply_config(limited("shared-a", 2, 60, "agent"))
    apply_config(limited("shared-b", 2, 60, "agent"))
    a = make_agent_client(live_gateway, "shared-a")
    b = make_agent_client(live_gateway, "shared-b")

    assert [a.pre_tool_use("t", user_id=u).json()["decision"] for u in ("u1", "u2", "u3")] == ["allow", "allow", "deny"]
    assert b.pre_tool_use("t", user_id="u1").json()["decision"] == "allow"


def test_a_very_long_user_id_is_counted_under_its_hash(live_gateway, transactional_db):
    apply_config(limited("long-ids", 1, 60, "user"))
    agent = make_agent_client(live_gateway, "long-ids")
    user = "u" * 200

    assert agent.pre_tool_use("t", user_id=user).json()["decision"] == "allow"
    assert agent.pre_tool_use("t", user_id=user).json()["decision"] == "deny"
    assert HookState.objects.get().key.startswith("user:sha256:")


def test_the_timers_task_drops_counters_whose_window_ended_an_hour_ago(live_gateway, transactional_db):
    apply_config(limited("tidy", 5, 60, "user"))
    agent = make_agent_client(live_gateway, "tidy")
    agent.pre_tool_use("t", user_id="old")
    agent.pre_tool_use("t", user_id="recent")
    HookState.objects.filter(key="user:old").update(expires_at=timezone.now() - dt.timedelta(hours=2))

    assert run_timers.apply().get()["counters_purged"] == 1
    assert list(HookState.objects.values_list("key", flat=True)) == ["user:recent"]


def test_a_check_only_run_refuses_while_the_window_is_full_and_never_counts(transactional_db):
    """An approver's edit judged again (`HookContext.check_only`): the window as it is, nothing taken."""
    from hooks.base import HookContext
    from hooks.registry import build, validate_agent_hooks

    (hook,) = build(validate_agent_hooks([{"kind": "rate_limit", "name": "rl", "limit": 2, "window_seconds": 60}]))
    now = timezone.now()

    def run(check_only: bool, at: dt.datetime = now) -> str:
        ctx = HookContext(event="pre_tool_use", agent="bot", user_id="u-1", tool_name="t", now=at, check_only=check_only)
        return hook.run(ctx).decision

    counter = HookState.objects.filter(agent="bot", scope="rate_limit:rl")
    assert run(check_only=True) == "none" and not counter.exists()  # no window yet: room, nothing written
    assert [run(check_only=False), run(check_only=True)] == ["none", "none"]
    assert counter.get().counter == 1
    assert [run(check_only=False), run(check_only=True)] == ["none", "deny"]  # full: refused, still 2
    assert counter.get().counter == 2
    assert run(check_only=True, at=now + dt.timedelta(seconds=61)) == "none"  # the window ended: room again
    assert counter.get().counter == 2
