"""`ToolGate`: one tool call through the gateway, for any agent framework.

The MCP proxy and the OpenAI Agents SDK and LangChain adapters all do the same
thing around a tool call; this module does it once::

    gate = ToolGate(client, session_id="s-1")
    result = await gate.acall(
        tool_name="pay_invoice", tool_args={"invoice_id": "INV-7", "amount": 120},
        tool_call_id="call_1", run=run_the_tool,
    )

1. **Ask** (`pre_tool_use`), waiting for a human up to `max_wait`. Deny, reject,
   still pending at the deadline, or an unreachable gateway: the tool is not
   run; `result.status == "refused"` and `result.message` says why, for the
   model (`pay_invoice was not run: rejected by bob: over budget`).
2. **Run** the tool with the arguments the gateway answered (a hook may have
   rewritten them).
3. **Report**: a success goes to post-tool-use, whose (possibly rewritten or
   truncated) result is what the model should see; a failure — an exception,
   or a value `failure(value)` calls an error — goes to tool-error, whose
   action is followed: `retry` (wait, run again), `recover` (use its result),
   `abort`, or `raise` (the framework's own error handling).

Fail closed, throughout: a gateway that cannot be reached at step 1 means the
tool does not run; at step 3 (after a success) it means the result is withheld
from the model — post-tool-use hooks may mask what the model must not see.

A call left pending at the deadline is remembered: the next identical call
(same session, tool and arguments) re-asks under the same idempotency key and
tool call id, so it picks up a decision given meanwhile instead of posting a
second card. Once that call has an answer, an identical call after it is a new
request again.

See docs/integrations/README.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Literal

from gateway_client.client import (
    AsyncGatewayClient,
    Decision,
    GatewayAPIError,
    GatewayClient,
    GatewayClientError,
    GatewayTooOld,
    canonical_json,
)

logger = logging.getLogger("gateway_client")

CANCEL_TIMEOUT = 5.0  # seconds a withdrawal may take when the caller is cancelled
MAX_LEFT_PENDING = 1000  # calls left pending that a retry can still pick up, per gate

Status = Literal["ran", "replaced", "refused", "withheld", "aborted", "failed"]


@dataclasses.dataclass(frozen=True)
class GateResult:
    """How a gated call ended, and what the model should get.

    - `ran`: the tool ran and the gateway kept its result: give the model `value`.
    - `replaced`: give the model `result` instead (post-tool-use rewrote or cut it,
      tool-error recovered, or the idempotent call had already completed — `skip`).
    - `refused`: the tool did not run; `message` says why.
    - `withheld`: the tool ran, but the gateway could not review its result; `message`.
    - `aborted`: the tool failed and the gateway said to stop (`abort`); `message`.
    - `failed`: the tool failed and the gateway said `raise` (or could not be told):
      the framework's own error handling applies to `exception` or to the error `value`.
    """

    status: Status
    decision: Decision
    value: Any = None
    result: Any = None
    message: str = ""
    exception: BaseException | None = None
    attempts: int = 0

    @property
    def ran(self) -> bool:
        """The tool was run at least once."""
        return self.attempts > 0


class ToolRunAborted(GatewayClientError):
    """The tool failed and the gateway answered tool-error with `abort`: stop the run.

    Raised by the framework adapters; carries the `GateResult`.
    """

    def __init__(self, message: str, result: GateResult):
        super().__init__(message)
        self.result = result


def result_text(result: Any) -> str:
    """A result as the model reads it: a string as is, anything else as JSON (as the gateway cuts it)."""
    if isinstance(result, str):
        return result
    return json.dumps(result, ensure_ascii=False, default=str)


def jsonable(value: Any) -> Any:
    """`value` as JSON the gateway accepts: anything that is not JSON becomes its `str()`."""
    return json.loads(json.dumps(value, default=str))


# --------------------------------------------------------------------------- the flow as data

# Like the client, the flow is written once as a generator that yields what it
# needs done and receives the outcome; the sync and async drivers perform it.


@dataclasses.dataclass(frozen=True)
class _Ask:
    kwargs: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class _Lookup:
    confirmation_id: str


@dataclasses.dataclass(frozen=True)
class _Run:
    tool_args: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class _Report:
    method: Literal["post_tool_use", "tool_error"]
    kwargs: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class _Sleep:
    seconds: float


_Flow = Generator[Any, Any, GateResult]


@dataclasses.dataclass
class _Call:
    """One gated call, as the drivers see it."""

    tool_name: str
    tool_args: dict[str, Any]
    tool_call_id: str
    session_id: str
    user_id: str | None
    metadata: dict[str, Any] | None
    max_wait: float | None
    report: Callable[[Any], Any]
    failure: Callable[[Any], str | None]
    on_pending: Callable[[dict[str, Any]], None] | None
    confirmation_id: str | None = None  # known once the gateway answered pending


class ToolGate:
    """Gates tool calls through the gateway (see the module docstring).

    client: a `GatewayClient` (for `call`) or `AsyncGatewayClient` (for `acall`;
        `acall` also takes a `GatewayClient`, whose blocking calls then run in a thread).
    session_id: the default session of the calls (default: one new id per gate).
    user_id, metadata: sent with every ask (metadata is merged under each call's own).
    max_wait: seconds to wait for a human (default: the client's `max_wait`).
    key_prefix: the prefix of the idempotency keys this gate makes.
    """

    def __init__(
        self,
        client: GatewayClient | AsyncGatewayClient,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        max_wait: float | None = None,
        key_prefix: str = "gate",
    ):
        self.client = client
        self.session_id = session_id or f"{key_prefix}-{uuid.uuid4().hex[:16]}"
        self.user_id = user_id
        self.metadata = dict(metadata or {})
        self.max_wait = max_wait
        self.key_prefix = key_prefix
        self._left_pending: dict[str, tuple[str, str]] = {}  # call fingerprint -> (idempotency key, tool call id)
        self._lock = threading.Lock()

    # -- the flow ---------------------------------------------------------------

    def _fingerprint(self, call: _Call) -> str:
        canonical = canonical_json([call.session_id, call.tool_name, call.tool_args])
        return hashlib.sha256(canonical.encode()).hexdigest()

    def _flow(self, call: _Call) -> _Flow:
        fingerprint = self._fingerprint(call)
        with self._lock:
            key, first_call_id = self._left_pending.pop(fingerprint, (None, None))
        # A call left pending is asked again as it was first asked: same key, same call id.
        key = key or f"{self.key_prefix}:{fingerprint[:32]}:{uuid.uuid4().hex[:12]}"
        call_id = first_call_id or call.tool_call_id
        ask = _Ask(
            {
                "session_id": call.session_id,
                "tool_name": call.tool_name,
                "tool_args": call.tool_args,
                "tool_call_id": call_id,
                "user_id": call.user_id,
                "metadata": call.metadata,
                "idempotency_key": key,
                "max_wait": call.max_wait,
            }
        )
        try:
            decision: Decision = yield ask
        except (GatewayAPIError, GatewayTooOld) as exc:
            # A 4xx (a bad key, bad input) or a gateway too old for this client is a bug to fix, but the
            # call must not run meanwhile.
            refused = Decision("deny", call.tool_args, reason=f"the approval gateway refused the request: {exc}")
            return GateResult("refused", refused, message=refused_message(call.tool_name, refused))
        if decision.still_pending:
            with self._lock:
                self._left_pending[fingerprint] = (key, call_id)
                while len(self._left_pending) > MAX_LEFT_PENDING:  # forget the oldest
                    del self._left_pending[next(iter(self._left_pending))]
            url = None
            if decision.confirmation_id:
                try:
                    url = (yield _Lookup(decision.confirmation_id)).get("url")
                except GatewayClientError:
                    url = None
            return GateResult("refused", decision, message=pending_message(call.tool_name, decision, url))
        if decision.skipped:
            return GateResult("replaced", decision, result=decision.result)
        if not decision.allowed:
            return GateResult("refused", decision, message=refused_message(call.tool_name, decision))

        tool_args = decision.tool_args
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            began = time.monotonic()
            outcome, value = yield _Run(tool_args)
            exception = value if outcome == "raised" else None
            if exception is not None:
                value = None
                error = f"{type(exception).__name__}: {exception}".rstrip(": ")
            else:
                error = call.failure(value)
            if error is None:
                reported = jsonable(call.report(value))
                try:
                    answer = yield _Report(
                        "post_tool_use",
                        {
                            "session_id": call.session_id,
                            "tool_call_id": call_id,
                            "tool_name": call.tool_name,
                            # what ran (an approver may have edited the arguments): the audit's third record
                            "tool_args": jsonable(dict(tool_args)),
                            "result": reported,
                            "duration_ms": int((time.monotonic() - began) * 1000),
                        },
                    )
                except GatewayClientError as exc:
                    return GateResult(
                        "withheld",
                        decision,
                        value=value,
                        message=withheld_message(call.tool_name, exc),
                        attempts=attempt,
                    )
                result = answer.get("result") if isinstance(answer, dict) else reported
                if result == reported:
                    return GateResult("ran", decision, value=value, attempts=attempt)
                return GateResult("replaced", decision, value=value, result=result, attempts=attempt)

            try:
                answer = yield _Report(
                    "tool_error",
                    {
                        "session_id": call.session_id,
                        "tool_call_id": call_id,
                        "error": error[:10000],
                        "attempt": attempt,
                        "elapsed_seconds": round(time.monotonic() - started, 3),
                        "tool_name": call.tool_name,
                    },
                )
            except GatewayClientError as exc:
                logger.warning("could not report the failure of %s to the gateway: %s", call.tool_name, exc)
                return GateResult("failed", decision, value=value, exception=exception, attempts=attempt)
            action = answer.get("action")
            if action == "retry":
                yield _Sleep(float(answer.get("delay_seconds") or 0))
                continue
            if action == "recover":
                return GateResult("replaced", decision, value=value, result=answer.get("result"), attempts=attempt)
            if action == "abort":
                reason = answer.get("reason") or "the gateway stopped it"
                message = f"{call.tool_name} failed and the gateway stopped the run: {reason}"
                return GateResult(
                    "aborted", decision, value=value, message=message, exception=exception, attempts=attempt
                )
            return GateResult("failed", decision, value=value, exception=exception, attempts=attempt)

    def _call(
        self,
        tool_name: str,
        tool_args: dict[str, Any],
        tool_call_id: str | None,
        session_id: str | None,
        metadata: dict[str, Any] | None,
        user_id: str | None,
        max_wait: float | None,
        report: Callable[[Any], Any] | None,
        failure: Callable[[Any], str | None] | None,
        on_pending: Callable[[dict[str, Any]], None] | None,
    ) -> _Call:
        merged = {**self.metadata, **(metadata or {})}
        return _Call(
            tool_name=tool_name,
            tool_args=jsonable(dict(tool_args)),
            tool_call_id=tool_call_id or f"call_{uuid.uuid4().hex}",
            session_id=session_id or self.session_id,
            user_id=user_id or self.user_id,
            metadata=merged or None,
            max_wait=max_wait if max_wait is not None else self.max_wait,
            report=report or (lambda value: value),
            failure=failure or (lambda value: None),
            on_pending=on_pending,
        )

    # -- the drivers --------------------------------------------------------------

    def call(
        self,
        *,
        tool_name: str,
        tool_args: dict[str, Any],
        run: Callable[[dict[str, Any]], Any],
        tool_call_id: str | None = None,
        session_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        user_id: str | None = None,
        max_wait: float | None = None,
        report: Callable[[Any], Any] | None = None,
        failure: Callable[[Any], str | None] | None = None,
        on_pending: Callable[[dict[str, Any]], None] | None = None,
    ) -> GateResult:
        """Gate one call with a blocking `GatewayClient`; `run(tool_args)` runs the tool.

        report(value): the JSON the gateway gets as the result (default: the value).
        failure(value): an error message when a returned value means the tool failed.
        """
        if not isinstance(self.client, GatewayClient):
            raise TypeError("ToolGate.call needs a GatewayClient; use acall with an AsyncGatewayClient")
        client = self.client
        call = self._call(
            tool_name, tool_args, tool_call_id, session_id, metadata, user_id, max_wait, report, failure, on_pending
        )
        flow = self._flow(call)
        effect = next(flow)
        try:
            while True:
                if isinstance(effect, _Run):
                    try:
                        outcome: Any = ("returned", run(effect.tool_args))
                    except Exception as exc:
                        outcome = ("raised", exc)
                    effect = flow.send(outcome)
                    continue
                try:
                    if isinstance(effect, _Ask):
                        answer: Any = client.pre_tool_use(**effect.kwargs, on_pending=_remember(call))
                    elif isinstance(effect, _Lookup):
                        answer = client.get_confirmation(effect.confirmation_id)
                    elif isinstance(effect, _Report):
                        answer = getattr(client, effect.method)(**effect.kwargs)
                    else:
                        time.sleep(effect.seconds)
                        answer = None
                except GatewayClientError as exc:
                    effect = flow.throw(exc)
                else:
                    effect = flow.send(answer)
        except StopIteration as done:
            return done.value

    async def acall(
        self,
        *,
        tool_name: str,
        tool_args: dict[str, Any],
        run: Callable[[dict[str, Any]], Awaitable[Any]],
        tool_call_id: str | None = None,
        session_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        user_id: str | None = None,
        max_wait: float | None = None,
        report: Callable[[Any], Any] | None = None,
        failure: Callable[[Any], str | None] | None = None,
        on_pending: Callable[[dict[str, Any]], None] | None = None,
    ) -> GateResult:
        """Gate one call; `await run(tool_args)` runs the tool. See `call`.

        If the caller is cancelled while a human is being asked, the request is
        withdrawn (`cancel`) before the cancellation goes on.
        """
        call = self._call(
            tool_name, tool_args, tool_call_id, session_id, metadata, user_id, max_wait, report, failure, on_pending
        )
        flow = self._flow(call)
        effect = next(flow)
        try:
            while True:
                if isinstance(effect, _Run):
                    try:
                        outcome: Any = ("returned", await run(effect.tool_args))
                    except Exception as exc:
                        outcome = ("raised", exc)
                    effect = flow.send(outcome)
                    continue
                try:
                    if isinstance(effect, _Ask):
                        answer: Any = await self._aask(call, effect.kwargs)
                    elif isinstance(effect, _Lookup):
                        answer = await self._aperform("get_confirmation", effect.confirmation_id)
                    elif isinstance(effect, _Report):
                        answer = await self._aperform(effect.method, **effect.kwargs)
                    else:
                        await asyncio.sleep(effect.seconds)
                        answer = None
                except GatewayClientError as exc:
                    effect = flow.throw(exc)
                else:
                    effect = flow.send(answer)
        except StopIteration as done:
            return done.value

    async def _aperform(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if isinstance(self.client, AsyncGatewayClient):
            return await getattr(self.client, method)(*args, **kwargs)
        return await asyncio.to_thread(getattr(self.client, method), *args, **kwargs)

    async def _aask(self, call: _Call, kwargs: dict[str, Any]) -> Decision:
        # The ask runs as a task of its own, so a cancellation of the caller cannot cut it off
        # between the gateway creating the request and the answer that names it.
        loop = asyncio.get_running_loop()
        known = asyncio.Event()  # the request is named, or the ask ended
        threaded = not isinstance(self.client, AsyncGatewayClient)
        on_pending = _remember(call, known, loop if threaded else None)
        ask = asyncio.ensure_future(self._aperform("pre_tool_use", **kwargs, on_pending=on_pending))
        ask.add_done_callback(lambda task: (known.set(), task.cancelled() or task.exception()))
        try:
            return await asyncio.shield(ask)
        except GatewayClientError:
            raise
        except BaseException:
            # Cancelled (the MCP client cancelled the request, the run was stopped…) while a human
            # is being asked: withdraw the request, so nobody approves a call that is gone.
            await self._withdraw(call, known, ask)
            raise

    async def _withdraw(self, call: _Call, known: asyncio.Event, ask: asyncio.Future[Any]) -> None:
        import anyio

        with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_TIMEOUT):
            await known.wait()
            ask.cancel()  # stop waiting for the decision
            if call.confirmation_id is None:
                return
            try:
                await self._aperform("cancel", call.confirmation_id)
            except GatewayClientError as exc:  # e.g. decided just before: AlreadyDecided
                logger.info("could not withdraw confirmation %s: %s", call.confirmation_id, exc)


def _remember(
    call: _Call, known: threading.Event | asyncio.Event | None = None, loop: asyncio.AbstractEventLoop | None = None
) -> Callable[[dict[str, Any]], None]:
    """The `on_pending` of one ask: note the request's id (on `loop`, when the ask runs in a thread)."""

    def note(answer: dict[str, Any]) -> None:
        call.confirmation_id = answer.get("confirmation_id")
        if known is not None:
            known.set()
        if call.on_pending is not None:
            call.on_pending(answer)

    def on_pending(answer: dict[str, Any]) -> None:
        if loop is None:
            note(answer)
        else:
            loop.call_soon_threadsafe(note, answer)

    return on_pending


# --------------------------------------------------------------------------- what the model reads


def refused_message(tool_name: str, decision: Decision) -> str:
    """Deny, reject or an unreachable gateway: `pay_invoice was not run: rejected by bob: over budget`."""
    return f"{tool_name} was not run: {decision.reason or 'denied by the approval gateway'}"


def pending_message(tool_name: str, decision: Decision, url: str | None = None) -> str:
    where = f" at {url}" if url else ""
    return (
        f"{tool_name} was not run: approval is still pending in the gateway "
        f"(request {decision.confirmation_id}{where}). Call {tool_name} again later with the same "
        "arguments: an approval given meanwhile will be honoured."
    )


def withheld_message(tool_name: str, exc: BaseException) -> str:
    return (
        f"{tool_name} ran, but its result is withheld: the approval gateway could not review it ({exc}). "
        "Do not assume it failed."
    )
