"""A DingTalk channel on the live gateway, its Stream held by `channel_connections`' runner."""

from __future__ import annotations

from tests.channels_ext.contract import gated_agent_yaml
from tests.conftest import AgentClient, apply_config, make_agent_client
from tests.fakes.dingtalk_api import FakeDingTalk

CHANNEL = "ops-dingtalk"
OPEN_CONVERSATION_ID = "cidAbCdEf123=="
TOOL = "oa__purchase_pay"
# Approvers are listed by their DingTalk userId (what `dingtalk:<userId>` records).
MANAGER = "manager01"
DIRECTOR = "director02"
INTERN = "intern99"


def channel_yaml(fake: FakeDingTalk) -> str:
    """The channel as docs/dingtalk.md tells people to write it, pointed at the fake."""
    return f"""
channels:
  - name: {CHANNEL}
    kind: dingtalk
    client_id: {fake.client_id}
    client_secret: {fake.client_secret}
    open_conversation_id: "{OPEN_CONVERSATION_ID}"
    api_base_url: {fake.api_base_url}
"""


def agents_yaml(timeout_seconds: int, gate_keys: str = "") -> str:
    return gated_agent_yaml(CHANNEL, (MANAGER, DIRECTOR), timeout_seconds, gate_keys)


def deploy(live_gateway, fake: FakeDingTalk, *, timeout_seconds: int = 1800, gate_keys: str = "") -> AgentClient:
    apply_config(channel_yaml(fake) + agents_yaml(timeout_seconds, gate_keys))
    return make_agent_client(live_gateway, "purchasing-bot")
