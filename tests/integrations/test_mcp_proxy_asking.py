"""The MCP proxy asking people (docs/asking.md): `--ask-human` offers the tool `ask_human` beside the upstream's,
and `--elicitation gateway` sends an upstream's elicitation to a person through the gateway instead of the
client — on the 2026-07-28 protocol (an `InputRequiredResult`, the call retried with the answer) and on
older ones (an `elicitation/create` request). Driven by the MCP SDK's `Client`; people answer in (fake) Slack."""

from __future__ import annotations

import functools
import sys
from typing import Any

import pytest
from mcp import StdioServerParameters
from mcp_types import ElicitResult

from approvals.models import ConfirmationRequest
from approvals.selectors import UNVERIFIED_QUESTION_REASON
from tests.audit.test_questions_verify import notify, sql
from tests.fakes.slack_api import view_submission_payload
from tests.integrations.conftest import ALICE, BOB, ROOT, WAIT, Gateway, slack_gate
from tests.integrations.test_ask_examples import elements, press
from tests.integrations.test_mcp_proxy import TIME_SERVER, mcp_client, proxy, text
from tests.support import parked, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

AGENT = "mcp-agent"
ROOMS_SERVER = [sys.executable, str(ROOT / "tests" / "integrations" / "eliciting_mcp_server.py")]


def answer_booking_form(gateway: Gateway, *, room: str, people: str) -> None:
    """Bob opens the question's modal in Slack and sends the form."""
    card = gateway.approver.card(1)
    press(gateway, card, BOB, elements(card)[0])
    trigger = f"trigger.{BOB.name}.{card.ts}"
    opened = wait_until(lambda: [c for c in gateway.slack.calls("views.open") if c.json["trigger_id"] == trigger], WAIT)
    view = opened[-1].json["view"]
    labels = [b["label"]["text"] for b in view["blocks"] if b["type"] == "input"]
    assert labels == ["Room", "People", "Projector"]
    submission = view_submission_payload(
        private_metadata=view["private_metadata"], callback_id=view["callback_id"], user_id=BOB.id, user_name=BOB.name
    )
    submission["view"]["state"]["values"] = {
        "answer_0": {"value": {"type": "static_select", "selected_option": {"value": room}}},
        "answer_1": {"value": {"type": "number_input", "value": people}},
        "answer_2": {"value": {"type": "radio_buttons", "selected_option": {"value": "yes"}}},
    }
    assert gateway.approver._post(submission).json() == {"response_action": "clear"}


def test_ask_human_is_offered_beside_the_upstreams_tools_and_a_person_answers_it(gateway: Gateway):
    key = gateway.configure(AGENT, [slack_gate(["time__convert_time"])])
    with mcp_client(proxy(gateway.url, key, "time", "--ask-human", upstream=TIME_SERVER)) as (portal, client):
        names = [t.name for t in portal.call(client.list_tools).tools]
        assert names[-1] == "ask_human" and "get_current_time" in names
        call = portal.start_task_soon(
            client.call_tool, "ask_human", {"question": "Which time zone is the customer in?", "choices": ["UTC", "CET"]}
        )
        card = gateway.approver.card(1)
        assert [e["text"]["text"] for e in elements(card)] == ["UTC", "CET"]
        press(gateway, card, ALICE, elements(card)[1])
        result = call.result(timeout=2 * WAIT)
    assert not result.is_error
    assert text(result) == '"CET" (answered by alice)'
    question = ConfirmationRequest.objects.get(kind="question")
    assert (question.reason, question.decided_by) == ("Which time zone is the customer in?", f"slack:{ALICE.id}")


def test_ask_human_answered_in_sql_behind_the_gateways_back_gets_no_answer(gateway: Gateway):
    """A raw UPDATE, not the gateway's: the question is answered `cancelled` with no answer (docs/asking.md)."""
    key = gateway.configure(AGENT, [slack_gate(["time__convert_time"])])
    with mcp_client(proxy(gateway.url, key, "time", "--ask-human", upstream=TIME_SERVER)) as (portal, client):
        call = portal.start_task_soon(client.call_tool, "ask_human", {"question": "Which zone?", "choices": ["UTC", "CET"]})
        gateway.approver.card(1)
        question_id = str(ConfirmationRequest.objects.get(kind="question").pk)
        wait_until(lambda: parked(question_id), WAIT, what="the proxy waiting for the answer")
        sql("UPDATE approvals_confirmationrequest SET status = 'answered', answer = '\"CET\"', decided_at = now(), "
            f"decided_by = 'slack:{ALICE.id}', decided_by_name = 'alice' WHERE id = %s", [question_id])  # fmt: skip
        notify(question_id)
        result = call.result(timeout=2 * WAIT)
    assert text(result) == f"No answer: {UNVERIFIED_QUESTION_REASON}"
    assert "CET" not in text(result)


@pytest.mark.parametrize("mode", ["auto", "legacy"], ids=["input-required-2026", "elicitation-request"])
def test_an_upstreams_elicitation_is_asked_of_a_person_through_the_gateway(gateway: Gateway, mode: str):
    key = gateway.configure(AGENT, [slack_gate(["rooms__nothing"])])  # questions go to this gate's channel
    asked_client: list[Any] = []

    async def client_elicitation(ctx: Any, params: Any) -> ElicitResult:
        asked_client.append(params)
        return ElicitResult(action="decline")

    server = proxy(gateway.url, key, "rooms", "--elicitation", "gateway", upstream=ROOMS_SERVER)
    with mcp_client(server, mode=mode, elicitation_callback=client_elicitation) as (portal, client):
        call = portal.start_task_soon(functools.partial(client.call_tool, "book_room", {"day": "Monday"}))
        answer_booking_form(gateway, room="Hopper", people="3")
        result = call.result(timeout=2 * WAIT)
    assert text(result) == "booked Hopper on Monday for 3 (projector: yes)"
    assert asked_client == []  # the client (perhaps nobody at the keyboard) was never asked
    question = ConfirmationRequest.objects.get(kind="question")
    assert question.reason == "Which room on Monday, for how many people?"
    assert question.answer == {"room": "Hopper", "people": 3, "projector": True}


def test_an_elicitation_nobody_answers_in_time_is_declined(gateway: Gateway):
    key = gateway.configure(AGENT, [slack_gate(["rooms__nothing"])])
    server = proxy(gateway.url, key, "rooms", "--elicitation", "gateway", "--max-wait", "2", upstream=ROOMS_SERVER)
    with mcp_client(server) as (portal, client):
        result = portal.call(client.call_tool, "book_room", {"day": "Friday"})
    assert text(result) == "not booked: decline"
    assert ConfirmationRequest.objects.get(kind="question").status == "pending"  # still there for a person
