"""`redact`: mask secrets in what is stored, shown and logged — never in what the agent gets
(docs/reference/config.md)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, model_validator

from hooks.base import Hook, HookContext, HookResult
from hooks.config import HookConfigBase, Regex


class RedactConfig(HookConfigBase):
    """Mask argument values in what is stored, shown and logged (never in what the agent gets)."""

    kind: Literal["redact"]
    event: Literal["pre_tool_use"] = "pre_tool_use"
    keys: list[str] = Field(default=[], description="Argument names, matched at any depth.")
    patterns: list[Regex] = []
    replacement: str = "[redacted]"

    @model_validator(mode="after")
    def _redacts_something(self) -> RedactConfig:
        if not self.keys and not self.patterns:
            raise ValueError("needs keys or patterns (or both)")
        return self


class Redact(Hook):
    """Invariant: no value under one of `keys` (at any depth, names compared case-insensitively)
    and no match of one of `patterns` (in any string or number) reaches the tool-call record,
    the confirmation request, its cards or the logs.

    The chain runner applies `mask` to the final arguments it stores; the agent
    is answered with the arguments unmasked. The hook itself has no opinion on
    the call.
    """

    kind = "redact"
    events = RedactConfig.EVENTS
    config_model = RedactConfig
    config: RedactConfig

    def __init__(self, config):
        super().__init__(config)
        self.keys = frozenset(key.casefold() for key in config.keys)
        self.patterns = tuple(re.compile(pattern) for pattern in config.patterns)
        self.replacement = config.replacement

    def run(self, ctx: HookContext) -> HookResult:
        masked = self.mask(ctx.tool_args) != ctx.tool_args
        return HookResult.no_opinion(reason="stored arguments masked" if masked else "")

    def mask(self, args: dict[str, Any]) -> dict[str, Any]:
        return self._mask(args)

    def _mask(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {
                key: self.replacement if str(key).casefold() in self.keys else self._mask(item)
                for key, item in value.items()
            }
        if isinstance(value, (list, tuple)):
            return [self._mask(item) for item in value]
        if isinstance(value, str):
            return self._mask_text(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and self.patterns:
            text = str(value)
            masked = self._mask_text(text)
            return value if masked == text else masked  # a card number sent as a number
        return value

    def _mask_text(self, text: str) -> str:
        for pattern in self.patterns:
            text = pattern.sub(self.replacement, text)
        return text
