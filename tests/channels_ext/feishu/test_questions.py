"""Questions on Feishu (docs/asking.md), end to end: the agent asks over HTTP, a real worker sends the card
JSON 2.0 through lark-oapi to FakeFeishu, the answer arrives as an encrypted, signed `card.action.trigger`
(an option button, or the answer form's submit with its `form_value`), and the card shows who answered what."""

from __future__ import annotations

import json
from typing import Any

import pytest

from approvals.models import ApproverResponse, ConfirmationRequest
from tests.channels_ext.feishu.test_cards import interactive_elements
from tests.channels_ext.feishu.test_end_to_end import (  # noqa: F401 - fixture: deploy
    APPROVER,
    CHANNEL,
    ENCRYPT_KEY,
    OTHER_APPROVER,
    OUTSIDER,
    FeishuDeployment,
    click_payload,
    deploy,
)
from tests.fakes.feishu_api import encrypted_body

pytestmark = pytest.mark.django_db(transaction=True)

VENDOR = {"type": "string", "enum": ["Acme", "Globex", "Initech"]}
ORDER = {
    "type": "object",
    "properties": {
        "vendor": {"type": "string", "enum": ["Acme", "Globex"], "title": "Vendor"},
        "budget": {"type": "number", "minimum": 1, "maximum": 5000, "title": "Budget"},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["hw", "sw", "ops"]}},
        "urgent": {"type": "boolean", "title": "Urgent"},
        "note": {"type": "string", "maxLength": 20},
    },
    "required": ["vendor", "budget"],
}


def ask(deployment: FeishuDeployment, schema: dict[str, Any]) -> str:
    body = {"question": "Which vendor?", "answer_schema": schema, "channel": CHANNEL,
            "approvers": [APPROVER, OTHER_APPROVER]}  # fmt: skip
    response = deployment.agent.http.post("/api/v1/questions", json=body)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def sent_card(deployment: FeishuDeployment) -> dict[str, Any]:
    return json.loads(deployment.posted_message().content)


def callback_value(element: dict[str, Any]) -> dict[str, Any]:
    (behavior,) = element["behaviors"]
    return behavior["value"]


def submit_form(deployment: FeishuDeployment, card: dict[str, Any], form_value: dict[str, Any], open_id: str = APPROVER):
    (button,) = [e for e in interactive_elements(card) if e.get("form_action_type") == "submit"]
    payload = click_payload(callback_value(button), open_id=open_id)
    payload["event"]["action"]["form_value"] = form_value
    payload["event"]["action"]["name"] = button["name"]
    return deployment.post(encrypted_body(ENCRYPT_KEY, payload))


def test_a_choice_is_a_button_per_option_and_the_card_shows_who_answered_what(deploy):
    deployment = deploy()
    question_id = ask(deployment, VENDOR)
    card = sent_card(deployment)
    buttons = [e for e in card["body"]["elements"] if e["tag"] == "button"]
    assert [b["text"]["content"] for b in buttons] == ["Acme", "Globex", "Initech"]
    assert "Which vendor?" in card["body"]["elements"][0]["content"]

    response = deployment.click(callback_value(buttons[2]), open_id=OTHER_APPROVER)
    assert response.status_code == 200
    answer = response.json()
    assert answer["toast"]["type"] == "success"
    redrawn = answer["card"]["data"]
    assert redrawn["header"]["title"]["content"] == "Question answered"
    assert f"**Answered** by <at id={OTHER_APPROVER}></at>" in redrawn["body"]["elements"][0]["content"]
    assert "**Initech**" in redrawn["body"]["elements"][0]["content"]
    body = deployment.agent.http.get(f"/api/v1/questions/{question_id}/wait", params={"timeout": 10}).json()
    assert (body["answer"], body["answered_by"]) == ("Initech", f"feishu:{OTHER_APPROVER}")
    deployment.patched_card(deployment.posted_message(), "Question answered")


def test_a_form_uses_select_input_and_checker_components_and_its_answer_is_typed(deploy):
    deployment = deploy()
    question_id = ask(deployment, ORDER)
    card = sent_card(deployment)
    (form,) = [e for e in card["body"]["elements"] if e["tag"] == "form"]
    tags = [(e["tag"], e["name"]) for e in form["elements"]]
    assert tags == [
        ("select_static", "a_vendor"), ("input", "a_budget"), ("multi_select_static", "a_tags"),
        ("checker", "a_urgent"), ("input", "a_note"), ("button", "send_answer"),
    ]  # fmt: skip

    response = submit_form(
        deployment, card, {"a_vendor": "Globex", "a_budget": "99.5", "a_tags": ["sw"], "a_urgent": True, "a_note": "asap"}
    )
    assert response.json()["toast"]["type"] == "success", response.json()
    body = deployment.agent.http.get(f"/api/v1/questions/{question_id}").json()
    assert body["answer"] == {"vendor": "Globex", "budget": 99.5, "tags": ["sw"], "urgent": True, "note": "asap"}


def test_an_invalid_form_is_refused_with_the_reason_and_changes_nothing(deploy):
    deployment = deploy()
    question_id = ask(deployment, ORDER)
    card = sent_card(deployment)
    response = submit_form(deployment, card, {"a_vendor": "Globex", "a_budget": "9000"})
    answer = response.json()
    assert answer["toast"]["type"] == "warning"
    assert "9000 is greater than the maximum of 5000" in answer["toast"]["content"]
    assert answer["card"]["data"]["header"]["title"]["content"] == "Question"  # still asking
    row = ConfirmationRequest.objects.get(pk=question_id)
    assert (row.status, row.answer) == ("pending", None)
    assert not ApproverResponse.objects.exists()


def test_an_outsiders_answer_is_refused(deploy):
    deployment = deploy()
    question_id = ask(deployment, VENDOR)
    card = sent_card(deployment)
    (first, *_) = [e for e in card["body"]["elements"] if e["tag"] == "button"]
    answer = deployment.click(callback_value(first), open_id=OUTSIDER).json()
    assert answer["toast"]["type"] == "warning"
    assert ConfirmationRequest.objects.get(pk=question_id).status == "pending"
