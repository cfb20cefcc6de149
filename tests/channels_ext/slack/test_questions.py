"""Questions on Slack (docs/asking.md), end to end: the agent asks over HTTP, a real Celery worker posts
the card through slack-sdk to FakeSlack, the answer arrives as a signed interactivity request (a button,
a select menu, or a modal's submission), and the card is redrawn with the answer and who gave it."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from approvals.models import ApproverResponse, ConfirmationRequest
from tests.channels_ext.slack.test_end_to_end import (
    ALICE,
    BOB,
    MALLORY,
    WAIT,
    configure,
    notes_to,
    post_interaction,
    posted_card,
)
from tests.conftest import AgentClient, make_agent_client
from tests.fakes.slack_api import FakeSlack, block_actions_payload, view_submission_payload
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

VENDOR = {"type": "string", "enum": ["Acme", "Globex", "Initech"]}
MANY = {"type": "string", "enum": [f"site-{n}" for n in range(8)]}
CODE = {"type": "string", "maxLength": 10, "title": "Budget code"}
ORDER = {
    "type": "object",
    "properties": {
        "vendor": {"type": "string", "enum": ["Acme", "Globex"], "title": "Vendor"},
        "budget": {"type": "integer", "minimum": 1, "maximum": 5000, "title": "Budget"},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["hw", "sw", "ops"]}},
        "urgent": {"type": "boolean"},
    },
    "required": ["vendor", "budget"],
}


@pytest.fixture
def asker(fake_slack: FakeSlack, live_gateway, celery_worker) -> AgentClient:
    configure(fake_slack)
    client = make_agent_client(live_gateway, "purchasing-bot")
    yield client
    client.http.close()


def ask(agent: AgentClient, schema: dict[str, Any], **more) -> str:
    body = {"question": "Which vendor?", "answer_schema": schema, "channel": "ops-slack",
            "approvers": [ALICE.id, BOB.id], **more}  # fmt: skip
    response = agent.http.post("/api/v1/questions", json=body)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def actions(card) -> dict[str, Any]:
    (block,) = [b for b in card.request.json["blocks"] if b["type"] == "actions"]
    return block


def press(live_gateway, fake_slack, card, user, element: dict[str, Any], *, option: dict | None = None) -> httpx.Response:
    payload = block_actions_payload(
        action_id=element["action_id"],
        value=element.get("value", ""),
        user_id=user.id,
        user_name=user.name,
        trigger_id=f"trigger.{user.name}",
        response_url=fake_slack.response_url(user.name),
        channel_id=card.channel,
        message_ts=card.ts,
    )
    if option is not None:
        action = payload["actions"][0]
        action.pop("value", None)
        action.update(type="static_select", selected_option=option)
    return post_interaction(live_gateway, payload)


def submit(live_gateway, view: dict[str, Any], user, values: dict[str, Any]) -> httpx.Response:
    payload = view_submission_payload(
        private_metadata=view["private_metadata"], callback_id=view["callback_id"], user_id=user.id, user_name=user.name
    )
    payload["view"]["state"]["values"] = values
    return post_interaction(live_gateway, payload)


def final_card(fake_slack: FakeSlack, card) -> dict[str, Any]:
    def redrawn():
        updates = [c.json for c in fake_slack.calls("chat.update") if (c.json["channel"], c.json["ts"]) == (card.channel, card.ts)]
        return updates[-1] if updates else None

    return wait_until(redrawn, what="the card redrawn with the answer")


def text_of(blocks: list[dict[str, Any]]) -> str:
    return "\n".join(
        b.get("text", {}).get("text", "") + "".join(e.get("text", "") for e in b.get("elements", []) if b["type"] == "context")
        for b in blocks
    )


def test_a_choice_of_a_few_is_one_button_per_option_and_the_card_shows_the_answer(asker, fake_slack, live_gateway):
    question_id = ask(asker, VENDOR)
    card = posted_card(fake_slack)
    buttons = actions(card)["elements"]
    assert [b["text"]["text"] for b in buttons] == ["Acme", "Globex", "Initech"]
    assert "Which vendor?" in text_of(card.request.json["blocks"])

    assert press(live_gateway, fake_slack, card, ALICE, buttons[1]).status_code == 200

    body = asker.http.get(f"/api/v1/questions/{question_id}/wait", params={"timeout": WAIT}).json()
    assert (body["status"], body["answer"], body["answered_by"]) == ("answered", "Globex", f"slack:{ALICE.id}")
    redrawn = final_card(fake_slack, card)
    assert [b for b in redrawn["blocks"] if b["type"] == "actions"] == []
    assert f"Answered by <@{ALICE.id}>" in text_of(redrawn["blocks"]) and "*Globex*" in text_of(redrawn["blocks"])


def test_a_choice_of_many_is_a_select_menu(asker, fake_slack, live_gateway):
    question_id = ask(asker, MANY)
    card = posted_card(fake_slack)
    (menu,) = actions(card)["elements"]
    assert menu["type"] == "static_select" and len(menu["options"]) == 8
    press(live_gateway, fake_slack, card, BOB, menu, option=menu["options"][5])
    body = asker.http.get(f"/api/v1/questions/{question_id}/wait", params={"timeout": WAIT}).json()
    assert (body["answer"], body["answered_by"]) == ("site-5", f"slack:{BOB.id}")


def test_someone_who_may_not_answer_is_told_and_nothing_changes(asker, fake_slack, live_gateway):
    question_id = ask(asker, VENDOR)
    card = posted_card(fake_slack)
    press(live_gateway, fake_slack, card, MALLORY, actions(card)["elements"][0])
    (note,) = wait_until(lambda: notes_to(fake_slack, MALLORY.name), what="the note to mallory")
    assert "not" in note["text"] and "approver" in note["text"]
    assert ConfirmationRequest.objects.get(pk=question_id).status == "pending"


def test_text_is_answered_in_a_modal_and_too_long_a_text_is_refused_in_it(asker, fake_slack, live_gateway):
    question_id = ask(asker, CODE)
    card = posted_card(fake_slack)
    (button,) = actions(card)["elements"]
    assert button["action_id"] == "answer_open"
    press(live_gateway, fake_slack, card, ALICE, button)
    (opened,) = fake_slack.calls("views.open")
    view = opened.json["view"]
    assert opened.json["trigger_id"] == "trigger.alice"
    (field,) = [b for b in view["blocks"] if b["type"] == "input"]
    assert field["element"]["type"] == "plain_text_input" and field["element"]["max_length"] == 10
    assert field["label"]["text"] == "Budget code"

    refused = submit(live_gateway, view, ALICE, {"answer_0": {"value": {"type": "plain_text_input", "value": "X" * 11}}})
    assert refused.json()["response_action"] == "errors"
    assert "is too long" in refused.json()["errors"]["answer_0"]
    assert ConfirmationRequest.objects.get(pk=question_id).status == "pending"
    assert not ApproverResponse.objects.exists()

    accepted = submit(live_gateway, view, ALICE, {"answer_0": {"value": {"type": "plain_text_input", "value": "CC-7"}}})
    assert accepted.json() == {"response_action": "clear"}
    assert asker.http.get(f"/api/v1/questions/{question_id}").json()["answer"] == "CC-7"


def test_a_form_is_answered_in_a_modal_with_typed_values(asker, fake_slack, live_gateway):
    question_id = ask(asker, ORDER)
    card = posted_card(fake_slack)
    press(live_gateway, fake_slack, card, BOB, actions(card)["elements"][0])
    view = fake_slack.calls("views.open")[0].json["view"]
    kinds = [b["element"]["type"] for b in view["blocks"] if b["type"] == "input"]
    assert kinds == ["static_select", "number_input", "checkboxes", "radio_buttons"]
    budget = view["blocks"][2]["element"]
    assert (budget["is_decimal_allowed"], budget["min_value"], budget["max_value"]) == (False, "1", "5000")

    values = {
        "answer_0": {"value": {"type": "static_select", "selected_option": {"value": "Globex"}}},
        "answer_1": {"value": {"type": "number_input", "value": "1200"}},
        "answer_2": {"value": {"type": "checkboxes", "selected_options": [{"value": "hw"}, {"value": "ops"}]}},
        "answer_3": {"value": {"type": "radio_buttons", "selected_option": {"value": "no"}}},
    }
    assert submit(live_gateway, view, BOB, values).json() == {"response_action": "clear"}
    body = asker.http.get(f"/api/v1/questions/{question_id}/wait", params={"timeout": WAIT}).json()
    assert body["answer"] == {"vendor": "Globex", "budget": 1200, "tags": ["hw", "ops"], "urgent": False}
    redrawn = final_card(fake_slack, card)
    assert "Vendor: Globex · Budget: 1200 · tags: hw, ops · urgent: no" in text_of(redrawn["blocks"])
