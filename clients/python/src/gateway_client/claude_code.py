"""Claude Code hooks backed by the gateway: `python -m gateway_client.claude_code`.

A `PreToolUse` (or `PermissionRequest`) command hook. Claude Code runs it
before a tool call with the hook's JSON on stdin::

    {"session_id": "...", "hook_event_name": "PreToolUse", "tool_name": "Bash",
     "tool_input": {"command": "git push"}, "tool_use_id": "toolu_...", "cwd": "...", ...}

It asks the gateway (`POST /api/v1/hooks/pre-tool-use`: the session and
`tool_use_id` as ids, the tool input as `tool_args`), waits up to
`--max-wait` seconds for a human, and prints the hook's answer::

    {"hookSpecificOutput": {"hookEventName": "PreToolUse",
      "permissionDecision": "allow" | "deny" | "ask",
      "permissionDecisionReason": "approved by alice",
      "updatedInput": {...}}}                 # only when a hook rewrote the input

or, for `PermissionRequest` (the permission dialog's hook)::

    {"hookSpecificOutput": {"hookEventName": "PermissionRequest",
      "decision": {"behavior": "allow", "updatedInput": {...}}}}
    {"hookSpecificOutput": {"hookEventName": "PermissionRequest",
      "decision": {"behavior": "deny", "message": "rejected by bob: not on main"}}}

Still pending at `--max-wait`: deny, with a reason saying approval is pending
and to retry (`--on-pending ask` hands the call to Claude Code's own prompt
instead; `--on-pending defer`, for headless `claude -p` runs, answers
`permissionDecision: "defer"`: Claude Code stops with the call unrun, and
`claude -p --resume <session>` later asks this hook again, which then finds
the decision). The request stays pending in the gateway. The idempotency key is
derived from the session, the tool name and the canonical tool input, so when
Claude retries the same call in the same session it finds the same request,
and an approval that arrived meanwhile is honoured. The first ask's body is
kept in a small state directory so the retry (which has a new `tool_use_id`)
re-sends it verbatim, as the gateway's idempotency check requires.

Any gateway error (unreachable, a 401, a 5xx, bad input, a gateway too old for this client) exits 2 — Claude
Code's blocking error — with the reason on stderr: the call does not run.

Configuration: `GATEWAY_URL` and `GATEWAY_API_KEY` (or `--url`, `--api-key`);
`GATEWAY_USER_ID` (`--user-id`) names the person the call is made for;
`GATEWAY_CLAUDE_STATE_DIR` (`--state-dir`). `--max-wait` (default 50 s) must
stay below the hook's `timeout` in `.claude/settings.json`, because a hook
that Claude Code cancels for running too long does not block the call.
See docs/agent-client.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from gateway_client.client import (
    DEFAULT_LONG_POLL,
    Decision,
    GatewayAPIError,
    GatewayClient,
    GatewayTooOld,
    IdempotencyKeyReused,
    canonical_json,
)

PRE_TOOL_USE = "PreToolUse"
PERMISSION_REQUEST = "PermissionRequest"
EVENTS = (PRE_TOOL_USE, PERMISSION_REQUEST)
DEFAULT_MAX_WAIT = 50.0  # below Claude Code's hook timeouts (60 s before v2.1.3, 600 s since)
DEFAULT_RECONNECT_FOR = 5.0
REQUEST_TIMEOUT = 5.0  # a hung gateway can overrun --max-wait by at most this much
KEY_PREFIX = "claude-code"
STATE_MAX_AGE_SECONDS = 7 * 24 * 3600
BLOCKING_EXIT = 2  # Claude Code: exit 2 blocks the tool call and shows stderr to Claude


class UnsupportedEvent(ValueError):
    """A hook event this command does not answer (it handles PreToolUse and PermissionRequest)."""


@dataclasses.dataclass(frozen=True)
class HookInput:
    """The fields of Claude Code's hook JSON that the gateway uses."""

    event: str
    session_id: str
    tool_name: str
    tool_input: dict[str, Any]
    tool_use_id: str = ""
    cwd: str = ""

    @classmethod
    def parse(cls, data: Any) -> HookInput:
        """Read the hook JSON; `ValueError` names what is wrong, `UnsupportedEvent` for other events."""
        if not isinstance(data, dict):
            raise ValueError("the hook input must be a JSON object")
        event = data.get("hook_event_name")
        if event not in EVENTS:
            raise UnsupportedEvent(f"unsupported hook event {event!r}: this hook answers {' and '.join(EVENTS)}")
        for name in ("session_id", "tool_name"):
            if not isinstance(data.get(name), str) or not data[name]:
                raise ValueError(f"{name} must be a non-empty string")
        tool_input = data.get("tool_input", {})
        if not isinstance(tool_input, dict):
            raise ValueError("tool_input must be a JSON object")
        tool_use_id = data.get("tool_use_id") or ""
        cwd = data.get("cwd") or ""
        if not isinstance(tool_use_id, str) or not isinstance(cwd, str):
            raise ValueError("tool_use_id and cwd must be strings")
        return cls(event, data["session_id"], data["tool_name"], tool_input, tool_use_id, cwd)

    def idempotency_key(self, prefix: str = KEY_PREFIX) -> str:
        """Same session + tool + canonical input → same key → the same request in the gateway."""
        canonical = canonical_json([self.session_id, self.tool_name, self.tool_input])
        return f"{prefix}:{hashlib.sha256(canonical.encode()).hexdigest()}"

    def gateway_request(self, *, user_id: str | None = None) -> dict[str, Any]:
        """The pre-tool-use fields for this call (without the idempotency key)."""
        metadata = {"source": "claude-code", **({"cwd": self.cwd} if self.cwd else {})}
        return {
            "session_id": self.session_id,
            "tool_name": self.tool_name,
            "tool_args": self.tool_input,
            "tool_call_id": self.tool_use_id or None,
            "user_id": user_id or None,
            "metadata": metadata,
        }


def pending_reason(confirmation_id: str | None, *, url: str | None = None) -> str:
    where = f" at {url}" if url else ""
    return (
        f"Approval is still pending in the gateway (request {confirmation_id}{where}); the call was not run. "
        "Retry the same call later in this session: an approval given meanwhile will be honoured."
    )


def deferred_reason(confirmation_id: str | None, session_id: str) -> str:
    return (
        f"Approval is pending in the gateway (request {confirmation_id}); the call is deferred. "
        f"Resume the session once a human has decided: claude -p --resume {session_id}"
    )


def blocked_output(reason: str) -> dict[str, Any]:
    """Claude Code's answer that blocks whatever the event, for a hook input the gateway could not read
    (so does not know the event of): `continue: false` stops Claude after the hooks run, and
    `decision: block` blocks the call where the event has one. Never a 4xx, which Claude Code would
    take as a non-blocking error and run the call without the gateway."""
    return {"continue": False, "stopReason": reason, "decision": "block", "reason": reason}


def hook_output(
    event: str, permission: str, reason: str, updated_input: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Claude Code's answer for `event`: `permission` is allow, deny, ask or defer."""
    if event == PERMISSION_REQUEST and permission == "defer":
        permission = "deny"  # the permission dialog's hook cannot defer: fail closed
    if event == PERMISSION_REQUEST:
        if permission == "allow":
            decision: dict[str, Any] = {"behavior": "allow"}
            if updated_input is not None:
                decision["updatedInput"] = updated_input
        elif permission == "deny":
            decision = {"behavior": "deny", "message": reason}
        else:
            return {}  # no decision: Claude Code shows its own permission dialog
        return {"hookSpecificOutput": {"hookEventName": PERMISSION_REQUEST, "decision": decision}}
    output: dict[str, Any] = {
        "hookEventName": PRE_TOOL_USE,
        "permissionDecision": permission,
        "permissionDecisionReason": reason,
    }
    if updated_input is not None:
        output["updatedInput"] = updated_input
    return {"hookSpecificOutput": output}


def answer_hook(
    hook: HookInput,
    *,
    decision: str,
    reason: str,
    tool_args: dict[str, Any],
    still_pending: bool = False,
    on_pending: str = "deny",
) -> dict[str, Any]:
    """The hook JSON for the gateway's final answer (`decision`: allow, skip or deny)."""
    if still_pending:
        return hook_output(hook.event, on_pending, reason)
    if decision in ("allow", "skip"):
        # `skip` (an idempotent call that already completed) cannot replay a result here: run it.
        updated = tool_args if tool_args != hook.tool_input else None
        return hook_output(hook.event, "allow", reason or "allowed by the gateway", updated)
    return hook_output(hook.event, "deny", reason or "denied by the gateway")


class FirstAsks:
    """The body of the first ask of each call, kept so a retry re-sends it verbatim.

    The gateway answers a reused idempotency key with the same request only if
    the body is the same; a retried call has a new `tool_use_id`.
    """

    def __init__(self, directory: Path | None):
        self.directory = directory

    def first(self, key: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.directory is None:
            return body
        path = self.directory / (key.rpartition(":")[2] + ".json")
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
            try:
                with os.fdopen(fd, "w") as f:
                    json.dump(body, f)
                os.link(tmp, path)  # atomic create-if-absent: concurrent first asks agree on one body
            finally:
                os.unlink(tmp)
        except FileExistsError:
            try:
                stored = json.loads(path.read_text())
            except (OSError, ValueError):
                return body
            # Only a body of the same shape is re-sent (never one written by another version).
            return stored if isinstance(stored, dict) and stored.keys() == body.keys() else body
        except OSError:
            return body  # no state directory: a retry may make a second request, never a wrong answer
        self._prune()
        return body

    def _prune(self) -> None:
        cutoff = time.time() - STATE_MAX_AGE_SECONDS
        try:
            for entry in os.scandir(self.directory):
                if entry.name.endswith(".json") and entry.stat().st_mtime < cutoff:
                    os.unlink(entry.path)
        except OSError:
            pass


def default_state_dir() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "gateway-client" / "claude-code"


def ask(
    client: GatewayClient, hook: HookInput, *, user_id: str | None, max_wait: float, first_asks: FirstAsks
) -> Decision:
    """Ask the gateway about this call under its derived key; the final (or still-pending) decision."""
    deadline = time.monotonic() + max_wait
    key = hook.idempotency_key()
    body = hook.gateway_request(user_id=user_id)
    try:
        return client.pre_tool_use(**first_asks.first(key, body), idempotency_key=key, max_wait=max_wait)
    except IdempotencyKeyReused:
        # The key was used with another body (state lost, or another user id): ask anew for this call.
        return client.pre_tool_use(
            **body,
            idempotency_key=f"{key}:{hook.tool_use_id or os.urandom(8).hex()}",
            max_wait=max(0.0, deadline - time.monotonic()),
        )


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m gateway_client.claude_code",
        description="Claude Code PreToolUse / PermissionRequest hook: ask the approval gateway before a tool runs.",
    )
    parser.add_argument("--url", default=os.environ.get("GATEWAY_URL"), help="gateway base URL (env GATEWAY_URL)")
    parser.add_argument(
        "--api-key", default=os.environ.get("GATEWAY_API_KEY"), help="agent API key (env GATEWAY_API_KEY)"
    )
    parser.add_argument("--user-id", default=os.environ.get("GATEWAY_USER_ID"), help="who the call is made for")
    parser.add_argument(
        "--max-wait",
        type=float,
        default=DEFAULT_MAX_WAIT,
        help=f"seconds to wait for a human (default {DEFAULT_MAX_WAIT:g}); keep it below the hook's timeout",
    )
    parser.add_argument(
        "--on-pending",
        choices=["deny", "ask", "defer"],
        default="deny",
        help="answer when still pending at --max-wait: deny (default), ask (Claude Code's own prompt) or "
        "defer (headless claude -p: stop now, resume later with --resume)",
    )
    parser.add_argument(
        "--reconnect-for",
        type=float,
        default=DEFAULT_RECONNECT_FOR,
        help=f"seconds to retry an unreachable gateway before failing (default {DEFAULT_RECONNECT_FOR:g})",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=Path(os.environ["GATEWAY_CLAUDE_STATE_DIR"]) if os.environ.get("GATEWAY_CLAUDE_STATE_DIR") else None,
        help="where first asks are kept for retries (env GATEWAY_CLAUDE_STATE_DIR; "
        "default ~/.cache/gateway-client/claude-code)",
    )
    return parser.parse_args(argv)


def main(
    argv: list[str] | None = None,
    *,
    stdin: IO[str] | None = None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
) -> int:
    """Run the hook once; returns the exit status (0 answered, 2 blocking error, 1 not our event)."""
    stdin, stdout, stderr = stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr
    args = _arguments(argv)

    def block(reason: str) -> int:
        print(f"approval gateway: {reason}", file=stderr)
        return BLOCKING_EXIT

    try:
        hook = HookInput.parse(json.load(stdin))
    except UnsupportedEvent as exc:
        print(f"approval gateway: {exc}", file=stderr)
        return 1  # a non-blocking error: this hook is configured for an event it does not gate
    except ValueError as exc:
        return block(f"cannot read the hook input: {exc}")
    if not args.url or not args.api_key:
        return block("GATEWAY_URL and GATEWAY_API_KEY (or --url and --api-key) must be set")

    client = GatewayClient(
        args.url,
        args.api_key,
        timeout=REQUEST_TIMEOUT,
        max_wait=args.max_wait,
        reconnect_for=args.reconnect_for,
        long_poll=min(DEFAULT_LONG_POLL, max(args.max_wait, 1)),
    )
    with client:
        try:
            decision = ask(
                client,
                hook,
                user_id=args.user_id,
                max_wait=args.max_wait,
                first_asks=FirstAsks(args.state_dir or default_state_dir()),
            )
        except GatewayAPIError as exc:
            return block(f"the gateway refused the request: {exc}")
        except GatewayTooOld as exc:
            return block(str(exc))
    if decision.unreachable:
        return block(decision.reason)
    reason = decision.reason
    if decision.still_pending:
        reason = (
            deferred_reason(decision.confirmation_id, hook.session_id)
            if args.on_pending == "defer" and hook.event == PRE_TOOL_USE
            else pending_reason(decision.confirmation_id)
        )
    output = answer_hook(
        hook,
        decision=decision.decision,
        reason=reason,
        tool_args=decision.tool_args,
        still_pending=decision.still_pending,
        on_pending=args.on_pending,
    )
    print(json.dumps(output), file=stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
