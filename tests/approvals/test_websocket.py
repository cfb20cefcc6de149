"""WebSocket /ws/v1/confirmations/<id> over a real server and a real database:
every state change pushed, closed after the final one, strangers refused."""

from __future__ import annotations

import json
import threading
import time

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.conftest import AgentClient, apply_config, decide, make_agent_client
from tests.support import rewrite_request

pytestmark = pytest.mark.django_db(transaction=True)

QUORUM_CONFIG = """
channels:
  - {name: web, kind: web}
agents:
  - name: quorum-bot
    hooks:
      - kind: approval_gate
        name: two-keys
        channel: web
        approvers: ["a", "b"]
        approvals_required: 2
"""


def ws_url(agent: AgentClient, confirmation_id: str, query: str = "") -> str:
    base = agent.http.base_url
    return f"ws://{base.host}:{base.port}/ws/v1/confirmations/{confirmation_id}{query}"


def open_socket(agent: AgentClient, confirmation_id: str, *, key: str | None = None, **kwargs) -> ClientConnection:
    headers = {"Authorization": f"Bearer {key if key is not None else agent.key}"}
    return connect(ws_url(agent, confirmation_id), additional_headers=headers, open_timeout=10, **kwargs)


def receive(ws: ClientConnection, timeout: float = 5) -> dict:
    return json.loads(ws.recv(timeout=timeout))


def close_code(ws: ClientConnection, timeout: float = 5) -> int:
    """Read until the server closes; the close code it sent."""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ws.recv(timeout=max(deadline - time.monotonic(), 0.01))
    except ConnectionClosed as closed:
        assert closed.rcvd is not None, "the server did not send a close frame"
        return closed.rcvd.code
    raise AssertionError("the server did not close the socket")


def decide_in_thread(confirmation_id: str, decision: str, **kw) -> threading.Thread:
    """Decide from another thread, giving its database connection back afterwards."""
    from django.db import connection

    def run() -> None:
        try:
            decide(confirmation_id, decision, **kw)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def ask(agent: AgentClient, **extra) -> str:
    body = agent.pre_tool_use("oa__purchase_pay", {"amount": 80000}, **extra).json()
    assert body["decision"] == "pending"
    return body["confirmation_id"]


def test_the_websocket_sends_the_pending_state_then_the_decision_and_closes(agent):
    confirmation_id = ask(agent)

    with open_socket(agent, confirmation_id) as ws:
        first = receive(ws)
        decided_at = time.monotonic()
        decide(confirmation_id, "approve", actor="alice")
        second = receive(ws)
        pushed_after = time.monotonic() - decided_at
        code = close_code(ws)

    assert (first["id"], first["status"], first["decided_by"]) == (confirmation_id, "pending", None)
    assert first["tool_args"] == {"amount": 80000}
    assert (second["status"], second["decided_by"]) == ("approved", "web:alice")
    assert second["approved_by"] == ["web:alice"]
    assert pushed_after < 2  # pushed by the NOTIFY, not found by the 5 s re-check
    assert code == 1000


def test_a_rejection_reaches_the_socket_with_its_reason(agent):
    confirmation_id = ask(agent)

    with open_socket(agent, confirmation_id) as ws:
        assert receive(ws)["status"] == "pending"
        decide(confirmation_id, "reject", actor="bob", reason="not this quarter")
        decided = receive(ws)
        code = close_code(ws)

    assert (decided["status"], decided["decided_by"], decided["reason"]) == ("rejected", "web:bob", "not this quarter")
    assert code == 1000


def test_each_quorum_approval_is_pushed_before_the_final_one(live_gateway, transactional_db):
    from django.conf import settings

    apply_config(QUORUM_CONFIG)
    agent = make_agent_client(live_gateway, "quorum-bot")
    confirmation_id = ask(agent)
    # The counted approval changes no status; if the service does not NOTIFY it,
    # the socket's periodic re-check still finds it.
    counted_within = settings.GATEWAY_WAIT_RECHECK_SECONDS + 3

    with open_socket(agent, confirmation_id) as ws:
        pending = receive(ws)
        decide(confirmation_id, "approve", actor="a")
        counted = receive(ws, timeout=counted_within)
        decide(confirmation_id, "approve", actor="b")
        final = receive(ws)
        code = close_code(ws)

    assert (pending["status"], pending["approvals_required"], pending["approved_by"]) == ("pending", 2, [])
    assert (counted["status"], counted["approved_by"]) == ("pending", ["web:a"])
    assert (final["status"], final["approved_by"], final["decided_by"]) == ("approved", ["web:a", "web:b"], "web:b")
    assert code == 1000


def test_an_agent_connecting_after_the_decision_gets_it_at_once(agent):
    confirmation_id = ask(agent)
    decide(confirmation_id, "approve", actor="bob")

    started = time.monotonic()
    with open_socket(agent, confirmation_id) as ws:
        state = receive(ws, timeout=2)
        code = close_code(ws, timeout=2)

    assert (state["status"], state["decided_by"]) == ("approved", "web:bob")
    assert code == 1000
    assert time.monotonic() - started < 2


def test_cancelling_over_the_api_is_pushed_to_the_socket(agent):
    confirmation_id = ask(agent)

    with open_socket(agent, confirmation_id) as ws:
        assert receive(ws)["status"] == "pending"
        assert agent.http.post(f"/api/v1/confirmations/{confirmation_id}/cancel").status_code == 200
        cancelled = receive(ws)
        code = close_code(ws)

    assert cancelled["status"] == "cancelled"
    assert code == 1000


def test_several_sockets_on_one_request_are_all_woken(agent):
    confirmation_id = ask(agent)
    sockets = [open_socket(agent, confirmation_id) for _ in range(5)]
    try:
        assert [receive(ws)["status"] for ws in sockets] == ["pending"] * 5
        decide(confirmation_id, "approve", actor="alice")
        assert [receive(ws)["status"] for ws in sockets] == ["approved"] * 5
    finally:
        for ws in sockets:
            ws.close()


def test_a_decision_whose_notification_was_lost_still_reaches_the_socket(agent):
    """NOTIFY is a hint: a decision committed without one is found by the process's periodic re-check."""
    from django.conf import settings
    from django.utils import timezone

    from approvals.models import ConfirmationRequest

    confirmation_id = ask(agent)

    with open_socket(agent, confirmation_id) as ws:
        assert receive(ws)["status"] == "pending"
        # Committed with no pg_notify, as if the notification had been lost.
        rewrite_request(confirmation_id, status="approved", decided_by="web:alice", decided_at=timezone.now())
        decided = receive(ws, timeout=2 * settings.GATEWAY_WAIT_RECHECK_SECONDS + 2)
        code = close_code(ws)

    assert (decided["status"], decided["decided_by"]) == ("approved", "web:alice")
    assert code == 1000


def test_a_bad_key_is_refused_with_4401(agent):
    confirmation_id = ask(agent)

    with open_socket(agent, confirmation_id, key="gw_not-a-key") as ws:
        assert close_code(ws) == 4401


def test_a_missing_key_is_refused_with_4401(agent):
    confirmation_id = ask(agent)

    with connect(ws_url(agent, confirmation_id), open_timeout=10) as ws:
        assert close_code(ws) == 4401


def test_a_revoked_key_is_refused_with_4401(agent):
    from approvals import services
    from approvals.models import ApiKey

    confirmation_id = ask(agent)
    services.api_key_revoke(api_key=ApiKey.objects.get(key_hash=ApiKey.hash_key(agent.key)))

    with open_socket(agent, confirmation_id) as ws:
        assert close_code(ws) == 4401


def test_another_agents_confirmation_is_refused_with_4404_and_tells_nothing(agent, other_agent):
    confirmation_id = ask(agent)

    with open_socket(other_agent, confirmation_id) as ws:
        code = close_code(ws)
        # Nothing about the request was sent before the close.

    assert code == 4404


@pytest.mark.parametrize("raw_id", ["6f1c2e1a-0000-4000-8000-000000000001", "not-a-uuid"])
def test_an_unknown_id_is_refused_with_4404(agent, raw_id):
    with open_socket(agent, raw_id) as ws:
        assert close_code(ws) == 4404


def test_browsers_can_send_the_key_as_a_subprotocol_and_it_is_not_echoed(agent):
    confirmation_id = ask(agent)

    with connect(
        ws_url(agent, confirmation_id), subprotocols=["gateway.v1", f"bearer.{agent.key}"], open_timeout=10
    ) as ws:
        state = receive(ws)
        assert ws.subprotocol == "gateway.v1"

    assert state["status"] == "pending"


def test_the_key_can_be_a_query_parameter(agent):
    confirmation_id = ask(agent)

    with connect(ws_url(agent, confirmation_id, f"?api_key={agent.key}"), open_timeout=10) as ws:
        assert receive(ws)["status"] == "pending"


def test_a_request_expiring_while_the_socket_is_open_is_pushed_as_expired(live_gateway, transactional_db):
    apply_config(
        """
channels: [{name: web, kind: web}]
agents:
  - name: quick
    hooks: [{kind: approval_gate, channel: web, timeout_seconds: 1, on_timeout: deny}]
"""
    )
    agent = make_agent_client(live_gateway, "quick")
    confirmation_id = agent.pre_tool_use("anything", {}).json()["confirmation_id"]

    with open_socket(agent, confirmation_id) as ws:
        assert receive(ws)["status"] == "pending"
        expired = receive(ws, timeout=5)  # the socket expires it at the deadline itself
        code = close_code(ws)

    assert expired["status"] == "expired"
    assert code == 1000


def test_a_decision_racing_the_connection_is_never_missed(agent):
    """Decide while sockets are connecting: each one still ends with the decision."""
    for _ in range(5):
        confirmation_id = ask(agent)
        with open_socket(agent, confirmation_id) as ws:
            decider = decide_in_thread(confirmation_id, "approve", actor="alice")
            states = []
            try:
                while True:
                    states.append(receive(ws)["status"])
            except ConnectionClosed as closed:
                assert closed.rcvd is not None and closed.rcvd.code == 1000
        decider.join()
        assert states[-1] == "approved"
