"""SlackAdapter.handle_callback: signed interactivity requests in, decisions and answers out."""

from __future__ import annotations

import math
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory

from gateway_contract import (
    Callback,
    CallbackError,
    CardView,
    DecisionOutcome,
    get_adapter,
    sign_confirmation_id,
)
from channels_ext.slack.adapter import SlackAdapter
from tests.fakes.slack_api import (
    FakeSlack,
    block_actions_payload,
    form_body,
    load_fixture,
    signed_slack_request,
    view_submission_payload,
)

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
CONFIRMATION_ID = "6f1c2e1a-0000-4000-8000-000000000001"
CARD = CardView(
    confirmation_id=CONFIRMATION_ID,
    agent="purchasing-bot",
    tool_name="oa__purchase_pay",
    tool_args={"amount": 80000},
    user_id="u-42",
    session_id="s-1",
    reason="Payments need a human",
    hook="approval_gate-1",
    status="pending",
    url="http://127.0.0.1:8000/approvals/6f1c2e1a",
)
DECIDED = DecisionOutcome(applied=True, code="decided", message="Done.", card=CARD)
WOULD_APPLY = DecisionOutcome(applied=True, code="would_apply", message="", card=CARD)
NOT_APPROVER = DecisionOutcome(
    applied=False, code="not_approver", message="You are not an approver of this request.", card=CARD
)
ALREADY_DECIDED = DecisionOutcome(
    applied=False, code="already_decided", message="Already approved by alice.", card=CARD
)


class RecordingDecide:
    """The adapter's injected `decide`: records each Callback, answers a fixed outcome."""

    def __init__(self, outcome: DecisionOutcome = DECIDED) -> None:
        self.outcome = outcome
        self.calls: list[Callback] = []

    def __call__(self, callback: Callback) -> DecisionOutcome:
        self.calls.append(callback)
        return self.outcome


@pytest.fixture(autouse=True)
def celery_eager() -> Iterator[None]:
    """Run `.delay()` in-process so a queued response_url note reaches FakeSlack."""
    from gateway.celery import app

    saved = app.conf.task_always_eager, app.conf.task_eager_propagates
    app.conf.task_always_eager, app.conf.task_eager_propagates = True, True
    yield
    app.conf.task_always_eager, app.conf.task_eager_propagates = saved


@pytest.fixture
def adapter(fake_slack: FakeSlack) -> SlackAdapter:
    config = {
        "bot_token": "xoxb-test",
        "signing_secret": SECRET,
        "channel_id": "C111",
        "api_base_url": fake_slack.base_url,
    }
    adapter = get_adapter("ops-slack", "slack", config)
    assert isinstance(adapter, SlackAdapter)
    return adapter


def slack_request(body: bytes, headers: dict[str, str] | None = None) -> HttpRequest:
    if headers is None:
        headers = signed_slack_request(SECRET, body)
    return RequestFactory().post(
        "/channels/ops-slack/callback", data=body, content_type="application/x-www-form-urlencoded", headers=headers
    )


def click(action_id: str, fake: FakeSlack, **overrides: Any) -> bytes:
    payload = block_actions_payload(
        action_id=action_id,
        value=sign_confirmation_id(CONFIRMATION_ID),
        user_id="U0APPROVER",
        user_name="alice",
        response_url=fake.response_url("click-1"),
        **overrides,
    )
    return form_body(payload)


def refused(adapter: SlackAdapter, request: HttpRequest, decide: RecordingDecide) -> CallbackError:
    with pytest.raises(CallbackError) as caught:
        adapter.handle_callback(request, decide)
    assert decide.calls == []
    return caught.value


def assert_empty_ok(response: HttpResponse) -> None:
    assert response.status_code == 200
    assert response.content == b""


# --- verification -------------------------------------------------------------


def test_it_refuses_a_request_without_signature_headers(adapter: SlackAdapter, fake_slack: FakeSlack) -> None:
    decide = RecordingDecide()
    assert refused(adapter, slack_request(click("approve", fake_slack), headers={}), decide).status == 401


def test_it_refuses_a_non_numeric_timestamp(adapter: SlackAdapter, fake_slack: FakeSlack) -> None:
    body = click("approve", fake_slack)
    headers = signed_slack_request(SECRET, body, timestamp="abc")
    assert refused(adapter, slack_request(body, headers), RecordingDecide()).status == 401


def test_it_refuses_a_stale_timestamp(adapter: SlackAdapter, fake_slack: FakeSlack) -> None:
    body = click("approve", fake_slack)
    headers = signed_slack_request(SECRET, body, timestamp=int(time.time()) - 301)
    assert refused(adapter, slack_request(body, headers), RecordingDecide()).status == 401


def test_it_accepts_a_timestamp_just_inside_five_minutes(adapter: SlackAdapter, fake_slack: FakeSlack) -> None:
    body = click("approve", fake_slack)
    headers = signed_slack_request(SECRET, body, timestamp=math.ceil(time.time()) - 299)
    decide = RecordingDecide()

    assert_empty_ok(adapter.handle_callback(slack_request(body, headers), decide))
    assert len(decide.calls) == 1


def test_it_refuses_a_signature_made_with_another_secret(adapter: SlackAdapter, fake_slack: FakeSlack) -> None:
    body = click("approve", fake_slack)
    headers = signed_slack_request("another-secret", body)
    assert refused(adapter, slack_request(body, headers), RecordingDecide()).status == 401


def test_it_refuses_a_body_changed_after_signing(adapter: SlackAdapter, fake_slack: FakeSlack) -> None:
    body = click("approve", fake_slack)
    headers = signed_slack_request(SECRET, body)
    tampered = body.replace(b"approve", b"reject")
    assert tampered != body
    assert refused(adapter, slack_request(tampered, headers), RecordingDecide()).status == 401


def test_it_refuses_a_non_ascii_signature(adapter: SlackAdapter, fake_slack: FakeSlack) -> None:
    body = click("approve", fake_slack)
    headers = {**signed_slack_request(SECRET, body), "X-Slack-Signature": "v0=é"}
    assert refused(adapter, slack_request(body, headers), RecordingDecide()).status == 401


def test_it_refuses_a_body_that_is_not_utf8(adapter: SlackAdapter) -> None:
    headers = signed_slack_request(SECRET, b"payload=x")
    assert refused(adapter, slack_request(b"payload=\xff", headers), RecordingDecide()).status == 401


# --- strict parsing -------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b'{"type": "block_actions"}',
        b"",
        b"payload=%7B%7D&extra=1",
        b"payload=not-json",
        b"payload=%5B%5D",
        b"payload=" + json.dumps({"type": "block_actions", "actions": []}).encode(),
    ],
    ids=["json-body", "empty", "extra-field", "not-json", "not-an-object", "no-actions"],
)
def test_it_refuses_a_signed_body_of_the_wrong_shape(adapter: SlackAdapter, body: bytes) -> None:
    assert refused(adapter, slack_request(body), RecordingDecide()).status == 400


def test_it_refuses_a_button_value_it_did_not_sign(adapter: SlackAdapter) -> None:
    body = form_body(block_actions_payload(action_id="approve", value=f"{CONFIRMATION_ID}:forged"))
    assert refused(adapter, slack_request(body), RecordingDecide()).status == 400


# --- approve --------------------------------------------------------------------


def test_an_approve_click_decides_and_answers_an_empty_200(adapter: SlackAdapter, fake_slack: FakeSlack) -> None:
    decide = RecordingDecide(DECIDED)

    response = adapter.handle_callback(slack_request(click("approve", fake_slack)), decide)

    assert_empty_ok(response)
    assert decide.calls == [
        Callback(confirmation_id=CONFIRMATION_ID, decision="approve", actor="U0APPROVER", actor_name="alice")
    ]
    assert fake_slack.calls("response_url") == []


def test_a_click_that_changes_nothing_tells_the_clicker_why(adapter: SlackAdapter, fake_slack: FakeSlack) -> None:
    response = adapter.handle_callback(slack_request(click("approve", fake_slack)), RecordingDecide(NOT_APPROVER))

    assert_empty_ok(response)
    (note,) = fake_slack.calls("response_url")
    assert note.path == "/response_url/click-1"
    assert note.json == {
        "response_type": "ephemeral",
        "replace_original": False,
        "text": "You are not an approver of this request.",
    }


def test_the_note_to_the_clicker_is_escaped(adapter: SlackAdapter, fake_slack: FakeSlack) -> None:
    outcome = DecisionOutcome(applied=False, code="already_decided", message="Decided by <!channel>", card=CARD)

    adapter.handle_callback(slack_request(click("approve", fake_slack)), RecordingDecide(outcome))

    assert fake_slack.calls("response_url")[0].json["text"] == "Decided by &lt;!channel&gt;"


# --- reject ---------------------------------------------------------------------


def test_a_reject_click_checks_first_then_opens_the_reason_modal(adapter: SlackAdapter, fake_slack: FakeSlack) -> None:
    decide = RecordingDecide(WOULD_APPLY)

    response = adapter.handle_callback(slack_request(click("reject", fake_slack, trigger_id="9.9.trigger")), decide)

    assert_empty_ok(response)
    assert decide.calls == [
        Callback(
            confirmation_id=CONFIRMATION_ID, decision="reject", actor="U0APPROVER", actor_name="alice", dry_run=True
        )
    ]
    (opened,) = fake_slack.calls("views.open")
    assert opened.json["trigger_id"] == "9.9.trigger"
    view = opened.json["view"]
    assert view["callback_id"] == "reject_reason"
    metadata = json.loads(view["private_metadata"])
    assert metadata == {
        "confirmation": sign_confirmation_id(CONFIRMATION_ID),
        "response_url": fake_slack.response_url("click-1"),
        "channel": "C111",
        "ts": "1700000000.000100",
    }


def test_a_reject_click_that_would_change_nothing_opens_no_modal(adapter: SlackAdapter, fake_slack: FakeSlack) -> None:
    response = adapter.handle_callback(slack_request(click("reject", fake_slack)), RecordingDecide(ALREADY_DECIDED))

    assert_empty_ok(response)
    assert fake_slack.calls("views.open") == []
    assert fake_slack.calls("response_url")[0].json["text"] == "Already approved by alice."


def test_a_modal_that_cannot_open_is_explained_to_the_clicker(adapter: SlackAdapter, fake_slack: FakeSlack) -> None:
    fake_slack.fail_next("views.open", body={"ok": False, "error": "expired_trigger_id"})

    response = adapter.handle_callback(slack_request(click("reject", fake_slack)), RecordingDecide(WOULD_APPLY))

    assert_empty_ok(response)
    (note,) = fake_slack.calls("response_url")
    assert note.json["text"].startswith("Could not open the rejection form")
    assert CARD.url in note.json["text"]


def test_submitting_the_modal_rejects_with_the_reason(adapter: SlackAdapter, fake_slack: FakeSlack) -> None:
    adapter.handle_callback(slack_request(click("reject", fake_slack)), RecordingDecide(WOULD_APPLY))
    metadata = fake_slack.calls("views.open")[0].json["view"]["private_metadata"]
    body = form_body(
        view_submission_payload(
            private_metadata=metadata, reason="  Over budget  ", user_id="U0APPROVER", user_name="alice"
        )
    )
    decide = RecordingDecide(DECIDED)

    response = adapter.handle_callback(slack_request(body), decide)

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert json.loads(response.content) == {"response_action": "clear"}
    assert decide.calls == [
        Callback(
            confirmation_id=CONFIRMATION_ID,
            decision="reject",
            actor="U0APPROVER",
            actor_name="alice",
            reason="Over budget",
        )
    ]


def test_a_submission_that_changes_nothing_shows_why_in_the_modal(adapter: SlackAdapter) -> None:
    metadata = json.dumps({"confirmation": sign_confirmation_id(CONFIRMATION_ID)})
    body = form_body(view_submission_payload(private_metadata=metadata))

    response = adapter.handle_callback(slack_request(body), RecordingDecide(ALREADY_DECIDED))

    assert response.status_code == 200
    assert json.loads(response.content) == {
        "response_action": "errors",
        "errors": {"reason": "Already approved by alice."},
    }


def test_a_blank_reason_is_asked_for_again_without_deciding(adapter: SlackAdapter) -> None:
    metadata = json.dumps({"confirmation": sign_confirmation_id(CONFIRMATION_ID)})
    decide = RecordingDecide()

    response = adapter.handle_callback(
        slack_request(form_body(view_submission_payload(private_metadata=metadata, reason="   "))), decide
    )

    assert json.loads(response.content)["response_action"] == "errors"
    assert decide.calls == []


def test_a_submission_with_forged_metadata_is_refused(adapter: SlackAdapter) -> None:
    metadata = json.dumps({"confirmation": f"{CONFIRMATION_ID}:forged"})
    body = form_body(view_submission_payload(private_metadata=metadata))
    assert refused(adapter, slack_request(body), RecordingDecide()).status == 400


def test_a_submission_with_unreadable_metadata_is_refused(adapter: SlackAdapter) -> None:
    body = form_body(view_submission_payload(private_metadata="This is for you!"))
    assert refused(adapter, slack_request(body), RecordingDecide()).status == 400


# --- ignored --------------------------------------------------------------------


def test_closing_the_modal_is_acknowledged_and_ignored(adapter: SlackAdapter) -> None:
    decide = RecordingDecide()
    assert_empty_ok(adapter.handle_callback(slack_request(form_body(load_fixture("view_closed.json"))), decide))
    assert decide.calls == []


def test_another_button_is_acknowledged_and_ignored(adapter: SlackAdapter, fake_slack: FakeSlack) -> None:
    decide = RecordingDecide()
    assert_empty_ok(adapter.handle_callback(slack_request(click("open_in_browser", fake_slack)), decide))
    assert decide.calls == []


def test_another_modal_is_acknowledged_and_ignored(adapter: SlackAdapter) -> None:
    body = form_body(view_submission_payload(private_metadata="", callback_id="someone-elses-view"))
    decide = RecordingDecide()
    assert_empty_ok(adapter.handle_callback(slack_request(body), decide))
    assert decide.calls == []


def test_other_payload_types_are_acknowledged_and_ignored(adapter: SlackAdapter) -> None:
    body = form_body({"type": "shortcut", "callback_id": "x", "trigger_id": "1.2.3", "user": {"id": "U1"}})
    decide = RecordingDecide()
    assert_empty_ok(adapter.handle_callback(slack_request(body), decide))
    assert decide.calls == []
