"""The MCP proxy's stdio wire to its client (`ClientStdio`): lines of any size, written any way, relayed
as they were sent with their ids, in order; answers the client's pipe cannot take at once finished in
order; a terminal or a file read and written too. The real proxy, run as a subprocess in front of the naive
echo upstream (`echo_mcp_server.py`), or `ClientStdio` alone in a subprocess on real pipes and files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integrations.conftest import WAIT
from tests.integrations.test_mcp_proxy_gate import key, logged, started  # noqa: F401 (fixtures)
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

BIG = "€" * 100_000  # 300 KB of 3-byte characters: read in many chunks, some ending inside a character


def received_after_handshake(log: Path) -> list[dict[str, Any]]:
    received = [json.loads(e["received"]) for e in logged(log) if "received" in e]
    return received[2:]  # initialize, notifications/initialized


def test_relayed_messages_reach_the_upstream_as_sent_and_answers_come_back_with_their_ids(started):
    proxy, log = started()
    proxy.handshake()
    messages = [
        {"jsonrpc": "2.0", "id": "p-1", "method": "ping"},
        {"jsonrpc": "2.0", "id": 2**53 + 1, "method": "ping", "params": {"_meta": {"note": "é ✓ \u2028 \"q\""}}},
        {"jsonrpc": "2.0", "id": 3, "method": f"tools/{BIG}"},  # unknown upstream: its JSON-RPC error, 300 KB
        {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/list"},
    ]
    wire = "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in messages).encode()
    # All in one write but the last line, whose two halves come separately.
    proxy.process.stdin.buffer.write(wire[:-20])
    proxy.process.stdin.flush()
    wait_until(lambda: len(received_after_handshake(log)) == 4, WAIT, "the first four messages upstream")
    proxy.process.stdin.buffer.write(wire[-20:])
    proxy.process.stdin.flush()
    answers = [proxy.answer() for _ in range(4)]

    assert received_after_handshake(log) == messages  # the upstream got what was sent, ids and all
    assert [a["id"] for a in answers] == ["p-1", 2**53 + 1, 3, 4]  # in the upstream's order, ids as sent
    assert answers[:2] == [
        {"jsonrpc": "2.0", "id": "p-1", "result": {}},
        {"jsonrpc": "2.0", "id": 2**53 + 1, "result": {}},
    ]
    not_found = {"code": -32601, "message": f"method not found: tools/{BIG}"}
    assert answers[2] == {"jsonrpc": "2.0", "id": 3, "error": not_found}  # the upstream's error, as it was
    assert [t["name"] for t in answers[3]["result"]["tools"]] == ["pay_invoice", "delete_customer"]


def test_answers_larger_than_the_clients_pipe_arrive_whole_and_in_order(started):
    """Many large answers at once fill the client's pipe: each is finished before the next begins."""
    proxy, log = started()
    proxy.handshake()
    wire = "".join(
        json.dumps({"jsonrpc": "2.0", "id": n, "method": f"tools/{n}-{BIG}"}) + "\n" for n in range(12)
    )  # fmt: skip
    proxy.process.stdin.write(wire)
    proxy.process.stdin.flush()
    answers = [proxy.answer() for _ in range(12)]

    assert [a["id"] for a in answers] == list(range(12))
    assert all(a["error"]["message"] == f"method not found: tools/{a['id']}-{BIG}" for a in answers)


# --------------------------------------------------------------------------- ClientStdio on its own

ECHO_LINES = """
import anyio
from gateway_client.mcp_proxy import ClientStdio

async def main():
    async with ClientStdio().open() as client:
        async for line in client.lines():
            print("a stray print goes to stderr, never to the client")
            await client.send({"line": line})

anyio.run(main)
"""
LINES = ['{"a": 1}\n', f'{{"big": "{BIG}"}}\n', "\n", "not json\r\n", '{"last": "without a newline"}']


@pytest.mark.parametrize("wire", ["pipes", "files"])
def test_client_stdio_reads_every_line_as_written_and_answers_each_in_order(wire: str, tmp_path: Path):
    """Pipes: read and written in the event loop. Files (or a terminal): a reader thread, a writer thread.
    A stray print, still buffered when the wire is given back to fd 1, goes to stderr too."""
    data = "".join(LINES).encode()
    command = [sys.executable, "-c", ECHO_LINES]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # as an MCP client starts it
    if wire == "pipes":
        done = subprocess.run(command, input=data, capture_output=True, timeout=WAIT, env=env)
        out = done.stdout
    else:
        (tmp_path / "in").write_bytes(data)
        with open(tmp_path / "in", "rb") as stdin, open(tmp_path / "out", "wb") as stdout:
            done = subprocess.run(command, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, timeout=WAIT, env=env)
        out = (tmp_path / "out").read_bytes()

    assert done.returncode == 0, done.stderr
    assert [json.loads(line) for line in out.decode().splitlines()] == [{"line": line} for line in LINES]
    assert done.stderr.decode().count("a stray print goes to stderr") == len(LINES)
