"""`truncate_result`: cut a tool's result to `max_chars` before it reaches the model (CONTRACT §3b)."""

from __future__ import annotations

import json
from typing import Any

from hooks.base import Hook, HookContext, HookResult
from hooks.registry import register
from hooks.schema import HOOK_CONFIG_MODELS


def result_text(result: Any) -> str:
    """A result as the model reads it: a string as is, anything else as JSON."""
    if isinstance(result, str):
        return result
    return json.dumps(result, ensure_ascii=False, default=str)


def truncation_marker(kept: int, full: int) -> str:
    return f"\n[truncated by the gateway: showing the first {kept} of {full} characters]"


@register
class TruncateResult(Hook):
    """Invariant: no result longer than `max_chars` characters (plus the marker) reaches the model.

    A longer result becomes its first `max_chars` characters followed by a
    marker line that says how long the whole was; a result that is not a
    string is cut as its JSON text. The full size is recorded on the tool call
    (`result_size`) and named in `side_effects` (`result_truncated:<hook>:<size>`).
    """

    kind = "truncate_result"
    events = HOOK_CONFIG_MODELS["truncate_result"].EVENTS
    config_model = HOOK_CONFIG_MODELS["truncate_result"]

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
