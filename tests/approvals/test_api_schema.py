"""The OpenAPI document describes what the server really does: `schemathesis run --checks all`
against a gateway server process, authenticated with an agent key, finds nothing (a bounded
number of examples per operation, so `make test` stays fast)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from django.conf import settings

from tests.conftest import apply_config

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
CONFIG = Path(__file__).with_name("schemathesis.toml")
MAX_EXAMPLES = 25

# An agent without hooks: nothing it asks waits on a human, so `wait_seconds` never holds the run.
AGENT = """
channels: [{name: web, kind: web}]
agents: [{name: fuzzed, hooks: []}]
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def gateway_process(transactional_db):
    """The gateway as it runs in production: its own uvicorn process, on the test database."""
    db = settings.DATABASES["default"]
    login = quote(db["USER"]) + (f":{quote(db['PASSWORD'])}" if db.get("PASSWORD") else "")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": f"postgres://{login}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "GATEWAY_LOG_LEVEL": "ERROR",
    }
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "gateway.asgi:application", "--host", "127.0.0.1",
               "--port", str(port), "--log-level", "error", "--lifespan", "off"]  # fmt: skip
    server = subprocess.Popen(command, cwd=ROOT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert server.poll() is None and time.monotonic() < deadline, "the gateway process did not start"
        time.sleep(0.1)
    yield url
    server.terminate()
    server.wait(timeout=15)


def test_schemathesis_finds_no_failure(gateway_process, tmp_path):
    from approvals import services
    from approvals.models import Agent

    apply_config(AGENT)
    _, key = services.api_key_create(agent=Agent.objects.get(name="fuzzed"))
    command = [
        shutil.which("schemathesis", path=os.path.dirname(sys.executable)) or "schemathesis",
        "--config-file", str(CONFIG),
        "run", f"{gateway_process}/api/v1/schema/",
        "--checks", "all",
        "--header", f"Authorization: Bearer {key}",
        "--max-examples", str(MAX_EXAMPLES),
        "--workers", "1",
        "--request-timeout", "20",
        "--generation-database", "none",
        "--no-color",
    ]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    summary = run.stdout[-3000:]
    assert run.returncode == 0, f"schemathesis found failures:\n{run.stdout[-20000:]}\n{run.stderr[-2000:]}"
    assert "Tested: 14" in summary and " passed" in summary, summary


def test_strings_postgresql_cannot_store_are_a_400_naming_where_and_nothing_is_written(agent):
    from approvals.models import AuditEntry, ToolCall

    bad = agent.pre_tool_use("web__search", {"q": {"deep": ["ok", "nul\u0000here"]}})
    assert bad.status_code == 400
    assert bad.json()["error"]["details"] == {
        "tool_args": ["q.deep[1]: must not contain NUL (U+0000) characters or lone surrogates"]
    }
    key = agent.http.post(
        "/api/v1/hooks/session-start", content=b'{"session_id": "s", "metadata": {"\\ud800": 1}}',
        headers={"content-type": "application/json"},
    )  # fmt: skip
    assert key.status_code == 400 and "metadata" in key.json()["error"]["details"]
    assert not ToolCall.objects.exists() and not AuditEntry.objects.exists()


def test_callback_url_is_the_documented_pattern(agent):
    refused = ("ftp://files.example.com/x", "http://93.184.216.34/hook", "https://example.com:70000/", "example.com")
    for url in refused:
        response = agent.pre_tool_use("web__search", {}, callback_url=url)
        assert response.status_code == 400, url
        assert "callback_url" in response.json()["error"]["details"]
    ok = agent.pre_tool_use("web__search", {}, callback_url="https://hooks.example.com/decided?agent=1")
    assert ok.status_code == 200


def test_an_integral_number_is_an_integer_as_json_schema_counts_it(agent):
    response = agent.pre_tool_use("web__search", {}, wait_seconds=2.0)
    assert response.status_code == 200 and response.json()["decision"] == "allow"
    assert agent.pre_tool_use("web__search", {}, wait_seconds=2.5).status_code == 400


def test_an_unknown_api_path_is_a_404_in_the_error_shape(agent):
    response = agent.http.get("/api/v1/nothing/here")
    assert response.status_code == 404
    assert response.json() == {"error": {"code": "not_found", "message": "no such API path", "details": None}}
