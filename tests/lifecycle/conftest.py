"""Fixtures for the lifecycle tests: an agent configured from YAML talking to the live
gateway, a real command hook that records what it is sent, and a tiny real HTTP tool."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.conftest import AgentClient, apply_config, make_agent_client

HERE = Path(__file__).parent
HOOK_SCRIPT = str(HERE / "hook_script.py")
MCP_SERVER = str(HERE / "mcp_server.py")


def command(*argv: str) -> str:
    """A YAML flow list for a `command` key: this Python running `argv`."""
    return json.dumps([sys.executable, *argv])


class Recorder:
    """The file a `hook_script.py` command hook appends each event it gets to."""

    def __init__(self, path: Path):
        self.path = path

    def hook(self, *options: str) -> str:
        return command(HOOK_SCRIPT, str(self.path), *options)

    def events(self) -> list[dict]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines()]


@pytest.fixture
def recorders(tmp_path):
    """recorders("a") -> a Recorder writing to its own file under tmp_path."""
    return lambda name: Recorder(tmp_path / f"{name}.jsonl")


class LifecycleAgent(AgentClient):
    """An agent posting lifecycle events to the live gateway."""

    def event(self, slug: str, session_id: str = "s-1", **body):
        return self.http.post(f"/api/v1/hooks/{slug}", json={"session_id": session_id, **body})


@pytest.fixture
def configure(live_gateway, transactional_db):
    """configure(yaml) applies the config and returns a client for its first agent."""

    def make(config: str, agent: str = "bot") -> LifecycleAgent:
        apply_config(config)
        client = make_agent_client(live_gateway, agent)
        return LifecycleAgent(live_gateway.url, client.key, client.agent)

    return make


def agent_config(hooks_yaml: str, name: str = "bot") -> str:
    """A config with one agent and the given hook list (a YAML block indented by 6)."""
    return f"channels: [{{name: web, kind: web}}]\nagents:\n  - name: {name}\n    hooks:\n{hooks_yaml}"


class ToolServer:
    """A tiny real HTTP endpoint serving a tool's result; records every request it gets."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.status = 200
        self.body = "{}"
        self.content_type = "application/json"
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                server.requests.append(
                    {
                        "method": self.command,
                        "path": parts.path,
                        "query": {k: v[0] for k, v in parse_qs(parts.query).items()},
                        "json": json.loads(raw) if raw else None,
                        "headers": dict(self.headers),
                    }
                )
                body = server.body.encode()
                self.send_response(server.status)
                self.send_header("Content-Type", server.content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, body, status: int = 200) -> None:
        self.body = body if isinstance(body, str) else json.dumps(body)
        self.status = status

    def stop(self) -> None:
        if self.thread.is_alive():
            self.httpd.shutdown()
            self.httpd.server_close()


@pytest.fixture
def tool_server():
    server = ToolServer()
    yield server
    server.stop()
