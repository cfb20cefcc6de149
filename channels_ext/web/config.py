"""The `web` channel's config: a name, nothing else (its approvers are Django users)."""

from __future__ import annotations

from typing import Literal

from channels_ext.base import ChannelConfigBase


class WebChannelConfig(ChannelConfigBase):
    kind: Literal["web"]
