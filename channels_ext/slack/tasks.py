"""Celery tasks for Slack work that must happen after Slack has had its answer."""

from __future__ import annotations

import logging
from http.client import HTTPException
from typing import Any
from urllib.parse import urlsplit

from celery import shared_task
from slack_sdk.webhook import WebhookClient

logger = logging.getLogger(__name__)


class TransientResponseUrlError(Exception):
    """A transient failure posting to a `response_url` (connection, 429, 5xx): retried."""


@shared_task(
    autoretry_for=(TransientResponseUrlError,),
    retry_backoff=True,
    retry_backoff_max=60,
    retry_jitter=True,
    # A response_url is good for 30 minutes; five tries with backoff end well before that.
    max_retries=5,
)
def send_response_url(url: str, payload: dict[str, Any]) -> None:
    """POST `payload` to a Slack `response_url` (e.g. an ephemeral note to a clicker).

    https://docs.slack.dev/interactivity/handling-user-interaction#message_responses
    Transient failures are retried with backoff; a refusal (expired or used-up
    URL, bad payload) is logged and dropped, since retrying cannot fix it.
    """
    # The URL is a bearer capability for the message: log only its host.
    host = urlsplit(url).hostname or "?"
    try:
        response = WebhookClient(url, timeout=10).send_dict(payload)
    except (OSError, HTTPException) as err:
        raise TransientResponseUrlError(f"slack response_url on {host} unreachable: {type(err).__name__}") from err
    if response.status_code == 429 or response.status_code >= 500:
        raise TransientResponseUrlError(f"slack response_url on {host} answered {response.status_code}")
    if response.status_code != 200:
        logger.warning(
            "slack response_url on %s refused the message: %s %s",
            host,
            response.status_code,
            (response.body or "")[:200],
        )
