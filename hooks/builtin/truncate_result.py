"""`truncate_result`: cut a tool's result to `max_chars` before it reaches the model (docs/reference/config.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from hooks.base import Hook, HookContext, HookResult, result_text
from hooks.config import HookConfigBase


class TruncateResultConfig(HookConfigBase):
    """Cut a tool's result to `max_chars`."""

    kind: Literal["truncate_result"]
    event: Literal["post_tool_use"] = "post_tool_use"
    max_chars: int = Field(ge=1)


def truncation_marker(kept: int, full: int) -> str:
    return f"\n[truncated by the gateway: showing the first {kept} of {full} characters]"


class TruncateResult(Hook):
    """Invariant: no result longer than `max_chars` characters (plus the marker) reaches the model.

    A longer result becomes its first `max_chars` characters followed by a
    marker line that says how long the whole was; a result that is not a
    string is cut as its JSON text. The full size is recorded on the tool call
    (`result_size`) and named in `side_effects` (`result_truncated:<hook>:<size>`).
    """

    kind = "truncate_result"
    events = TruncateResultConfig.EVENTS
    config_model = TruncateResultConfig
    config: TruncateResultConfig

    def run(self, ctx: HookContext) -> HookResult:
        if ctx.result is None:
            return HookResult.no_opinion()
        text = result_text(ctx.result)
        limit = self.config.max_chars
        if len(text) <= limit:
            return HookResult.no_opinion()
        return HookResult(
            reason=f"result cut to {limit} of {len(text)} characters",
            result=text[:limit] + truncation_marker(limit, len(text)),
            side_effects=[f"result_truncated:{self.name}:{len(text)}"],
        )
