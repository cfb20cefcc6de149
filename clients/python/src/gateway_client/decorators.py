"""`@requires_approval`: put the gateway in front of any Python function.

    client = GatewayClient(GATEWAY_URL, API_KEY, max_wait=300)

    @requires_approval(client, session_id=lambda: current_session.id)
    def purchase_pay(amount: int, vendor: str) -> dict:
        ...

    purchase_pay(80000, "acme")   # runs only if the gateway allows it

Each call asks the gateway (`pre_tool_use`) with the function's arguments,
defaults included, as `tool_args` (values that are not JSON are sent as their
`str()`), and waits for the final decision:

- allow: the function runs with the arguments the gateway answered — a hook
  may have rewritten them (rewritten values replace the originals; untouched
  ones are passed as the very objects you gave);
- deny: `ToolDenied` is raised, carrying `reason` and `confirmation_id`
  (also when the gateway is unreachable and the client fails closed, or when
  nobody decided before the client's `max_wait`);
- skip: the same idempotent call already completed; its stored `result` is
  returned without running the function.

After an allowed run the outcome is reported (`post_tool_use`, with the
result, the duration and success/error) unless `report_result=False`; a
failed report is logged, never raised. The function's own return value is
what the caller gets.

`async def` functions work with `AsyncGatewayClient` (or with a
`GatewayClient`, whose blocking wait then runs in a worker thread).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from gateway_client.client import AsyncGatewayClient, Decision, GatewayClient, GatewayClientError, ToolDenied

logger = logging.getLogger("gateway_client")

F = TypeVar("F", bound=Callable[..., Any])
Value = Any  # a value, or a zero-argument callable returning it (read at each call)


def _resolve(value: Value) -> Any:
    return value() if callable(value) else value


def _jsonable(value: Any) -> Any:
    """The value as the gateway will store it: JSON, with anything else as its `str()`."""
    return json.loads(json.dumps(value, default=str))


class _GatedCall:
    """One call of a gated function: its arguments as `tool_args`, and back again."""

    def __init__(self, signature: inspect.Signature, args: tuple, kwargs: dict[str, Any]):
        self.bound = signature.bind(*args, **kwargs)
        self.bound.apply_defaults()
        self.var_keyword = next(
            (p.name for p in signature.parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD), None
        )
        self.originals: dict[str, Any] = {}
        for name, value in self.bound.arguments.items():
            if name == self.var_keyword:
                self.originals.update(value)  # **kwargs are shown flat, as the caller wrote them
            else:
                self.originals[name] = value
        self.tool_args = _jsonable(self.originals)
        self.tool_call_id = f"call_{uuid.uuid4().hex}"

    def with_args(self, answered: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
        """`(args, kwargs)` for the function: rewritten values replace the originals."""
        extra = dict(self.bound.arguments.get(self.var_keyword) or {}) if self.var_keyword else {}
        for name in self.originals:
            if name in answered and answered[name] == self.tool_args.get(name):
                continue  # untouched: keep the caller's own object
            if name in extra:
                if name in answered:
                    extra[name] = answered[name]
                else:
                    del extra[name]  # a hook removed it
            elif name in answered:
                self.bound.arguments[name] = answered[name]
        added = set(answered) - set(self.originals)
        if added and self.var_keyword:
            extra.update({name: answered[name] for name in added})
        elif added:
            logger.warning("the gateway added arguments the function does not take: %s", sorted(added))
        if self.var_keyword:
            self.bound.arguments[self.var_keyword] = extra
        return self.bound.args, self.bound.kwargs


def requires_approval(
    client: GatewayClient | AsyncGatewayClient,
    tool_name: str | None = None,
    *,
    session_id: Value,
    user_id: Value = None,
    metadata: Value = None,
    max_wait: float | None = None,
    report_result: bool = True,
) -> Callable[[F], F]:
    """Gate a function as the tool `tool_name` (default: the function's name).

    `session_id`, `user_id` and `metadata` are values or zero-argument callables
    read at each call (e.g. from a context variable). `max_wait` overrides the
    client's deadline for these calls.
    """

    def decorate(fn: F) -> F:
        name = tool_name or fn.__name__
        signature = inspect.signature(fn)

        def ask_kwargs(call: _GatedCall) -> dict[str, Any]:
            return {
                "session_id": _resolve(session_id),
                "tool_name": name,
                "tool_args": call.tool_args,
                "tool_call_id": call.tool_call_id,
                "user_id": _resolve(user_id),
                "metadata": _resolve(metadata),
                "max_wait": max_wait,
            }

        def report_kwargs(call: _GatedCall, started: float, result: Any, outcome: str) -> dict[str, Any]:
            return {
                "session_id": _resolve(session_id),
                "tool_call_id": call.tool_call_id,
                "tool_name": name,
                "result": _jsonable(result),
                "duration_ms": int((time.monotonic() - started) * 1000),
                "outcome": outcome,
            }

        def should_report(decision: Decision) -> bool:
            return report_result and not decision.unreachable

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def gated_async(*args: Any, **kwargs: Any) -> Any:
                call = _GatedCall(signature, args, kwargs)
                if isinstance(client, AsyncGatewayClient):
                    decision = await client.pre_tool_use(**ask_kwargs(call))
                else:
                    decision = await asyncio.to_thread(client.pre_tool_use, **ask_kwargs(call))
                if decision.skipped:
                    return decision.result
                if not decision.allowed:
                    raise ToolDenied(name, decision)
                call_args, call_kwargs = call.with_args(decision.tool_args)
                started = time.monotonic()
                try:
                    result = await fn(*call_args, **call_kwargs)
                except Exception as exc:
                    if should_report(decision):
                        await _report_async(client, report_kwargs(call, started, repr(exc), "error"))
                    raise
                if should_report(decision):
                    await _report_async(client, report_kwargs(call, started, result, "success"))
                return result

            gated_async.tool_name = name  # type: ignore[attr-defined]
            return gated_async  # type: ignore[return-value]

        if isinstance(client, AsyncGatewayClient):
            raise TypeError(f"{fn.__qualname__} is not async: gate it with a GatewayClient, or make it `async def`")

        @functools.wraps(fn)
        def gated(*args: Any, **kwargs: Any) -> Any:
            call = _GatedCall(signature, args, kwargs)
            decision = client.pre_tool_use(**ask_kwargs(call))
            if decision.skipped:
                return decision.result
            if not decision.allowed:
                raise ToolDenied(name, decision)
            call_args, call_kwargs = call.with_args(decision.tool_args)
            started = time.monotonic()
            try:
                result = fn(*call_args, **call_kwargs)
            except Exception as exc:
                if should_report(decision):
                    _report(client, report_kwargs(call, started, repr(exc), "error"))
                raise
            if should_report(decision):
                _report(client, report_kwargs(call, started, result, "success"))
            return result

        gated.tool_name = name  # type: ignore[attr-defined]
        return gated  # type: ignore[return-value]

    return decorate


def _report(client: GatewayClient, kwargs: dict[str, Any]) -> None:
    try:
        client.post_tool_use(**kwargs)
    except GatewayClientError as exc:
        logger.warning("could not report %s to the gateway: %s", kwargs["tool_call_id"], exc)


async def _report_async(client: GatewayClient | AsyncGatewayClient, kwargs: dict[str, Any]) -> None:
    try:
        if isinstance(client, AsyncGatewayClient):
            await client.post_tool_use(**kwargs)
        else:
            await asyncio.to_thread(client.post_tool_use, **kwargs)
    except GatewayClientError as exc:
        logger.warning("could not report %s to the gateway: %s", kwargs["tool_call_id"], exc)
