"""Running an agent's hooks for one event.

`run_chain` runs the hooks in priority order (file order on ties), carries
rewritten args forward, stops a deciding event at the first deny, and records
every hook's answer. An `ask` is routed to the hook the asker names
(`Hook.ask_targets` / `HookResult.ask_via`), which then runs only when asked.
`tool_error_verdict` turns a tool-error chain into the one action the agent
gets, with the retry caps applied whatever the hooks said.

Nothing here touches the gateway's records: the caller
(`approvals.services`) stores what the chain decided.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from gateway_utils import metrics, tracing
from hooks.base import (
    DECIDING_EVENTS,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_TOTAL_SECONDS,
    AskSpec,
    Hook,
    HookContext,
    HookResult,
)

logger = logging.getLogger("hooks")


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
    askers = {hook.name: hook for hook in hooks if hook.can_ask}
    asked_only = frozenset().union(*(hook.ask_targets() for hook in hooks))
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
        if hook.name in asked_only:
            continue  # a hook another routes its asks to runs only when asked
        result = _run_one(hook, ctx)
        if result is None:
            continue
        if result.ask_via and result.decision == "ask":
            target = askers.get(result.ask_via)
            if target is not None:
                routed = _run_one(target, ctx, force=True)
                if routed is not None and routed.ask is not None:
                    result.ask = dataclasses.replace(
                        routed.ask, reason=result.reason or routed.ask.reason, risk=result.risk or routed.ask.risk
                    )
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


def mask_args(hooks: list[Hook], args: dict[str, Any]) -> dict[str, Any]:
    """`args` as they may be stored: every masking hook's `mask` applied, whatever its `when` or event
    (for arguments the chain did not produce: an approver's edit, what post-tool-use says ran)."""
    for hook in hooks:
        if type(hook).mask is not Hook.mask:
            args = hook.mask(args)
    return args


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
        attributes = {"gateway.hook.name": hook.name, "gateway.hook.kind": hook.kind, "gateway.hook.event": ctx.event}
        with tracing.span(f"hook {hook.name}", attributes=attributes):  # nothing when tracing is off
            result = hook.run(ctx)
            if not isinstance(result, HookResult):
                raise TypeError(f"hook returned {type(result).__name__}, not HookResult")
            tracing.annotate({"gateway.hook.decision": result.decision})
        return result
    except Exception as exc:
        metrics.hook_failed(kind=hook.kind, event=ctx.event, exc=exc, on_error=hook.on_error)
        message = f"hook {hook.name} failed: {exc}"
        if hook.on_error == "fail_open":
            logger.warning("%s (fail_open: ignored)", message)
            return HookResult(decision="none", reason=message, side_effects=[f"hook_error:{hook.name}"])
        logger.warning("%s (fail_closed: denied)", message)
        return HookResult(decision="deny", reason=message, action="abort" if ctx.event == "tool_error" else "")


# --------------------------------------------------------------------------- tool errors


@dataclasses.dataclass
class ToolErrorVerdict:
    """What the agent is told to do about a failed tool call."""

    action: str  # retry | recover | abort | raise
    delay_seconds: float
    result: Any  # the recovered result (recover), else None
    reason: str
    side_effects: list[str]


def retry_caps(hooks: list[Hook], *, ran: list[str]) -> tuple[int, float]:
    """(max_attempts, max_total_seconds) for a retry: the tightest caps of the hooks that ran
    for this error and have any (`Hook.retry_caps`), or the gateway's defaults if none did."""
    caps = [c for c in (hook.retry_caps() for hook in hooks if hook.name in ran) if c is not None]
    if not caps:
        return DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_TOTAL_SECONDS
    return min(c[0] for c in caps), float(min(c[1] for c in caps))


def tool_error_verdict(hooks: list[Hook], chain: ChainOutcome, ctx: HookContext) -> ToolErrorVerdict:
    """The tool-error answer, with the retry caps applied whatever the hooks said.

    In priority order the first hook to answer an action wins, a hook's deny
    (a `command` exiting 2) counting as `abort` where it stands; with no
    action, a rewritten result recovers with it; else the error is raised.
    """
    side_effects = list(chain.side_effects)
    action, delay, reason = chain.action, float(chain.delay_seconds or 0), chain.reason
    order = [d["hook"] for d in chain.hook_decisions]
    denial = next((i for i, d in enumerate(chain.hook_decisions) if d["decision"] == "deny"), None)
    if denial is not None and (not action or denial < order.index(chain.decided_by)):
        hook = chain.hook_decisions[denial]
        action, delay, reason = "abort", 0.0, hook["reason"] or f"aborted by {hook['hook']}"
    elif not action:
        action = "recover" if chain.result_rewritten else "raise"
        reason = "; ".join(d["reason"] for d in chain.hook_decisions if d["reason"]) or (
            "recovered by a hook" if chain.result_rewritten else "no hook asked to retry or recover"
        )
    if action == "retry":
        max_attempts, max_total = retry_caps(hooks, ran=order)
        if ctx.attempt >= max_attempts:
            action, delay = "raise", 0.0
            reason = f"gave up after {ctx.attempt} attempts (max_attempts {max_attempts})"
            side_effects.append("retry_capped:max_attempts")
        elif ctx.elapsed_seconds + delay > max_total:
            action, delay = "raise", 0.0
            reason = (
                f"gave up after {ctx.elapsed_seconds:g} s: retrying in {chain.delay_seconds:g} s "
                f"would pass max_total_seconds {max_total:g}"
            )
            side_effects.append("retry_capped:max_total_seconds")
    if action != "retry":
        delay = 0.0
    return ToolErrorVerdict(
        action=action,
        delay_seconds=delay,
        result=chain.result if action == "recover" else None,
        reason=reason,
        side_effects=side_effects,
    )
