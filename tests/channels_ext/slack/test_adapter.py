"""SlackAdapter's outbound calls: the real slack-sdk against FakeSlack."""

from __future__ import annotations

import datetime as dt
import logging
import socket
import time
from typing import Any

import pytest

from gateway_contract import CardView, ChannelError, MessageRef, get_adapter, unsign_confirmation_id
from channels_ext.slack.adapter import SlackAdapter
from tests.fakes.slack_api import FakeSlack

TOKEN = "xoxb-1111-2222-secret-token"


def make_card(**overrides: Any) -> CardView:
    defaults: dict[str, Any] = dict(
        confirmation_id="6f1c2e1a-0000-4000-8000-000000000001",
        agent="purchasing-bot",
        tool_name="oa__purchase_pay",
        tool_args={"amount": 80000},
        user_id="u-42",
        session_id="s-1",
        reason="Payments need a human",
        hook="approval_gate-1",
        status="pending",
        url="http://127.0.0.1:8000/approvals/6f1c2e1a",
        approvers=("U0APPROVER",),
    )
    return CardView(**{**defaults, **overrides})


def make_adapter(base_url: str, cls: type[SlackAdapter] = SlackAdapter) -> SlackAdapter:
    config = {"bot_token": TOKEN, "signing_secret": "shh", "channel_id": "C0CARDS", "api_base_url": base_url}
    if cls is SlackAdapter:
        adapter = get_adapter("ops-slack", "slack", config)
        assert isinstance(adapter, SlackAdapter)
        return adapter
    return cls("ops-slack", cls.config_model.model_validate({"name": "ops-slack", "kind": "slack", **config}))


@pytest.fixture
def adapter(fake_slack: FakeSlack) -> SlackAdapter:
    return make_adapter(fake_slack.base_url)


def post_error(adapter: SlackAdapter) -> ChannelError:
    with pytest.raises(ChannelError) as caught:
        adapter.post_card(make_card(), idempotency_key="k-1")
    assert TOKEN not in str(caught.value)
    return caught.value


def buttons(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for b in blocks if b["type"] == "actions" for e in b["elements"]]


def test_it_posts_the_card_to_the_configured_channel(adapter: SlackAdapter, fake_slack: FakeSlack) -> None:
    ref = adapter.post_card(make_card(), idempotency_key="k-1")

    (call,) = fake_slack.calls("chat.postMessage")
    assert call.headers["Authorization"] == f"Bearer {TOKEN}"
    assert call.json["channel"] == "C0CARDS"
    assert call.json["text"] == "Approval needed: purchasing-bot wants to run oa__purchase_pay"
    assert "amount = 80000" in str(call.json["blocks"])
    assert ref == MessageRef({"channel": "C0CARDS", "ts": next(iter(fake_slack.messages))[1]})


def test_the_posted_buttons_are_approve_and_reject_with_signed_values(
    adapter: SlackAdapter,
    fake_slack: FakeSlack,
) -> None:
    adapter.post_card(make_card(), idempotency_key="k-1")

    approve, reject = buttons(fake_slack.calls("chat.postMessage")[0].json["blocks"])
    assert [approve["action_id"], reject["action_id"]] == ["approve", "reject"]
    assert unsign_confirmation_id(approve["value"]) == "6f1c2e1a-0000-4000-8000-000000000001"
    assert unsign_confirmation_id(reject["value"]) == "6f1c2e1a-0000-4000-8000-000000000001"


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"status": "approved", "decided_by": "U0APPROVER"}, "✅ Approved by <@U0APPROVER>"),
        (
            {"status": "rejected", "decided_by": "U0APPROVER", "decision_reason": "over budget"},
            "❌ Rejected by <@U0APPROVER>",
        ),
        ({"status": "expired"}, "⌛ Expired"),
        ({"status": "cancelled"}, "🚫 Cancelled"),
    ],
)
def test_a_decided_card_loses_its_buttons_and_shows_the_outcome(
    adapter: SlackAdapter,
    fake_slack: FakeSlack,
    changes: dict[str, Any],
    expected: str,
) -> None:
    ref = adapter.post_card(make_card(), idempotency_key="k-1")
    decided = make_card(decided_at=dt.datetime(2030, 1, 1, tzinfo=dt.UTC), **changes)

    adapter.update_card(decided, ref)

    (call,) = fake_slack.calls("chat.update")
    assert (call.json["channel"], call.json["ts"]) == (ref.data["channel"], ref.data["ts"])
    assert call.json["text"].startswith(expected)
    message = fake_slack.messages[(ref.data["channel"], ref.data["ts"])]
    assert buttons(message["blocks"]) == []
    assert message["blocks"][1]["text"]["text"].startswith(expected)
    if changes.get("decision_reason"):
        assert "— over budget" in message["blocks"][1]["text"]["text"]


def test_reminders_redraw_the_card_and_mention_the_approvers_in_its_thread(
    adapter: SlackAdapter,
    fake_slack: FakeSlack,
) -> None:
    ref = adapter.post_card(make_card(), idempotency_key="k-1")

    adapter.notify_approvers(make_card(), ref, "Still waiting for your decision")

    (update,) = fake_slack.calls("chat.update")
    assert "🔔 Still waiting for your decision" in str(update.json["blocks"])
    reply = fake_slack.calls("chat.postMessage")[-1]
    assert reply.json["thread_ts"] == ref.data["ts"]
    assert reply.json["text"] == "<@U0APPROVER> Still waiting for your decision"


def test_reminders_mention_only_the_approvers_still_waiting(adapter: SlackAdapter, fake_slack: FakeSlack) -> None:
    card = make_card(approvers=("U0APPROVER", "U0OTHER", "bob"), approved_by=("slack:U0APPROVER",), approvals_required=2)
    ref = adapter.post_card(card, idempotency_key="k-1")

    adapter.notify_approvers(card, ref, "Reminder")

    assert fake_slack.calls("chat.postMessage")[-1].json["text"] == "<@U0OTHER> Reminder"


def test_a_reminder_with_nobody_to_mention_only_redraws_the_card(adapter: SlackAdapter, fake_slack: FakeSlack) -> None:
    ref = adapter.post_card(make_card(approvers=()), idempotency_key="k-1")

    adapter.notify_approvers(make_card(approvers=()), ref, "Reminder")

    assert len(fake_slack.calls("chat.update")) == 1
    assert len(fake_slack.calls("chat.postMessage")) == 1


def test_a_rate_limit_is_waited_out_and_posts_exactly_one_card(
    adapter: SlackAdapter,
    fake_slack: FakeSlack,
) -> None:
    fake_slack.fail_next(
        "chat.postMessage", status=429, body={"ok": False, "error": "ratelimited"}, headers={"Retry-After": "1"}
    )
    started = time.monotonic()

    ref = adapter.post_card(make_card(), idempotency_key="k-1")

    assert time.monotonic() - started >= 1
    assert len(fake_slack.calls("chat.postMessage")) == 2
    assert list(fake_slack.messages) == [(ref.data["channel"], ref.data["ts"])]


def test_a_rate_limit_that_outlasts_the_retries_is_transient_with_retry_after(
    adapter: SlackAdapter,
    fake_slack: FakeSlack,
) -> None:
    ratelimited = {"ok": False, "error": "ratelimited"}
    fake_slack.fail_next("chat.postMessage", status=429, body=ratelimited, headers={"Retry-After": "0"}, times=2)
    fake_slack.fail_next("chat.postMessage", status=429, body=ratelimited, headers={"Retry-After": "7"})

    error = post_error(adapter)

    assert len(fake_slack.calls("chat.postMessage")) == 3  # the first try and two SDK retries
    assert not error.permanent
    assert error.retry_after == 7
    assert error.message == "slack chat.postMessage failed: ratelimited"
    assert fake_slack.messages == {}


@pytest.mark.parametrize(
    "code", ["invalid_auth", "channel_not_found", "not_in_channel", "token_revoked", "is_archived", "missing_scope"]
)
def test_errors_that_retrying_cannot_fix_are_permanent(
    adapter: SlackAdapter,
    fake_slack: FakeSlack,
    code: str,
) -> None:
    fake_slack.fail_next("chat.postMessage", body={"ok": False, "error": code})

    error = post_error(adapter)

    assert error.permanent
    assert error.message == f"slack chat.postMessage failed: {code}"
    assert len(fake_slack.calls("chat.postMessage")) == 1


def test_editing_a_message_that_is_gone_is_permanent(adapter: SlackAdapter, fake_slack: FakeSlack) -> None:
    with pytest.raises(ChannelError) as caught:
        adapter.update_card(make_card(status="expired"), MessageRef({"channel": "C0CARDS", "ts": "1.000001"}))
    assert caught.value.permanent
    assert caught.value.message == "slack chat.update failed: message_not_found"


def test_a_ref_without_channel_or_ts_is_a_permanent_error(adapter: SlackAdapter) -> None:
    with pytest.raises(ChannelError) as caught:
        adapter.update_card(make_card(), MessageRef({}))
    assert caught.value.permanent


def test_a_server_error_is_transient(adapter: SlackAdapter, fake_slack: FakeSlack) -> None:
    fake_slack.fail_next("chat.postMessage", status=500, body={"ok": False, "error": "internal_error"})

    error = post_error(adapter)

    assert not error.permanent
    assert error.message == "slack chat.postMessage failed: internal_error"


def test_an_html_gateway_error_is_transient(adapter: SlackAdapter, fake_slack: FakeSlack) -> None:
    fake_slack.fail_next("chat.postMessage", status=502, body="<html>Bad Gateway</html>")

    error = post_error(adapter)

    assert not error.permanent
    assert error.message.startswith("slack chat.postMessage failed: ")


def test_a_logical_error_outside_the_permanent_list_is_transient(
    adapter: SlackAdapter,
    fake_slack: FakeSlack,
) -> None:
    fake_slack.fail_next("chat.postMessage", body={"ok": False, "error": "service_unavailable"})

    assert not post_error(adapter).permanent


def test_a_refused_connection_is_transient(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    with socket.socket() as sock:  # a port nobody listens on any more
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    error = post_error(make_adapter(f"http://127.0.0.1:{port}/api/"))

    assert not error.permanent
    assert error.message == "slack chat.postMessage failed: connection error (URLError)"


def test_a_timeout_is_transient(fake_slack: FakeSlack) -> None:
    class ImpatientSlackAdapter(SlackAdapter):
        http_timeout = 1

    fake_slack.fail_next("chat.postMessage", delay=2, body={"ok": True, "channel": "C0CARDS", "ts": "1.1"})

    error = post_error(make_adapter(fake_slack.base_url, ImpatientSlackAdapter))

    assert not error.permanent
    assert "connection error" in error.message


def test_the_token_never_reaches_the_logs(
    adapter: SlackAdapter,
    fake_slack: FakeSlack,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    fake_slack.fail_next("chat.postMessage", body={"ok": False, "error": "invalid_auth"})

    post_error(adapter)

    assert "slack chat.postMessage failed: invalid_auth" in caplog.text
    assert TOKEN not in caplog.text
