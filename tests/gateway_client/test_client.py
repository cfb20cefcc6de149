"""GatewayClient and AsyncGatewayClient against the real gateway over HTTP:
the final decision across long-poll rounds and restarts, fail closed / open, errors, every event."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

from approvals.models import ConfirmationRequest, ToolCall
from gateway_client import (
    AlreadyDecided,
    AsyncGatewayClient,
    GatewayUnavailable,
    InvalidRequest,
    NotFound,
    Unauthorized,
)
from tests.conftest import decide
from tests.gateway_client.conftest import RestartableGateway
from tests.support import InThread, RequestLog, answers, parked, wait_until, waits

pytestmark = pytest.mark.django_db(transaction=True)


def decide_and_close(confirmation_id: str, decision: str) -> None:
    """An approver's click from a worker thread, which then gives its connection back."""
    from django.db import connection

    try:
        decide(confirmation_id, decision)
    finally:
        connection.close()


def test_an_ungated_call_is_allowed_at_once(gateway_client, live_gateway, coder_key):
    client = gateway_client(live_gateway.url, coder_key)
    decision = client.pre_tool_use("s-1", "Read", {"file_path": "/etc/hosts"}, tool_call_id="call_1", user_id="u-1")

    assert decision.allowed
    assert decision.tool_args == {"file_path": "/etc/hosts"}
    assert decision.confirmation_id is None
    assert decision.idempotency_key.startswith("gwc-")
    call = ToolCall.objects.get()
    assert (call.tool_call_id, call.user_id, call.idempotency_key) == ("call_1", "u-1", decision.idempotency_key)


def in_second_wait_round(log: RequestLog) -> Callable[[str], bool]:
    """The approver's cue: the ask and a first /wait round ended pending, and the client is parked in the next."""

    def in_second_wait_round(confirmation_id: str) -> bool:
        return len(waits(log, confirmation_id)) >= 2 and parked(confirmation_id)

    return in_second_wait_round


def assert_pending_rounds_then(answered: list[tuple[str, str]], final: str, decision: str) -> None:
    """The ask and at least one /wait round answered pending; then the round that saw `final`, and the ask again."""
    assert answered[0] == ("ask", "pending")
    assert answered[-2:] == [("wait", final), ("ask", decision)]
    rounds = answered[1:-2]
    assert rounds and set(rounds) == {("wait", "pending")}


def test_the_sync_client_returns_an_approval_that_arrives_after_the_first_long_poll_round(
    gateway_client, live_gateway, gateway_requests, coder_key, approver
):
    approver.decides("approve", when=in_second_wait_round(gateway_requests))
    client = gateway_client(live_gateway.url, coder_key, long_poll=1)

    decision = client.pre_tool_use("s-1", "Bash", {"command": "git push"})

    assert decision.allowed
    assert decision.reason == "approved by web:alice"
    assert decision.tool_args == {"command": "git push"}
    assert decision.confirmation_id == str(ConfirmationRequest.objects.get().pk)
    assert ToolCall.objects.count() == 1
    assert_pending_rounds_then(answers(gateway_requests, decision.confirmation_id), "approved", "allow")


def test_the_async_client_returns_a_rejection_that_arrives_after_the_first_long_poll_round(
    live_gateway, gateway_requests, coder_key, approver
):
    approver.decides("reject", when=in_second_wait_round(gateway_requests), reason="not on main")

    async def ask():
        async with AsyncGatewayClient(live_gateway.url, coder_key, long_poll=1) as client:
            return await client.pre_tool_use("s-1", "Bash", {"command": "git push --force"})

    decision = asyncio.run(ask())

    assert decision.denied
    assert decision.reason == "rejected by web:alice: not on main"
    assert not decision.still_pending and not decision.unreachable
    assert_pending_rounds_then(answers(gateway_requests, decision.confirmation_id), "rejected", "deny")


def parked_on(gateway: RestartableGateway, server: int) -> str:
    """Wait until the client's request is pending and the client is parked waiting on it in a request
    served by start `server` of the gateway; returns the request's id."""
    confirmation_id = str(wait_until(lambda: ConfirmationRequest.objects.values_list("pk", flat=True).first()))

    def waiting_there() -> bool:
        in_flight = [e for e in gateway.requests.exchanges(server=server) if not e.answered]
        return bool(in_flight) and parked(confirmation_id)

    wait_until(waiting_there, what=f"the client to wait on start {server} of the gateway")
    return confirmation_id


def restart_while_the_client_waits(gateway: RestartableGateway) -> str:
    """The client waits on the gateway; it stops (the request in flight gets its answer, pending), the
    client runs into the outage, a new gateway starts and the client waits on it. Returns the request's id."""
    confirmation_id = parked_on(gateway, server=1)
    gateway.stop()
    with gateway.down() as outage:
        outage.wait_for_attempts(1)
    gateway.start()
    parked_on(gateway, server=2)
    return confirmation_id


def test_the_sync_client_keeps_waiting_across_a_gateway_restart(gateway_client, restartable_gateway, coder_key):
    gateway = restartable_gateway.start()
    client = gateway_client(gateway.url, coder_key, long_poll=1)
    asking = InThread(client.pre_tool_use, "s-1", "Bash", {"command": "make deploy"})

    confirmation_id = restart_while_the_client_waits(gateway)
    decide(confirmation_id, "approve")  # after the new gateway is up
    decision = asking.result()

    assert gateway.starts == 2
    assert decision.allowed
    assert decision.reason == "approved by web:alice"
    assert ConfirmationRequest.objects.count() == 1  # reconnecting never asked twice
    before, after = answers(gateway.requests, server=1), answers(gateway.requests, server=2)
    assert before[0] == ("ask", "pending") and set(before[1:]) <= {("wait", "pending")}
    assert after[-2:] == [("wait", "approved"), ("ask", "allow")] and set(after[:-2]) <= {("wait", "pending")}


def test_the_async_client_keeps_waiting_across_a_gateway_restart(restartable_gateway, coder_key):
    gateway = restartable_gateway.start()

    async def ask():
        async with AsyncGatewayClient(gateway.url, coder_key, long_poll=1) as client:
            return await client.pre_tool_use("s-1", "Bash", {"command": "make deploy"})

    asking = InThread(asyncio.run, ask())
    confirmation_id = restart_while_the_client_waits(gateway)
    decide(confirmation_id, "reject", reason="frozen")
    decision = asking.result()

    assert gateway.starts == 2
    assert decision.denied
    assert decision.reason == "rejected by web:alice: frozen"
    assert ConfirmationRequest.objects.count() == 1
    before, after = answers(gateway.requests, server=1), answers(gateway.requests, server=2)
    assert before[0] == ("ask", "pending") and set(before[1:]) <= {("wait", "pending")}
    assert after[-2:] == [("wait", "rejected"), ("ask", "deny")] and set(after[:-2]) <= {("wait", "pending")}


def test_a_decision_made_while_the_gateway_was_down_reaches_the_client_when_it_is_back(
    gateway_client, restartable_gateway, coder_key
):
    gateway = restartable_gateway.start()
    client = gateway_client(gateway.url, coder_key, long_poll=1)
    asking = InThread(client.pre_tool_use, "s-1", "Bash", {"command": "ls"})

    confirmation_id = parked_on(gateway, server=1)
    gateway.stop()
    with gateway.down() as outage:
        decide(confirmation_id, "approve")  # the old server is gone, the new one not yet up
        outage.wait_for_attempts(1)  # and the client is trying to reach it
    gateway.start()
    decision = asking.result()

    assert decision.allowed
    assert ConfirmationRequest.objects.count() == 1
    before = answers(gateway.requests, server=1)
    assert before[0] == ("ask", "pending") and set(before[1:]) <= {("wait", "pending")}
    assert answers(gateway.requests, server=2) == [("wait", "approved"), ("ask", "allow")]


def test_a_client_that_asks_while_the_gateway_is_down_gets_its_answer_once_it_is_up(
    gateway_client, restartable_gateway, coder_key
):
    gateway = restartable_gateway  # not started yet
    client = gateway_client(gateway.url, coder_key, reconnect_for=15)

    with gateway.down() as outage:
        asking = InThread(client.pre_tool_use, "s-1", "Read", {"file_path": "a"})
        outage.wait_for_attempts(1)  # the client has asked, and found no gateway there
    gateway.start()
    decision = asking.result()

    assert decision.allowed
    assert not decision.unreachable
    assert answers(gateway.requests) == [("ask", "allow")]  # asked again once the gateway was up, and only once


def test_an_unreachable_gateway_denies_the_call_by_default(gateway_client, closed_port_url):
    client = gateway_client(closed_port_url, "gw_whatever", reconnect_for=0.5)

    started = time.monotonic()
    decision = client.pre_tool_use("s-1", "Bash", {"command": "rm -rf build"})

    assert time.monotonic() - started < 5
    assert decision.denied
    assert decision.unreachable
    assert "could not be reached" in decision.reason and "failing closed" in decision.reason
    assert decision.tool_args == {"command": "rm -rf build"}


def test_an_unreachable_gateway_allows_the_call_when_the_client_fails_open(closed_port_url):
    async def ask():
        async with AsyncGatewayClient(closed_port_url, "gw_whatever", reconnect_for=0.5, fail_open=True) as client:
            return await client.pre_tool_use("s-1", "Bash", {"command": "ls"})

    decision = asyncio.run(ask())

    assert decision.allowed
    assert decision.unreachable
    assert "fail_open" in decision.reason
    assert decision.tool_args == {"command": "ls"}


def test_fail_open_never_bypasses_a_human_who_was_already_asked(gateway_client, restartable_gateway, coder_key):
    gateway = restartable_gateway.start()

    def stop_once_asked() -> None:
        from django.db import connection

        while not ConfirmationRequest.objects.exists():
            time.sleep(0.05)
        connection.close()
        gateway.stop()  # and it stays down

    stopper = threading.Thread(target=stop_once_asked)
    stopper.start()
    client = gateway_client(gateway.url, coder_key, long_poll=1, reconnect_for=0.5, fail_open=True)

    decision = client.pre_tool_use("s-1", "Bash", {"command": "make deploy"})
    stopper.join()

    assert decision.denied and decision.unreachable
    assert decision.confirmation_id == str(ConfirmationRequest.objects.get().pk)


def test_a_call_still_pending_at_the_deadline_is_denied_and_its_key_later_picks_up_the_approval(
    gateway_client, live_gateway, coder_key
):
    client = gateway_client(live_gateway.url, coder_key, max_wait=1)

    first = client.pre_tool_use("s-1", "Bash", {"command": "deploy"})
    decide(first.confirmation_id, "approve")
    again = client.pre_tool_use("s-1", "Bash", {"command": "deploy"}, idempotency_key=first.idempotency_key)

    assert first.denied and first.still_pending
    assert "still pending" in first.reason and first.confirmation_id in first.reason
    assert again.allowed
    assert again.confirmation_id == first.confirmation_id
    assert ConfirmationRequest.objects.count() == 1


def test_a_completed_idempotent_call_is_skipped_with_its_stored_result(gateway_client, live_gateway, coder_key):
    client = gateway_client(live_gateway.url, coder_key)
    client.pre_tool_use("s-1", "Read", {"file_path": "a"}, tool_call_id="call_7", idempotency_key="k-7")
    client.post_tool_use("s-1", "call_7", result={"text": "hello"}, duration_ms=3)

    decision = client.pre_tool_use("s-1", "Read", {"file_path": "a"}, tool_call_id="call_7", idempotency_key="k-7")

    assert decision.skipped
    assert decision.result == {"text": "hello"}


def test_api_errors_raise_with_the_contracts_code_message_and_details(gateway_client, live_gateway, coder_key):
    client = gateway_client(live_gateway.url, coder_key)

    with pytest.raises(Unauthorized) as bad_key:
        gateway_client(live_gateway.url, "gw_not-a-key").pre_tool_use("s-1", "Read", {})
    with pytest.raises(InvalidRequest) as invalid:
        client.pre_tool_use("s-1", "Read", {}, metadata={"x": 1}, callback_url="not a url")
    with pytest.raises(NotFound):
        client.get_confirmation("7b0c1b9e-0000-4000-8000-000000000000")
    pending = client.pre_tool_use("s-1", "Bash", {"command": "x"}, max_wait=0)
    client.cancel(pending.confirmation_id)
    with pytest.raises(AlreadyDecided) as twice:
        client.cancel(pending.confirmation_id)

    assert (bad_key.value.status_code, bad_key.value.code) == (401, "unauthorized")
    assert invalid.value.status_code == 400 and "callback_url" in invalid.value.details
    assert twice.value.code == "already_decided" and twice.value.details == {"status": "cancelled"}


def test_the_thin_methods_cover_every_lifecycle_event_and_the_confirmation_calls(
    gateway_client, live_gateway, coder_key
):
    client = gateway_client(live_gateway.url, coder_key)

    started = client.session_start("s-9", user_id="u-1", metadata={"org": "acme"})
    turn = client.pre_turn("s-9", turn_id="t-1")
    allowed = client.pre_tool_use("s-9", "Read", {"file_path": "a"}, tool_call_id="call_1")
    reported = client.post_tool_use("s-9", "call_1", result={"ok": True}, duration_ms=12)
    failed = client.tool_error("s-9", "call_1", "boom", attempt=1)
    after_turn = client.post_turn("s-9", turn_id="t-1")
    ended = client.session_end("s-9")
    pending = client.pre_tool_use("s-9", "Bash", {"command": "x"}, max_wait=0)
    detail = client.get_confirmation(pending.confirmation_id)
    still = client.wait(pending.confirmation_id, timeout=0.2)
    cancelled = client.cancel(pending.confirmation_id)

    assert started["decision"] == "allow" and started["messages"] == []
    assert turn["decision"] == "allow"
    assert allowed.allowed
    assert reported["result"] == {"ok": True}
    assert failed["action"] == "raise"
    assert "side_effects" in after_turn and "side_effects" in ended
    assert detail["status"] == "pending" and detail["tool_args"] == {"command": "x"}
    assert still["status"] == "pending"
    assert cancelled["status"] == "cancelled"
    assert ToolCall.objects.get(tool_call_id="call_1").result == {"ok": True}


def test_the_async_thin_methods_answer_like_the_sync_ones(live_gateway, coder_key):
    async def run():
        async with AsyncGatewayClient(live_gateway.url, coder_key) as client:
            pending = await client.pre_tool_use("s-2", "Bash", {"command": "x"}, max_wait=0)
            await asyncio.to_thread(decide_and_close, pending.confirmation_id, "approve")
            final = await client.wait(pending.confirmation_id, timeout=5)
            return pending, final, await client.session_end("s-2")

    pending, final, ended = asyncio.run(run())

    assert pending.still_pending
    assert final["status"] == "approved" and final["decided_by"] == "web:alice"
    assert "side_effects" in ended


def test_a_thin_call_to_an_unreachable_gateway_raises_gateway_unavailable(gateway_client, closed_port_url):
    with pytest.raises(GatewayUnavailable):
        gateway_client(closed_port_url, "gw_x", reconnect_for=0.3).session_start("s-1")
