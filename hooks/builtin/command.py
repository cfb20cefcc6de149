"""`command`: run a program with the event as JSON on stdin (Claude Code's hook protocol)."""

from __future__ import annotations

import json
import subprocess
from typing import Literal

from pydantic import Field

from hooks.base import Hook, HookContext, HookResult
from hooks.builtin.external import event_payload, parse_answer
from hooks.config import Event, HookConfigBase


class CommandConfig(HookConfigBase):
    """Run a command with the event as JSON on stdin; exit 2 denies with stderr as the reason."""

    kind: Literal["command"]
    event: Event
    command: list[str] = Field(min_length=1, description="argv")
    timeout_ms: int = Field(default=5000, gt=0)


class CommandHook(Hook):
    """Invariant: the program's verdict is applied, and it never runs past `timeout_ms`.

    Exit 0 with JSON on stdout: that answer. Exit 0 with nothing: no opinion.
    Exit 2: deny, stderr is the reason. Any other exit, a timeout or unreadable
    output is the hook's error, handled by `on_error`.
    """

    kind = "command"
    events = CommandConfig.EVENTS
    config_model = CommandConfig
    config: CommandConfig
    calls_out = True

    def run(self, ctx: HookContext) -> HookResult:
        timeout = self.config.timeout_ms / 1000
        try:
            proc = subprocess.run(
                self.config.command,
                input=json.dumps(event_payload(ctx, self.name)),
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"timed out after {self.config.timeout_ms} ms") from None
        except OSError as exc:
            raise RuntimeError(f"could not run {self.config.command[0]!r}: {exc.strerror}") from None
        if proc.returncode == 2:
            return HookResult.deny(proc.stderr.strip() or f"denied by {self.name}")
        if proc.returncode != 0:
            raise RuntimeError(f"exited {proc.returncode}: {proc.stderr.strip()[:500]}")
        out = proc.stdout.strip()
        try:
            return parse_answer(json.loads(out) if out else None)
        except ValueError as exc:
            raise RuntimeError(f"unreadable output: {exc}") from None
