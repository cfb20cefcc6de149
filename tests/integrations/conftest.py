"""Fixtures for the framework integrations: the real gateway over HTTP with a Slack channel served by
the fake Slack, a real Celery worker posting the cards, an approver who clicks in Slack, and the
fake OpenAI API the frameworks' own clients talk to."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import apply_config
from tests.fakes.openai_api import fake_openai  # noqa: F401 - the fixture
from tests.fakes.slack_api import (
    FakeSlack,
    block_actions_payload,
    form_body,
    signed_slack_request,
    view_submission_payload,
)
from tests.support import wait_until

ROOT = Path(__file__).resolve().parents[2]
SIGNING_SECRET = "1ntegrat10nss1gn1ngs3cr3t0123456"
BOT_TOKEN = "xoxb-1111-2222-integrationToken"
SLACK_CHANNEL_ID = "C0APPROVALS"
CHANNEL = "ops-slack"
WAIT = 30.0  # seconds any one step may take on a busy machine


@dataclasses.dataclass(frozen=True)
class SlackUser:
    id: str
    name: str


ALICE = SlackUser("U0ALICE", "alice")
BOB = SlackUser("U0BOB", "bob")


def slack_gate(tools: list[str], **extra: Any) -> dict[str, Any]:
    """An approval gate: alice or bob decides in #approvals."""
    return {
        "kind": "approval_gate",
        "name": "ask-a-human",
        "tools": tools,
        "channel": CHANNEL,
        "approvers": [ALICE.id, BOB.id],
        "timeout_seconds": 600,
        **extra,
    }


def command_hook(name: str, tools: list[str], script: str, *, priority: int = 10) -> dict[str, Any]:
    """A pre-tool-use `command` hook running `python -c script` (Claude Code's hook protocol)."""
    return {
        "kind": "command",
        "name": name,
        "event": "pre_tool_use",
        "priority": priority,
        "tools": tools,
        "command": [sys.executable, "-c", script],
    }


def cap_amount(limit: int) -> str:
    """A command hook script that rewrites `amount` to at most `limit`."""
    return (
        "import json,sys; e=json.load(sys.stdin); a=e['tool_input']; "
        f"a['amount']=min(a['amount'],{limit}); print(json.dumps({{'tool_args': a}}))"
    )


@dataclasses.dataclass
class PostedCard:
    channel: str
    ts: str
    blocks: list[dict[str, Any]]

    def button(self, action_id: str) -> dict[str, Any]:
        (actions,) = [b for b in self.blocks if b["type"] == "actions"]
        (button,) = [e for e in actions["elements"] if e["action_id"] == action_id]
        return button


class SlackApprover:
    """Approvers in Slack: they find the card the gateway posted and click its buttons (signed, like Slack)."""

    def __init__(self, gateway_url: str, fake_slack: FakeSlack):
        self.gateway_url = gateway_url
        self.slack = fake_slack

    def cards(self) -> list[PostedCard]:
        """The approval cards in the channel, oldest first (as Slack shows them now)."""
        return [
            PostedCard(channel, ts, list(message.get("blocks") or []))
            for (channel, ts), message in list(self.slack.messages.items())
            if not message.get("thread_ts")
        ]

    def card(self, number: int = 1) -> PostedCard:
        """Wait until `number` cards are posted; the last one."""
        return wait_until(lambda: len(self.cards()) >= number and self.cards()[number - 1], WAIT, "the card")

    def _post(self, payload: dict[str, Any]) -> httpx.Response:
        body = form_body(payload)
        headers = {"Content-Type": "application/x-www-form-urlencoded", **signed_slack_request(SIGNING_SECRET, body)}
        response = httpx.post(
            f"{self.gateway_url}/channels/{CHANNEL}/callback", content=body, headers=headers, timeout=WAIT
        )
        assert response.status_code == 200, response.text
        return response

    def click(self, card: PostedCard, user: SlackUser, action_id: str) -> httpx.Response:
        payload = block_actions_payload(
            action_id=action_id,
            value=card.button(action_id)["value"],
            user_id=user.id,
            user_name=user.name,
            trigger_id=f"trigger.{user.name}.{action_id}.{card.ts}",
            response_url=self.slack.response_url(user.name),
            channel_id=card.channel,
            message_ts=card.ts,
        )
        return self._post(payload)

    def approve(self, card: PostedCard | None = None, user: SlackUser = ALICE) -> None:
        self.click(card or self.card(), user, "approve")

    def reject(self, reason: str, card: PostedCard | None = None, user: SlackUser = BOB) -> None:
        """Reject opens the reason form; the approver submits it with `reason`."""
        card = card or self.card()
        self.click(card, user, "reject")
        trigger = f"trigger.{user.name}.reject.{card.ts}"
        opened = wait_until(
            lambda: [c for c in self.slack.calls("views.open") if c.json["trigger_id"] == trigger], WAIT, "the form"
        )
        submission = view_submission_payload(
            private_metadata=opened[-1].json["view"]["private_metadata"],
            reason=reason,
            user_id=user.id,
            user_name=user.name,
        )
        self._post(submission)


@dataclasses.dataclass
class Gateway:
    """The live gateway, configured for one agent of the test."""

    url: str
    approver: SlackApprover
    slack: FakeSlack

    def configure(self, agent: str, hooks: list[dict[str, Any]]) -> str:
        """Apply a config with the Slack channel and `agent`; a new API key for it."""
        from approvals import services
        from approvals.models import Agent

        config = {
            "channels": [
                {
                    "name": CHANNEL,
                    "kind": "slack",
                    "bot_token": BOT_TOKEN,
                    "signing_secret": SIGNING_SECRET,
                    "channel_id": SLACK_CHANNEL_ID,
                    "api_base_url": self.slack.base_url,
                }
            ],
            "agents": [{"name": agent, "hooks": hooks}],
        }
        apply_config(yaml.safe_dump(config))
        _, key = services.api_key_create(agent=Agent.objects.get(name=agent))
        return key


@pytest.fixture
def gateway(live_gateway, fake_slack, celery_worker) -> Gateway:
    """The gateway over HTTP, its Slack channel on the fake Slack, and a worker that posts the cards."""
    return Gateway(url=live_gateway.url, approver=SlackApprover(live_gateway.url, fake_slack), slack=fake_slack)


@pytest.fixture
def quiet_gateway(live_gateway, fake_slack, transactional_db) -> Gateway:
    """The gateway over HTTP without a Celery worker (for calls that never ask a human)."""
    return Gateway(url=live_gateway.url, approver=SlackApprover(live_gateway.url, fake_slack), slack=fake_slack)


def example_env(gateway_url: str, api_key: str, openai_base_url: str, **extra: str) -> dict[str, str]:
    """The environment a newcomer sets for the examples (docs/integrations/…), pointed at the fakes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "GATEWAY_"))}
    env.update(
        GATEWAY_URL=gateway_url,
        GATEWAY_API_KEY=api_key,
        OPENAI_BASE_URL=openai_base_url,
        OPENAI_API_KEY="sk-test-not-a-real-key",
        OPENAI_AGENTS_DISABLE_TRACING="1",  # the SDK would export traces to api.openai.com
        GATEWAY_RECONNECT_FOR="1",
        **extra,
    )
    return env
