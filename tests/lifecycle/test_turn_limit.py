"""`turn_limit` at pre-turn: at most `max_turns` per session, counted exactly under concurrency."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from approvals import services
from approvals.models import Agent
from tests.lifecycle.conftest import agent_config

pytestmark = pytest.mark.django_db(transaction=True)

LIMIT_2 = "      - {kind: turn_limit, name: two-turns, max_turns: 2}\n"


def test_turns_beyond_max_turns_are_denied(configure):
    bot = configure(agent_config(LIMIT_2))

    answers = [bot.event("pre-turn", turn_id=f"t-{n}").json() for n in range(1, 5)]

    assert [a["decision"] for a in answers] == ["allow", "allow", "deny", "deny"]
    assert answers[2]["reason"] == "this session has used all 2 of its turns (two-turns)"
    assert answers[2]["messages"] == []


def test_each_session_has_its_own_turns(configure):
    bot = configure(agent_config(LIMIT_2))
    for n in range(2):
        bot.event("pre-turn", session_id="s-a", turn_id=f"t-{n}")

    assert bot.event("pre-turn", session_id="s-a", turn_id="t-9").json()["decision"] == "deny"
    assert bot.event("pre-turn", session_id="s-b", turn_id="t-0").json()["decision"] == "allow"


def test_a_repeated_pre_turn_with_the_same_turn_id_is_counted_once(configure):
    bot = configure(agent_config(LIMIT_2))

    first = [bot.event("pre-turn", turn_id="t-1").json()["decision"] for _ in range(3)]
    second = bot.event("pre-turn", turn_id="t-2").json()["decision"]
    third = bot.event("pre-turn", turn_id="t-3").json()["decision"]

    assert (first, second, third) == (["allow"] * 3, "allow", "deny")


def test_ending_the_session_does_not_reset_its_turns(configure):
    bot = configure(agent_config(LIMIT_2))
    bot.event("pre-turn", turn_id="t-1")
    bot.event("pre-turn", turn_id="t-2")

    bot.event("session-end")
    bot.event("session-start")

    assert bot.event("pre-turn", turn_id="t-3").json()["decision"] == "deny"


def test_concurrent_turns_are_counted_exactly(configure):
    configure(agent_config("      - {kind: turn_limit, max_turns: 5}\n"))
    agent = Agent.objects.get(name="bot")
    barrier = threading.Barrier(12)
    decisions: list[str] = []

    def turn(n: int) -> None:
        try:
            barrier.wait()
            answer = services.hook_event_run(agent=agent, event="pre_turn", session_id="s-race", turn_id=f"t-{n}")
            decisions.append(answer["decision"])
        finally:
            connection.close()

    threads = [threading.Thread(target=turn, args=(n,)) for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(decisions) == ["allow"] * 5 + ["deny"] * 7



def test_pre_turns_without_a_turn_id_each_count(configure):
    bot = configure(agent_config(LIMIT_2))
    bot.event("pre-turn", turn_id="t-1")

    answers = [bot.event("pre-turn").json()["decision"] for _ in range(2)]

    assert answers == ["allow", "deny"]  # not mistaken for a repeat of the last turn
