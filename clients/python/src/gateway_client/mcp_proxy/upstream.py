"""The upstream server run as a command (`-- UPSTREAM_COMMAND [ARGS…]`): its process, and its JSON-RPC
lines on its stdin and stdout, relayed without the MCP SDK's stdio client (`stdio_upstream`).

The SDK's `stdio_client` bridges the pipes to the session through a reader task and a writer task and a
memory stream each way: every message, both ways, is handed from one task to another (and through
anyio's stream wrappers) on its way. Here a message to the upstream is written to its stdin by the task
that relays it, and its stdout is read and parsed by the task that relays the answers (the proxy's pump):
one wake-up per message, no hand-over. What the SDK did besides is done the same way: the upstream
starts in a session of its own (its process group), with the proxy's stderr; stopping it closes its
stdin, waits `STOP_GRACE` seconds, then terminates its process group (SIGTERM, SIGKILL after
`KILL_AFTER`). On Windows the SDK's stdio client is used as it is (`command.upstream_streams`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from mcp.shared.message import SessionMessage
from mcp_types import jsonrpc_message_adapter
from pydantic import ValidationError

logger = logging.getLogger("gateway_client.mcp_proxy")

STOP_GRACE = 2.0  # seconds the upstream has to exit once its stdin is closed (the SDK's own)
KILL_AFTER = 2.0  # seconds after SIGTERM before SIGKILL
READ_SIZE = 65536
WRITE_HIGH_WATER = 1 << 20  # bytes queued to the upstream's stdin before a sender waits for it to read


class StdioUpstream:
    """The upstream's process and its two pipes: `send` (the SDK's write stream's one method used) writes a
    message to its stdin; iterating yields what it writes on stdout, a `SessionMessage` a line (or the
    `ValidationError` of a line that is not JSON-RPC, as the SDK's reader does), until it closes stdout."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self._stdin = process.stdin
        self._stdout = process.stdout
        self._broken = False  # its stdin cannot be written any more

    @classmethod
    async def start(cls, command: Sequence[str], env: Mapping[str, str]) -> StdioUpstream:
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=_stderr_fd(),
            env=dict(env),
            start_new_session=True,  # its own process group: stopped with everything it started
        )
        transport = process.stdin.transport if process.stdin is not None else None
        if transport is not None:
            transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        return cls(process)

    # -- to the upstream

    async def send(self, item: SessionMessage) -> None:
        if self._broken:
            return
        data = item.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"
        try:
            self._stdin.write(data)
            if self._stdin.transport.get_write_buffer_size() > WRITE_HIGH_WATER:
                await self._stdin.drain()
        except (ConnectionError, RuntimeError, OSError) as exc:
            # The upstream is gone (or going): what it wrote is still read; its exit ends the relay.
            logger.warning("could not write to the upstream server: %s", exc)
            self._broken = True
            self._stdout.feed_eof()

    # -- from the upstream

    def __aiter__(self) -> AsyncIterator[SessionMessage | Exception]:
        return self._messages()

    async def _messages(self) -> AsyncIterator[SessionMessage | Exception]:
        pending = bytearray()  # a line read in part
        while True:
            try:
                chunk = await self._stdout.read(READ_SIZE)
            except (ConnectionError, OSError):
                chunk = b""
            if not chunk:
                break
            start = 0
            while (end := chunk.find(b"\n", start)) >= 0:
                if pending:
                    pending += chunk[start:end]
                    line = bytes(pending)
                    pending.clear()
                else:
                    line = chunk[start:end]
                start = end + 1
                if line.strip():
                    yield _parse(line)
            pending += chunk[start:]
        if pending.strip():  # a last line without its newline
            yield _parse(bytes(pending))

    # -- its end

    async def stop(self) -> None:
        """Close its stdin; after `STOP_GRACE` seconds terminate its process group, after `KILL_AFTER`
        more kill it. Bounded, and shielded by the caller."""
        process = self.process
        with contextlib.suppress(Exception):
            self._stdin.close()
        if not await _exited(process, STOP_GRACE):
            _signal_group(process, signal.SIGTERM)
            if not await _exited(process, KILL_AFTER):
                _signal_group(process, signal.SIGKILL)
                if not await _exited(process, KILL_AFTER):
                    logger.warning("the upstream server (pid %d) is still alive after SIGKILL", process.pid)
        transport = getattr(process, "_transport", None)  # pipes a surviving child may still hold
        if transport is not None:
            with contextlib.suppress(Exception):
                transport.close()


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValidationError as exc:
        return exc


def _stderr_fd() -> Any:
    """The proxy's own stderr for the upstream's (the SDK's `errlog=sys.stderr`)."""
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return None


async def _exited(process: asyncio.subprocess.Process, timeout: float) -> bool:
    """Whether it exits within `timeout` seconds: its return code polled, not `wait()`, which also waits for
    its pipes to close (a child that inherited them would make an exited upstream look hung)."""
    deadline = time.monotonic() + timeout
    while process.returncode is None:
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def _signal_group(process: asyncio.subprocess.Process, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)  # its session's group: its pid
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signum)  # if it left the group


@contextlib.asynccontextmanager
async def stdio_upstream(command: Sequence[str], env: Mapping[str, str]) -> AsyncIterator[tuple[Any, Any]]:
    """The upstream started: (read, write) as the SDK's stdio client gives them; stopped on the way out,
    even when the caller is cancelled."""
    import anyio

    upstream = await StdioUpstream.start(command, env)
    try:
        yield upstream, upstream
    finally:
        with anyio.CancelScope(shield=True):
            await upstream.stop()
