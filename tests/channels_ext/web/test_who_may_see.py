"""Who may read a request, and where a form sends you back, over real HTTP against the live
gateway (docs/web-and-admin.md): an approver's arguments are for the approvers and staff, and a
`next` never leads off the gateway."""

from __future__ import annotations

import re

import httpx
import pytest

from approvals.models import ConfirmationEvent, ConfirmationRequest, Grant
from tests.channels_ext.web.conftest import PASSWORD
from tests.conftest import apply_config, make_agent_client

pytestmark = pytest.mark.django_db(transaction=True)

_CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
SECRET_ARGUMENT = "IBAN DE44 5001 0517 5407 3249 31"


def browser(live_gateway, username: str) -> httpx.Client:
    """A signed-in session on the live gateway, through its sign-in form (CSRF and all)."""
    client = httpx.Client(base_url=live_gateway.url, timeout=15)
    form = client.get("/login/")
    token = _CSRF.search(form.text).group(1)
    signed = client.post("/login/", data={"username": username, "password": PASSWORD, "csrfmiddlewaretoken": token})
    assert signed.status_code == 302, signed.text
    return client


def csrf_of(client: httpx.Client, path: str) -> str:
    return _CSRF.search(client.get(path).text).group(1)


@pytest.fixture
def paying(live_gateway, web_gate, people):
    agent = make_agent_client(live_gateway, "purchasing-bot")
    body = agent.pre_tool_use("oa__purchase_pay", {"amount": 80000, "account": SECRET_ARGUMENT}).json()
    yield ConfirmationRequest.objects.get(pk=body["confirmation_id"])
    agent.http.close()


def test_a_signed_in_user_who_is_neither_staff_nor_an_approver_cannot_read_the_request(live_gateway, paying):
    page, state = f"/approvals/{paying.pk}/", f"/approvals/{paying.pk}/state"
    carol = browser(live_gateway, "carol")

    for path in (page, state):
        response = carol.get(path)
        assert response.status_code == 404
        assert SECRET_ARGUMENT not in response.text and "oa__purchase_pay" not in response.text
    inbox = carol.get("/approvals/").text
    assert "oa__purchase_pay" not in inbox and str(paying.pk) not in inbox

    # An approver and staff read it.
    assert SECRET_ARGUMENT in browser(live_gateway, "alice").get(page).text
    assert SECRET_ARGUMENT in browser(live_gateway, "sam").get(page).text
    assert browser(live_gateway, "alice").get(state).json()["status"] == "pending"


def test_a_post_by_someone_who_may_not_read_the_request_is_refused_recorded_and_reveals_nothing(live_gateway, paying):
    carol = browser(live_gateway, "carol")
    token = csrf_of(carol, "/approvals/")

    answer = carol.post(f"/approvals/{paying.pk}/", data={"decision": "approve", "csrfmiddlewaretoken": token})

    assert (answer.status_code, answer.headers["location"]) == (302, "/approvals/")
    assert SECRET_ARGUMENT not in carol.get("/approvals/").text
    paying.refresh_from_db()
    assert paying.status == "pending"
    assert ConfirmationEvent.objects.filter(confirmation=paying, kind="refused_click", actor="web:carol").exists()


@pytest.mark.parametrize("target", ["https://evil.example/phish", "//evil.example/phish", "http:/\\evil.example"])
def test_a_forms_next_never_leads_off_the_gateway(live_gateway, web_gate, people, target):
    apply_config(
        """
channels: [{name: web, kind: web}]
agents:
  - name: purchasing-bot
    hooks: [{kind: approval_gate, tools: ["*"], channel: web, approvers: [alice], grants: [{scope: session}]}]
"""
    )
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = agent.pre_tool_use("oa__purchase_pay", {"amount": 1}).json()["confirmation_id"]
    alice = browser(live_gateway, "alice")
    token = csrf_of(alice, f"/approvals/{confirmation_id}/")
    approved = alice.post(f"/approvals/{confirmation_id}/", data={"grant": "0", "csrfmiddlewaretoken": token})
    assert approved.status_code == 302
    grant = Grant.objects.get()

    revoked = alice.post(
        f"/approvals/grants/{grant.pk}/revoke", data={"next": target, "csrfmiddlewaretoken": token}
    )

    assert (revoked.status_code, revoked.headers["location"]) == (302, "/approvals/")
    grant.refresh_from_db()
    assert grant.revoked_at is not None
    # The same form with a path of the gateway goes back there.
    again = alice.post(
        f"/approvals/grants/{grant.pk}/revoke", data={"next": f"/approvals/{confirmation_id}/", "csrfmiddlewaretoken": token}
    )
    assert again.headers["location"] == f"/approvals/{confirmation_id}/"
    agent.http.close()


@pytest.mark.parametrize("target", ["https://evil.example/phish", "//evil.example/phish"])
def test_signing_in_never_leads_off_the_gateway(live_gateway, people, target):
    client = httpx.Client(base_url=live_gateway.url, timeout=15)
    token = csrf_of(client, "/login/")

    signed = client.post(
        "/login/", data={"username": "alice", "password": PASSWORD, "next": target, "csrfmiddlewaretoken": token}
    )

    assert signed.status_code == 302
    assert "evil.example" not in signed.headers["location"]
