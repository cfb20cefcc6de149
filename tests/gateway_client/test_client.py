"""GatewayClient and AsyncGatewayClient against the real gateway over HTTP:
the final decision across long-poll rounds and restarts, fail closed / open, errors, every event."""

from __future__ import annotations

import asyncio
import threading
import time

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


def test_the_sync_client_returns_an_approval_that_arrives_after_the_first_long_poll_round(
    gateway_client, live_gateway, coder_key, approver
):
    approver.decides("approve", after=2.5)
    client = gateway_client(live_gateway.url, coder_key, long_poll=1)

    started = time.monotonic()
    decision = client.pre_tool_use("s-1", "Bash", {"command": "git push"})

    assert time.monotonic() - started >= 2.5  # the ask (1 s) and at least one /wait round (1 s) ended pending first
    assert decision.allowed
    assert decision.reason == "approved by web:alice"
    assert decision.tool_args == {"command": "git push"}
    assert decision.confirmation_id == str(ConfirmationRequest.objects.get().pk)
    assert ToolCall.objects.count() == 1


def test_the_async_client_returns_a_rejection_that_arrives_after_the_first_long_poll_round(
    live_gateway, coder_key, approver
):
    approver.decides("reject", after=2.5, reason="not on main")

    async def ask():
        async with AsyncGatewayClient(live_gateway.url, coder_key, long_poll=1) as client:
            started = time.monotonic()
            decision = await client.pre_tool_use("s-1", "Bash", {"command": "git push --force"})
            return decision, time.monotonic() - started

    decision, waited = asyncio.run(ask())

    assert waited >= 2.5
    assert decision.denied
    assert decision.reason == "rejected by web:alice: not on main"
    assert not decision.still_pending and not decision.unreachable


def test_the_sync_client_keeps_waiting_across_a_gateway_restart(
    gateway_client, restartable_gateway, coder_key, approver
):
    gateway = restartable_gateway.start()
    restart = gateway.restart_later(after=1.5, downtime=1.5)
    approver.decides("approve", after=4.5)  # after the new gateway is up
    client = gateway_client(gateway.url, coder_key, long_poll=1)

    decision = client.pre_tool_use("s-1", "Bash", {"command": "make deploy"})
    restart.join()

    assert gateway.starts == 2
    assert decision.allowed
    assert decision.reason == "approved by web:alice"
    assert ConfirmationRequest.objects.count() == 1  # reconnecting never asked twice


def test_the_async_client_keeps_waiting_across_a_gateway_restart(restartable_gateway, coder_key, approver):
    gateway = restartable_gateway.start()
    restart = gateway.restart_later(after=1.5, downtime=1.5)
    approver.decides("reject", after=4.5, reason="frozen")

    async def ask():
        async with AsyncGatewayClient(gateway.url, coder_key, long_poll=1) as client:
            return await client.pre_tool_use("s-1", "Bash", {"command": "make deploy"})

    decision = asyncio.run(ask())
    restart.join()

    assert gateway.starts == 2
    assert decision.denied
    assert decision.reason == "rejected by web:alice: frozen"
    assert ConfirmationRequest.objects.count() == 1


def test_a_decision_made_while_the_gateway_was_down_reaches_the_client_when_it_is_back(
    gateway_client, restartable_gateway, coder_key, approver
):
    gateway = restartable_gateway.start()
    restart = gateway.restart_later(after=0.5, downtime=2.5)
    approver.decides("approve", after=2.5)  # the old server is gone by then, the new one not yet up
    client = gateway_client(gateway.url, coder_key, long_poll=1)

    decision = client.pre_tool_use("s-1", "Bash", {"command": "ls"})
    restart.join()

    assert decision.allowed
    assert ConfirmationRequest.objects.count() == 1


def test_a_client_that_asks_while_the_gateway_is_down_gets_its_answer_once_it_is_up(
    gateway_client, restartable_gateway, coder_key
):
    gateway = restartable_gateway  # not started yet
    starter = threading.Thread(target=lambda: (time.sleep(1.0), gateway.start()))
    starter.start()

    decision = gateway_client(gateway.url, coder_key, reconnect_for=15).pre_tool_use("s-1", "Read", {"file_path": "a"})
    starter.join()

    assert decision.allowed
    assert not decision.unreachable


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
