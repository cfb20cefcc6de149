"""The `web` channel's config: a name, nothing else (its approvers are Django users)."""

from __future__ import annotations

from typing import Literal

from gateway_contract import ChannelConfigBase


class WebChannelConfig(ChannelConfigBase):
    kind: Literal["web"]
