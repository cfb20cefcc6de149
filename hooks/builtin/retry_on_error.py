"""`retry_on_error`: retry a failed tool call with doubling backoff (docs/reference/config.md)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field

from hooks.base import DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_TOTAL_SECONDS, Hook, HookContext, HookResult
from hooks.config import HookConfigBase, Regex


class RetryOnErrorConfig(HookConfigBase):
    """Retry a failed tool call with doubling backoff."""

    kind: Literal["retry_on_error"]
    event: Literal["tool_error"] = "tool_error"
    max_attempts: int = Field(default=DEFAULT_MAX_ATTEMPTS, ge=1)
    backoff_seconds: float = Field(default=1, ge=0, description="Doubles after each attempt.")
    max_total_seconds: float = Field(default=DEFAULT_MAX_TOTAL_SECONDS, gt=0)
    errors: list[Regex] = Field(default=[], description="Regexes the error must match; empty = any error.")


class RetryOnError(Hook):
    """Invariant: a matching error is retried at most `max_attempts` times in all and never
    past `max_total_seconds`, each wait twice the one before.

    `attempt` is the number of the attempt that just failed (1 = the first
    try); the next one waits `backoff_seconds * 2 ** (attempt - 1)`. An error
    that matches none of `errors` (when given), or a call whose attempts or time
    are used up, gets no opinion from this hook, so a later hook may still
    recover or abort; if none does, the gateway answers `raise`. The gateway
    enforces the same caps on whatever any hook answers (`hooks.chain.tool_error_verdict`).
    """

    kind = "retry_on_error"
    events = RetryOnErrorConfig.EVENTS
    config_model = RetryOnErrorConfig
    config: RetryOnErrorConfig

    def __init__(self, config):
        super().__init__(config)
        self._errors = [re.compile(pattern) for pattern in config.errors]

    def run(self, ctx: HookContext) -> HookResult:
        c = self.config
        if self._errors and not any(pattern.search(ctx.error or "") for pattern in self._errors):
            return HookResult.no_opinion(reason="the error matches none of this hook's patterns")
        if ctx.attempt >= c.max_attempts:
            return HookResult.no_opinion(reason=f"gave up after {ctx.attempt} attempts (max_attempts {c.max_attempts})")
        delay = c.backoff_seconds * 2 ** (ctx.attempt - 1)
        if ctx.elapsed_seconds + delay > c.max_total_seconds:
            return HookResult.no_opinion(
                reason=f"gave up after {ctx.elapsed_seconds:g} s: waiting {delay:g} s more "
                f"would pass max_total_seconds {c.max_total_seconds:g}"
            )
        return HookResult(
            action="retry",
            delay_seconds=delay,
            reason=f"attempt {ctx.attempt} of {c.max_attempts} failed; retrying in {delay:g} s",
        )

    def retry_caps(self) -> tuple[int, float]:
        return self.config.max_attempts, float(self.config.max_total_seconds)
