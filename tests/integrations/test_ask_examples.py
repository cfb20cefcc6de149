"""examples/ask (docs/asking.md), run as their docs say, on the real OpenAI Agents SDK and LangChain v1: the
model (the fake OpenAI API) calls `ask_human` with choices and `ask_order_details` (a form); the questions
are cards in (fake) Slack, where a person answers with a button and in a modal; the model gets the answers."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from approvals.models import ConfirmationRequest
from tests.fakes.openai_api import FINAL_PREFIX, FakeOpenAI
from tests.fakes.slack_api import block_actions_payload, view_submission_payload
from tests.integrations.conftest import ALICE, BOB, ROOT, WAIT, Gateway, PostedCard, example_env, slack_gate
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

AGENT = "purchasing-agent"
EXAMPLES = {"openai_agents": "agent.py", "langchain": "langchain_agent.py"}


def start(script: str, request: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / "ask" / script), request],
        env=env, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def press(gateway: Gateway, card: PostedCard, user, element: dict[str, Any]) -> None:
    payload = block_actions_payload(
        action_id=element["action_id"], value=element["value"], user_id=user.id, user_name=user.name,
        trigger_id=f"trigger.{user.name}.{card.ts}", response_url=gateway.slack.response_url(user.name),
        channel_id=card.channel, message_ts=card.ts,
    )  # fmt: skip
    gateway.approver._post(payload)


def elements(card: PostedCard) -> list[dict[str, Any]]:
    (actions,) = [b for b in card.blocks if b["type"] == "actions"]
    return actions["elements"]


@pytest.mark.parametrize("example", list(EXAMPLES))
def test_the_agent_asks_a_choice_and_a_form_and_the_model_gets_the_typed_answers(
    example: str, gateway: Gateway, fake_openai: FakeOpenAI
):
    key = gateway.configure(AGENT, [slack_gate(["place_order"])])  # questions go to this gate's channel
    request = f"[{example}] Order 20 laptops for the new team"
    fake_openai.script(
        request,
        [
            [("ask_human", {"question": "Which vendor for the laptops?", "choices": ["Acme", "Globex"], "several": None})],
            [("ask_order_details", {"question": "Budget and urgency for the order?"})],
        ],
    )
    process = start(EXAMPLES[example], request, example_env(gateway.url, key, fake_openai.base_url))

    choice = gateway.approver.card(1)
    assert [e["text"]["text"] for e in elements(choice)] == ["Acme", "Globex"]
    press(gateway, choice, ALICE, elements(choice)[1])

    form = gateway.approver.card(2)
    press(gateway, form, BOB, elements(form)[0])  # Answer… opens the modal
    trigger = f"trigger.{BOB.name}.{form.ts}"
    opened = wait_until(lambda: [c for c in gateway.slack.calls("views.open") if c.json["trigger_id"] == trigger], WAIT)
    view = opened[-1].json["view"]
    submission = view_submission_payload(
        private_metadata=view["private_metadata"], callback_id=view["callback_id"], user_id=BOB.id, user_name=BOB.name
    )
    submission["view"]["state"]["values"] = {
        "answer_0": {"value": {"type": "static_select", "selected_option": {"value": "Globex"}}},
        "answer_1": {"value": {"type": "number_input", "value": "24000"}},
        "answer_2": {"value": {"type": "radio_buttons", "selected_option": {"value": "yes"}}},
    }
    assert gateway.approver._post(submission).json() == {"response_action": "clear"}

    stdout, stderr = process.communicate(timeout=2 * WAIT)
    assert process.returncode == 0, stderr
    seen = fake_openai.outputs_seen(request)
    assert seen["ask_human"] == '"Globex" (answered by alice)'
    form_answer, by = seen["ask_order_details"].rsplit(" (", 1)
    assert (json.loads(form_answer), by) == ({"vendor": "Globex", "budget": 24000, "urgent": True}, "answered by bob)")
    assert stdout.splitlines()[-1].startswith(FINAL_PREFIX)
    questions = ConfirmationRequest.objects.filter(kind="question").order_by("created_at")
    assert [(q.status, q.decided_by) for q in questions] == [("answered", f"slack:{ALICE.id}"), ("answered", f"slack:{BOB.id}")]
    assert questions[0].session_id == questions[1].session_id != ""  # one run, one session
