"""send_response_url: the ephemeral note posted after Slack has had its answer."""

from __future__ import annotations

import logging

import pytest

from channels_ext.slack.tasks import TransientResponseUrlError, send_response_url
from tests.fakes.slack_api import FakeSlack

NOTE = {"response_type": "ephemeral", "replace_original": False, "text": "You are not an approver."}


def test_it_posts_the_note_as_json_to_the_response_url(fake_slack: FakeSlack) -> None:
    send_response_url.run(fake_slack.response_url("abc"), NOTE)

    (call,) = fake_slack.calls("response_url")
    assert call.path == "/response_url/abc"
    assert call.headers["Content-Type"] == "application/json;charset=utf-8"
    assert call.json == NOTE


@pytest.mark.parametrize("status", [429, 500, 503])
def test_a_busy_or_broken_slack_is_retried(fake_slack: FakeSlack, status: int) -> None:
    fake_slack.fail_next("response_url", status=status, body="busy")

    # Called directly, Celery's autoretry re-raises instead of scheduling a retry.
    with pytest.raises(TransientResponseUrlError):
        send_response_url.run(fake_slack.response_url("abc"), NOTE)


def test_an_expired_response_url_is_logged_and_dropped(
    fake_slack: FakeSlack,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake_slack.fail_next("response_url", status=404, body="expired_url")

    with caplog.at_level(logging.WARNING, logger="channels_ext.slack.tasks"):
        send_response_url.run(fake_slack.response_url("abc"), NOTE)

    assert "refused the message: 404 expired_url" in caplog.text
    assert "/response_url/abc" not in caplog.text


def test_the_task_is_configured_to_back_off_on_transient_failures() -> None:
    assert send_response_url.autoretry_for == (TransientResponseUrlError,)
    assert send_response_url.retry_backoff
    assert send_response_url.max_retries == 5
