"""A Teams channel on the live gateway, and clicks as Teams sends them (an `invoke` activity, signed)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import httpx

from approvals.models import Outbox
from tests.channels_ext.contract import gated_agent_yaml
from tests.conftest import AgentClient, apply_config, make_agent_client
from tests.fakes.teams_api import FakeTeams
from tests.support import wait_until

CHANNEL = "ops-teams"
CONVERSATION_ID = "19:3f1c6d2a9b8e4f7a@thread.tacv2"
TOOL = "oa__purchase_pay"
# Approvers are listed by their Entra object ids (what `teams:<aadObjectId>` records).
ALICE = ("0b1c2d3e-4f5a-4b6c-8d7e-9f0a1b2c3d4e", "Alice Example")
BOB = ("5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9", "Bob Example")
MALLORY = ("9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d", "Mallory Outsider")


def channel_yaml(fake: FakeTeams) -> str:
    """The channel as docs/teams.md tells people to write it, pointed at the fake."""
    return f"""
channels:
  - name: {CHANNEL}
    kind: teams
    app_id: {fake.app_id}
    app_password: {fake.app_password}
    tenant_id: {fake.tenant_id}
    conversation_id: "{CONVERSATION_ID}"
    service_url: {fake.service_url}
    login_url: {fake.login_url}
    openid_metadata_url: {fake.openid_metadata_url}
"""


def agents_yaml(timeout_seconds: int, gate_keys: str = "") -> str:
    return gated_agent_yaml(CHANNEL, (ALICE[0], BOB[0]), timeout_seconds, gate_keys)


def deploy(live_gateway, fake: FakeTeams, *, timeout_seconds: int = 1800, gate_keys: str = "") -> AgentClient:
    apply_config(channel_yaml(fake) + agents_yaml(timeout_seconds, gate_keys))
    return make_agent_client(live_gateway, "purchasing-bot")


def pending_card(live_gateway, fake: FakeTeams, **deploy_keys) -> tuple[AgentClient, str, dict[str, dict[str, Any]]]:
    """Deploy, make one gated call and wait for its card: (the agent, the request's id, the card's buttons by verb)."""
    agent = deploy(live_gateway, fake, **deploy_keys)
    answer = agent.pre_tool_use(TOOL, {"amount": 80000}, user_id="u-42").json()
    assert answer["decision"] == "pending", answer
    wait_until(lambda: Outbox.objects.filter(kind="card", status="sent").exists(), what="the card to be posted")
    [activity] = fake.posted()
    return agent, answer["confirmation_id"], {b["verb"]: b for b in executes(activity.card)}


def invoke_activity(
    fake: FakeTeams,
    verb: str,
    data: dict[str, Any],
    *,
    who: tuple[str, str] = ALICE,
    activity_id: str | None = None,
    reply_to: str = "",
) -> dict[str, Any]:
    """The `adaptiveCard/action` invoke Teams posts when `who` presses an Action.Execute button."""
    activity = {
        "type": "invoke",
        "name": "adaptiveCard/action",
        "id": activity_id or f"f:{uuid.uuid4()}",
        "timestamp": "2026-11-26T10:00:00.000Z",
        "channelId": "msteams",
        "serviceUrl": fake.service_url,
        "from": {"id": f"29:1{who[0][:8]}", "name": who[1], "aadObjectId": who[0]},
        "conversation": {"id": CONVERSATION_ID, "conversationType": "channel", "tenantId": fake.tenant_id},
        "recipient": {"id": f"28:{fake.app_id}", "name": "Approvals"},
        "channelData": {"tenant": {"id": fake.tenant_id}},
        "value": {"action": {"type": "Action.Execute", "verb": verb, "data": data}, "trigger": "manual"},
    }
    if reply_to:
        activity["replyToId"] = reply_to  # the card's own activity
    return activity


def post_activity(live_gateway, activity: dict[str, Any], token: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return httpx.post(f"{live_gateway.url}/channels/{CHANNEL}/callback", json=activity, headers=headers, timeout=15)


def find_all(card: dict[str, Any], wanted: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    """Every element anywhere in a card (its body, its actions, ShowCards' cards, ActionSets) that is `wanted`."""
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if wanted(node):
                found.append(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(card)
    return found


def executes(card: dict[str, Any]) -> list[dict[str, Any]]:
    """Every Action.Execute button of a card."""
    return find_all(card, lambda node: node.get("type") == "Action.Execute")


def inputs(card: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every input of a card, by id."""
    return {node["id"]: node for node in find_all(card, lambda node: str(node.get("type", "")).startswith("Input."))}


def text_of(element: dict[str, Any]) -> str:
    """The text of a TextBlock or a RichTextBlock."""
    if element.get("type") == "RichTextBlock":
        return "".join(run.get("text", "") for run in element["inlines"])
    return str(element.get("text", ""))


def card_text(card: dict[str, Any]) -> str:
    return "\n".join(text_of(element) for element in card["body"] if element.get("type") in ("TextBlock", "RichTextBlock"))


def element(card: dict[str, Any], element_id: str) -> dict[str, Any] | None:
    return next((e for e in card["body"] if e.get("id") == element_id), None)
