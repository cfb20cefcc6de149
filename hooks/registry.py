"""The hook registry and the chain runner.

`registry.register` (alias `register`) records a hook class per kind,
checking its shape at import time. `run_chain` runs an agent's hooks for one
event in priority order (file order on ties), carries rewritten args forward,
stops a deciding event at the first deny, and records every hook's answer.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from pydantic import BaseModel

from hooks.base import DECIDING_EVENTS, EVENTS, AskSpec, Hook, HookContext, HookResult

logger = logging.getLogger("hooks")


class HookRegistry:
    def __init__(self) -> None:
        self.kinds: dict[str, type[Hook]] = {}

    def register(self, cls: type[Hook]) -> type[Hook]:
        kind = getattr(cls, "kind", None)
        if not kind or not isinstance(kind, str):
            raise TypeError(f"{cls.__name__} must set `kind`")
        if kind in self.kinds:
            raise TypeError(f"hook kind {kind!r} is registered twice")
        events = getattr(cls, "events", ())
        if not events or any(e not in EVENTS for e in events):
            raise TypeError(f"{cls.__name__}.events must be a non-empty tuple of {EVENTS}")
        if not isinstance(getattr(cls, "config_model", None), type) or not issubclass(cls.config_model, BaseModel):
            raise TypeError(f"{cls.__name__}.config_model must be a pydantic model")
        if cls.run is Hook.run:
            raise TypeError(f"{cls.__name__} must implement run()")
        self.kinds[kind] = cls
        return cls

    def build(self, configs: list[BaseModel]) -> list[Hook]:
        """Instantiate validated hook configs, sorted by priority (stable: file order on ties)."""
        import hooks.builtin  # noqa: F401  (registers the built-in kinds)

        built = [self.kinds[c.kind](c) for c in configs]  # type: ignore[attr-defined]
        return sorted(built, key=lambda h: h.priority)


registry = HookRegistry()
register = registry.register


@dataclasses.dataclass
class ChainOutcome:
    decision: str  # allow | deny | ask (deciding events); allow for observing events
    reason: str
    decided_by: str
    tool_args: dict[str, Any]
    stored_args: dict[str, Any] | None
    ask: AskSpec | None
    hook_decisions: list[dict[str, Any]]
    side_effects: list[str]
    result: Any
    result_rewritten: bool
    messages: list[dict[str, Any]]
    action: str
    delay_seconds: float


def run_chain(hooks: list[Hook], ctx: HookContext) -> ChainOutcome:
    """Run `hooks` for `ctx.event`. Hooks never raise out of here: errors follow `on_error`."""
    deciding = ctx.event in DECIDING_EVENTS
    gates = {h.name: h for h in hooks if h.kind == "approval_gate"}
    asked_via = {getattr(h.config, "ask_via", None) for h in hooks if h.kind == "policy"} - {None}
    out = ChainOutcome(
        decision="allow",
        reason="",
        decided_by="",
        tool_args=dict(ctx.tool_args),
        stored_args=None,
        ask=None,
        hook_decisions=[],
        side_effects=[],
        result=ctx.result,
        result_rewritten=False,
        messages=[],
        action="",
        delay_seconds=0.0,
    )
    maskers: list[Hook] = []
    reached: set[int] = set()
    for hook in hooks:
        reached.add(id(hook))
        if hook.name in asked_via:
            continue  # a gate named by a policy's ask_via runs only when asked
        result = _run_one(hook, ctx)
        if result is None:
            continue
        if result.ask_via and result.decision == "ask":
            gate = gates.get(result.ask_via)
            if gate is not None:
                routed = _run_one(gate, ctx, force=True)
                if routed is not None and routed.ask is not None:
                    result.ask = dataclasses.replace(routed.ask, reason=result.reason or routed.ask.reason)
        out.hook_decisions.append(
            {"hook": hook.name, "kind": hook.kind, "decision": result.decision, "reason": result.reason}
        )
        out.side_effects.extend(result.side_effects)
        out.messages.extend(result.messages)
        if result.tool_args is not None:
            ctx.tool_args = dict(result.tool_args)
            out.tool_args = dict(result.tool_args)
        if type(hook).mask is not Hook.mask:
            maskers.append(hook)
        if result.rewrote_result:
            ctx.result = result.result
            out.result, out.result_rewritten = result.result, True
        if result.action and not out.action:
            out.action, out.delay_seconds = result.action, result.delay_seconds
            out.reason, out.decided_by = result.reason, hook.name
        if not deciding:
            continue
        if result.decision == "deny":
            out.decision, out.reason, out.decided_by, out.ask = "deny", result.reason, hook.name, None
            break
        if result.decision == "ask" and out.ask is None:
            if result.ask is None:
                out.decision, out.reason, out.decided_by = (
                    "deny",
                    f"hook {hook.name} asked for approval but names no approval gate",
                    hook.name,
                )
                break
            out.decision, out.reason, out.decided_by, out.ask = "ask", result.reason, hook.name, result.ask
        elif result.decision == "allow" and out.decision == "allow" and not out.decided_by:
            out.reason, out.decided_by = result.reason, hook.name
    # A masking hook the chain stopped before (a deny ran first) still masks what is stored.
    for hook in hooks:
        if type(hook).mask is not Hook.mask and id(hook) not in reached and _would_trigger(hook, ctx):
            maskers.append(hook)
    if maskers:
        # What is stored, shown on cards and logged: the final args with every mask applied.
        stored = out.tool_args
        for hook in maskers:
            stored = hook.mask(stored)
        out.stored_args = stored
    return out


def _would_trigger(hook: Hook, ctx: HookContext) -> bool:
    """Whether a hook that did not run applies to this call; if its `when` fails, mask anyway."""
    try:
        return hook.should_trigger(ctx)
    except Exception:
        return True


def _run_one(hook: Hook, ctx: HookContext, *, force: bool = False) -> HookResult | None:
    """One hook, with its `on_error` policy applied. None if it does not apply."""
    try:
        if not force and not hook.should_trigger(ctx):
            return None
        result = hook.run(ctx)
        if not isinstance(result, HookResult):
            raise TypeError(f"hook returned {type(result).__name__}, not HookResult")
        return result
    except Exception as exc:
        message = f"hook {hook.name} failed: {exc}"
        if hook.on_error == "fail_open":
            logger.warning("%s (fail_open: ignored)", message)
            return HookResult(decision="none", reason=message, side_effects=[f"hook_error:{hook.name}"])
        logger.warning("%s (fail_closed: denied)", message)
        return HookResult(decision="deny", reason=message, action="abort" if ctx.event == "tool_error" else "")
