"""PostgreSQL drops the gateway's connections, and no click or call is lost (docs/operating.md, "Database
failover").

The gateway over real HTTP (the live gateway), its in-process Celery worker and the real PostgreSQL: the
process's pool is filled by a burst of calls, then every connection of this test database but the test's
own is terminated with `pg_terminate_backend` — each pooled connection, the LISTEN connection, the worker's
— as a restart or a failover does. After that, as many requests as the pool held connections, and one
more, each of: Slack clicks through the Slack fake, decisions on the web page, allowed pre-tool-use calls,
pending calls with their long-poll waits, WebSocket waiters — all served, none a 500 or a 503. Agents that
were already waiting when the connections dropped get their decision. A click whose connection is cut in
the middle of its transaction (before its COMMIT) is served again on a fresh connection.
"""

from __future__ import annotations

import json
import re
import threading

import httpx
import pytest
from django.db import connection
from websockets.sync.client import connect

from approvals.models import ConfirmationRequest, Outbox
from gateway_contract import sign_confirmation_id
from tests.channels_ext.web.conftest import PASSWORD, HeldCall
from tests.conftest import AgentClient, apply_config, decide, make_agent_client
from tests.fakes.slack_api import FakeSlack, block_actions_payload, form_body, signed_slack_request
from tests.support import InThread, parked, rows_locked, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

SIGNING_SECRET = "d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6"
ALICE_SLACK = "U0ALICE"
TOOL = "oa__purchase_pay"


# --------------------------------------------------------------------------- the drop


def other_backends() -> list[int]:
    """The backend pids of every client connection to this test database but the test's own."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND backend_type = 'client backend'"
        )
        return [row[0] for row in cursor.fetchall()]


def terminate(pids: list[int]) -> None:
    """`pg_terminate_backend` on these backends of this test database (never another database's)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid() AND pid = ANY(%s)",
            [pids],
        )
    wait_until(lambda: not set(pids) & set(other_backends()), what="the terminated connections to be gone")


def fill_the_pool(connections: int = 8) -> int:
    """Put `connections` more connections in the process's pool (the live gateway's: it runs in this process),
    as a busy moment leaves them: each is taken at once by a thread of its own, then all are given back.
    How many the pool then holds idle."""
    taken, give_back = threading.Barrier(connections + 1, timeout=30), threading.Event()

    def take() -> None:
        try:
            connection.ensure_connection()
            taken.wait()
            give_back.wait(30)
        finally:
            connection.close()  # back to the pool

    threads = [threading.Thread(target=take, daemon=True) for _ in range(connections)]
    for thread in threads:
        thread.start()
    taken.wait()
    give_back.set()
    for thread in threads:
        thread.join()
    idle = connection.pool.get_stats()["pool_available"]
    assert idle >= connections
    return idle


def drop_every_connection(agent: AgentClient) -> int:
    """Fill the pool, then terminate every connection the gateway holds to this database, as a restart does.
    How many requests the test should then make to meet each dead pooled connection: one more than that."""
    assert allowed(agent, 0)
    idle = fill_the_pool()
    dropped = other_backends()
    assert len(dropped) >= idle
    terminate(dropped)
    return idle + 1


def allowed(agent: AgentClient, n: int) -> bool:
    answer = agent.pre_tool_use("web__search", {"q": f"weather {n}"})
    return answer.status_code == 200 and answer.json()["decision"] == "allow"


def ask(agent: AgentClient, n: int) -> str:
    answer = agent.pre_tool_use(TOOL, {"amount": n}, user_id="u-42")
    assert answer.status_code == 200 and answer.json()["decision"] == "pending", answer.text
    return answer.json()["confirmation_id"]


def statuses(confirmation_ids: list[str]) -> list[str]:
    found = dict(ConfirmationRequest.objects.filter(pk__in=confirmation_ids).values_list("pk", "status"))
    return [found[ConfirmationRequest._meta.pk.to_python(pk)] for pk in confirmation_ids]


# --------------------------------------------------------------------------- the approvers


class WebApprover:
    """alice, signed in on the live gateway's own pages (the page threads of gateway.pages)."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=30)
        token = _csrf(self.http.get("/login/").text)
        signed = self.http.post("/login/", data={"csrfmiddlewaretoken": token, "username": "alice", "password": PASSWORD})
        assert signed.status_code == 302, signed.text[:300]

    def approve(self, confirmation_id: str) -> tuple[int, int]:
        """Open the request's page and approve on it: the page's and the form's HTTP statuses."""
        page = self.http.get(f"/approvals/{confirmation_id}/")
        if page.status_code != 200:
            return page.status_code, 0
        posted = self.http.post(
            f"/approvals/{confirmation_id}/",
            data={"csrfmiddlewaretoken": _csrf(page.text), "decision": "approve", "reason": ""},
            headers={"referer": f"{self.http.base_url}approvals/{confirmation_id}/"},
        )
        return page.status_code, posted.status_code


def _csrf(html: str) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)


@pytest.fixture
def alice(live_gateway, web_gate):
    from django.contrib.auth.models import User

    User.objects.create_user("alice", password=PASSWORD)
    approver = WebApprover(live_gateway.url)
    yield approver
    approver.http.close()


def slack_click(live_gateway, confirmation_id: str, user: str = ALICE_SLACK) -> httpx.Response:
    """An Approve click on the request's Slack card, POSTed as Slack sends it (signed form body)."""
    payload = block_actions_payload(action_id="approve", value=sign_confirmation_id(confirmation_id), user_id=user)
    body = form_body(payload)
    headers = {"Content-Type": "application/x-www-form-urlencoded", **signed_slack_request(SIGNING_SECRET, body)}
    return httpx.post(f"{live_gateway.url}/channels/ops-slack/callback", content=body, headers=headers, timeout=30)


@pytest.fixture
def slack_agent(fake_slack: FakeSlack, live_gateway, celery_worker) -> AgentClient:
    """purchasing-bot, whose payments alice approves on Slack (cards posted by the worker to the fake)."""
    apply_config(
        f"""
channels:
  - name: ops-slack
    kind: slack
    bot_token: xoxb-1111-2222-dropTokenValue
    signing_secret: {SIGNING_SECRET}
    channel_id: C0APPROVALS
    api_base_url: {fake_slack.base_url}
agents:
  - name: purchasing-bot
    hooks:
      - kind: approval_gate
        name: finance-gate
        tools: ["{TOOL}"]
        channel: ops-slack
        approvers: ["{ALICE_SLACK}"]
        timeout_seconds: 1800
"""
    )
    client = make_agent_client(live_gateway, "purchasing-bot")
    yield client
    client.http.close()


# --------------------------------------------------------------------------- after the drop


def test_every_allowed_call_after_the_drop_is_served(agent):
    requests = drop_every_connection(agent)

    answers = [agent.pre_tool_use("web__search", {"q": n}) for n in range(requests)]

    assert [(a.status_code, a.json().get("decision")) for a in answers] == [(200, "allow")] * requests


def test_every_slack_click_after_the_drop_is_served_and_its_card_redrawn(slack_agent, fake_slack, live_gateway):
    # (each click needs a pending request; they are asked for before the drop, their cards posted)
    pending = [ask(slack_agent, n) for n in range(24)]
    wait_until(lambda: len(fake_slack.messages) == len(pending), what="the worker to post every card")
    requests = drop_every_connection(slack_agent)
    clicked = pending[:requests]

    answers = [slack_click(live_gateway, cid) for cid in clicked]

    assert [a.status_code for a in answers] == [200] * requests, [a.text[:200] for a in answers if a.status_code != 200]
    assert statuses(clicked) == ["approved"] * requests
    # The worker's connections were dropped too: it redraws every decided card all the same.
    wait_until(lambda: len(fake_slack.calls("chat.update")) >= requests, what="the worker to redraw the cards")


def test_every_decision_on_the_web_page_after_the_drop_is_served(agent, alice):
    pending = [ask(agent, n) for n in range(24)]
    requests = drop_every_connection(agent)
    decided = pending[:requests]

    answers = [alice.approve(cid) for cid in decided]

    assert answers == [(200, 302)] * requests
    assert statuses(decided) == ["approved"] * requests


def test_a_pending_call_and_its_long_poll_after_the_drop_are_served(agent):
    requests = drop_every_connection(agent)

    asked = [agent.pre_tool_use(TOOL, {"amount": n}) for n in range(requests)]
    assert [(a.status_code, a.json().get("decision")) for a in asked] == [(200, "pending")] * requests
    ids = [a.json()["confirmation_id"] for a in asked]
    terminate(other_backends())  # and again, now that the pool is full of new connections
    polled = [agent.wait(cid, timeout=0) for cid in ids]

    assert [(p.status_code, p.json().get("status")) for p in polled] == [(200, "pending")] * requests


def test_websocket_waiters_after_the_drop_are_served(agent, alice):
    pending = [ask(agent, n) for n in range(24)]
    requests = drop_every_connection(agent)
    sockets = [_socket(agent, cid) for cid in pending[:requests]]
    try:
        first = [json.loads(ws.recv(timeout=10)) for ws in sockets]
        assert [m["status"] for m in first] == ["pending"] * requests
        assert alice.approve(pending[0]) == (200, 302)
        assert json.loads(sockets[0].recv(timeout=10))["status"] == "approved"
    finally:
        for ws in sockets:
            ws.close()


def _socket(agent: AgentClient, confirmation_id: str):
    base = agent.http.base_url
    return connect(
        f"ws://{base.host}:{base.port}/ws/v1/confirmations/{confirmation_id}",
        additional_headers={"Authorization": f"Bearer {agent.key}"},
        open_timeout=10,
    )


# --------------------------------------------------------------------------- during the drop


def test_agents_waiting_when_the_connections_drop_get_the_decision_made_after(agent):
    """A long-poll, a held pre-tool-use and a WebSocket are waiting when every connection drops (the LISTEN
    connection too). Each is woken to read its request again when the LISTEN connection is back, and then by
    the decision made after the drop (here by the test's own connection, which the drop spared): each gets
    it, with no error on the way."""
    long_polled, by_socket = ask(agent, 1), ask(agent, 2)
    held = HeldCall(agent, TOOL, {"amount": 3}, wait_seconds=60)
    poll = InThread(agent.wait, long_polled, 60)
    ws = _socket(agent, by_socket)
    try:
        assert json.loads(ws.recv(timeout=10))["status"] == "pending"
        for waited in (long_polled, by_socket, held.confirmation_id):
            wait_until(lambda waited=waited: parked(waited), what="every agent to be waiting")

        drop_every_connection(agent)
        for cid in (long_polled, by_socket, held.confirmation_id):
            decide(cid, "approve", actor="alice")

        answer = poll.result(timeout=30)
        assert (answer.status_code, answer.json()["status"]) == (200, "approved")
        assert json.loads(ws.recv(timeout=30))["status"] == "approved"
        assert held.result()["decision"] == "allow"
    finally:
        ws.close()


def test_a_click_whose_connection_drops_inside_its_transaction_is_served_again(slack_agent, fake_slack, live_gateway):
    """The click waits inside its transaction (another transaction holds the request's row) when its
    connection is terminated: nothing of it was committed, so it is served again on a fresh connection,
    and decides once the row is free."""
    cid = ask(slack_agent, 1)
    wait_until(lambda: not Outbox.objects.filter(status="pending").exists(), what="the worker to post the card")
    with rows_locked(ConfirmationRequest.objects.filter(pk=cid)):
        click = InThread(slack_click, live_gateway, cid)
        # The click's backend, waiting for the row lock inside the click's transaction.
        waiting = wait_until(_waiting_for_a_lock, what="the click to wait for the row inside its transaction")
        terminate(waiting)
        wait_until(_waiting_for_a_lock, what="the click to be served again, and to wait for the row again")
    answer = click.result()

    assert answer.status_code == 200, answer.text[:300]
    assert statuses([cid]) == ["approved"]


def _waiting_for_a_lock() -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND wait_event_type = 'Lock' AND query LIKE %s",
            # The click's read of its request under the row lock (the text shown is cut short before its
            # FOR NO KEY UPDATE); the card is posted already, so no delivery of the worker waits there too.
            ['SELECT "approvals_confirmationrequest"."id"%'],
        )
        return [row[0] for row in cursor.fetchall()]
