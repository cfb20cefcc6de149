"""Decision webhooks: a pre-tool-use `callback_url` gets the final decision POSTed,
signed per Standard Webhooks, retried from the outbox, every attempt recorded.

The receiver is a real HTTP server on 127.0.0.1; delivery runs on a real Celery worker."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from approvals.models import ConfirmationEvent, Outbox
from tests.conftest import AgentClient, decide
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


class Receiver:
    """An agent's webhook endpoint: records every POST and answers the statuses it is given, then 200
    (with `hold_until`: the first answer only once that event is set)."""

    def __init__(
        self,
        statuses: list[int] | None = None,
        headers: dict[str, str] | None = None,
        hold_until: threading.Event | None = None,
    ) -> None:
        self.statuses = deque(statuses or [])
        self.extra_headers = headers or {}
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.arrived = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                with receiver.arrived:
                    status = receiver.statuses.popleft() if receiver.statuses else 200
                    receiver.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                    first = len(receiver.requests) == 1
                    receiver.arrived.notify_all()
                if first and hold_until is not None:
                    hold_until.wait(timeout=60)
                self.send_response(status)
                for name, value in receiver.extra_headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/gateway"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def wait_for(self, count: int, timeout: float = 15) -> list[tuple[dict[str, str], bytes]]:
        with self.arrived:
            if not self.arrived.wait_for(lambda: len(self.requests) >= count, timeout=timeout):
                raise AssertionError(f"{len(self.requests)} webhook(s) arrived, expected {count}")
            return list(self.requests)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    r.thread.start()
    yield r
    r.server.shutdown()
    r.server.server_close()


def start_receiver(
    statuses: list[int], headers: dict[str, str] | None = None, hold_until: threading.Event | None = None
) -> Receiver:
    r = Receiver(statuses, headers, hold_until)
    r.thread.start()
    return r


def ask_with_callback(agent: AgentClient, url: str) -> str:
    body = agent.pre_tool_use("oa__purchase_pay", {"amount": 80000}, tool_call_id="call_7", callback_url=url).json()
    assert body["decision"] == "pending"
    return body["confirmation_id"]


def webhook_events(confirmation_id: str, until_kind: str, timeout: float = 10) -> list[ConfirmationEvent]:
    """The request's webhook events, once one of kind `until_kind` is recorded."""
    deadline = time.monotonic() + timeout
    while True:
        events = list(
            ConfirmationEvent.objects.filter(confirmation_id=confirmation_id, kind__startswith="webhook_").order_by("id")
        )
        if any(e.kind == until_kind for e in events) or time.monotonic() > deadline:
            return events
        time.sleep(0.05)


def test_the_decision_arrives_signed_and_verifiable(agent, receiver, celery_worker):
    confirmation_id = ask_with_callback(agent, receiver.url)

    decide(confirmation_id, "approve", actor="alice")
    [(headers, body)] = receiver.wait_for(1)

    payload = Webhook(agent.agent.webhook_secret).verify(body, headers)
    assert payload["type"] == "confirmation.decided"
    assert (payload["decision"], payload["reason"]) == ("allow", "approved by web:alice")
    assert payload["confirmation"]["id"] == confirmation_id
    assert (payload["confirmation"]["status"], payload["confirmation"]["decided_by"]) == ("approved", "web:alice")
    assert payload["confirmation"]["decided_by_name"] == "alice"
    assert (payload["tool_call_id"], payload["session_id"]) == ("call_7", "s-1")
    assert headers["webhook-id"] == "msg_" + confirmation_id.replace("-", "")
    assert headers["content-type"] == "application/json"
    assert [(e.kind, e.data["attempt"]) for e in webhook_events(confirmation_id, "webhook_sent")] == [
        ("webhook_sent", 1)
    ]
    assert Outbox.objects.get(confirmation_id=confirmation_id, kind="webhook").status == "sent"


def test_a_tampered_or_wrongly_keyed_webhook_fails_verification(agent, receiver, celery_worker):
    from approvals.models import new_webhook_secret

    confirmation_id = ask_with_callback(agent, receiver.url)
    decide(confirmation_id, "reject", actor="bob", reason="too much")
    [(headers, body)] = receiver.wait_for(1)

    assert Webhook(agent.agent.webhook_secret).verify(body, headers)["decision"] == "deny"
    tampered = body.replace(b'"deny"', b'"allow"')
    with pytest.raises(WebhookVerificationError):
        Webhook(agent.agent.webhook_secret).verify(tampered, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(new_webhook_secret()).verify(body, headers)
    stale = {**headers, "webhook-timestamp": str(int(time.time()) - 3600)}
    with pytest.raises(WebhookVerificationError):
        Webhook(agent.agent.webhook_secret).verify(body, stale)


def test_a_failing_receiver_gets_the_webhook_again_and_each_attempt_is_recorded(agent, celery_worker):
    receiver = start_receiver([500])
    try:
        confirmation_id = ask_with_callback(agent, receiver.url)
        decide(confirmation_id, "approve", actor="alice")
        (first_headers, first_body), (second_headers, second_body) = receiver.wait_for(2)
    finally:
        receiver.server.shutdown()

    secret = agent.agent.webhook_secret
    assert Webhook(secret).verify(first_body, first_headers)["decision"] == "allow"
    assert Webhook(secret).verify(second_body, second_headers)["decision"] == "allow"
    # Same message id on every attempt, so the receiver can drop a redelivery it already handled.
    assert first_headers["webhook-id"] == second_headers["webhook-id"]
    events = webhook_events(confirmation_id, "webhook_sent")
    assert [(e.kind, e.data["attempt"]) for e in events] == [("webhook_failed", 1), ("webhook_sent", 2)]
    assert "answered 500" in events[0].message
    row = Outbox.objects.get(confirmation_id=confirmation_id, kind="webhook")
    assert (row.status, row.attempts) == ("sent", 2)


def test_the_beat_relay_sends_a_retry_the_worker_left_behind(agent, celery_worker):
    """The receiver asks for 30 s (Retry-After); the worker holding that retry dies; beat's relay sends it."""
    import datetime as dt

    from django.utils import timezone

    from approvals.tasks import relay_outbox

    receiver = start_receiver([503], headers={"retry-after": "30"})
    try:
        confirmation_id = ask_with_callback(agent, receiver.url)
        decide(confirmation_id, "approve", actor="alice")
        receiver.wait_for(1)
        webhook_events(confirmation_id, "webhook_failed")
        row = Outbox.objects.get(confirmation_id=confirmation_id, kind="webhook")
        assert row.next_attempt_at >= timezone.now() + dt.timedelta(seconds=25)  # Retry-After honoured
        assert relay_outbox.apply().get() == 0  # not due yet

        Outbox.objects.filter(pk=row.pk).update(next_attempt_at=timezone.now())  # time passes; the worker is gone
        assert relay_outbox.apply().get() == 1
        (_, _), (headers, body) = receiver.wait_for(2)
    finally:
        receiver.server.shutdown()

    assert Webhook(agent.agent.webhook_secret).verify(body, headers)["decision"] == "allow"
    events = webhook_events(confirmation_id, "webhook_sent")
    assert [(e.kind, e.data["attempt"]) for e in events] == [("webhook_failed", 1), ("webhook_sent", 2)]


@pytest.mark.parametrize("status", [404, 301])
def test_a_receiver_that_refuses_or_redirects_is_not_retried(agent, celery_worker, status):
    from approvals import services
    from approvals.tasks import relay_outbox

    receiver = start_receiver([status], headers={"location": "http://127.0.0.1:9/elsewhere"})
    try:
        confirmation_id = ask_with_callback(agent, receiver.url)
        decide(confirmation_id, "approve", actor="alice")
        receiver.wait_for(1)
        events = webhook_events(confirmation_id, "webhook_failed")
        row = wait_until(
            lambda: Outbox.objects.filter(confirmation_id=confirmation_id, kind="webhook").exclude(status="pending").first(),
            what="the webhook's delivery to be settled",
        )
        # Failed for good: every send starts by claiming a *pending* row, so none can follow.
        # Neither beat's relay nor another run of the delivery task sends it again.
        assert row.status == "failed"
        assert row.pk not in services.outbox_due_ids()
        assert relay_outbox.apply().get() == 0
        assert services.outbox_deliver(outbox_id=row.pk).sent is False
        assert len(receiver.requests) == 1
    finally:
        receiver.server.shutdown()

    assert [(e.kind, e.data["attempt"]) for e in events] == [("webhook_failed", 1)]
    row.refresh_from_db()
    assert (row.status, row.attempts) == ("failed", 1)


def test_no_callback_url_means_no_webhook_row(agent):
    confirmation_id = agent.pre_tool_use("oa__purchase_pay", {"amount": 1}).json()["confirmation_id"]
    decide(confirmation_id, "approve", actor="alice")

    assert not Outbox.objects.filter(confirmation_id=confirmation_id, kind="webhook").exists()


def test_the_webhook_body_is_the_decision_as_json(agent, receiver, celery_worker):
    confirmation_id = ask_with_callback(agent, receiver.url)
    agent.http.post(f"/api/v1/confirmations/{confirmation_id}/cancel")
    [(headers, body)] = receiver.wait_for(1)

    payload = json.loads(body)
    assert (payload["decision"], payload["confirmation"]["status"]) == ("deny", "cancelled")
    assert payload["timestamp"]
