"""The OpenAPI document describes what the server really does: `schemathesis run --checks all`
against a gateway server process finds nothing — neither in the operations alone (examples,
coverage, fuzzing) nor in the stateful phase, which follows the document's links from each
answer naming a confirmation request to the operations on it — and warns of nothing (no
operation went untested for lack of credentials or data). A bounded number of examples per
operation, so `make test` stays fast."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import httpx
import jsonschema
import pytest
from django.conf import settings
from django.contrib.auth.models import User

from tests.conftest import apply_config

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
CONFIG = Path(__file__).with_name("schemathesis.toml")
MAX_EXAMPLES = 25
ASK = "/api/v1/hooks/pre-tool-use"
WAIT_MAX_SECONDS = 0  # the server under test holds no pending answer: nothing in the run waits for a human

# `fuzzed` asks a human for every tool whose name has an even length (half of what the run generates),
# so pre-tool-use answers both `allow` and `pending` with a confirmation id the stateful phase follows;
# nobody decides, and nothing expires during the run. Staff fuzz `fuzzed-staff-target`'s hooks, not its.
AGENTS = """
channels: [{name: web, kind: web}]
agents:
  - name: fuzzed
    hooks:
      - {kind: approval_gate, channel: web, when: "size(tool) % 2 == 0", timeout_seconds: 3600}
  - name: fuzzed-staff-target
    hooks: []
"""
STAFF_USERNAME, STAFF_PASSWORD = "fuzz-staff", "fuzz-staff-password"


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
        "GATEWAY_WAIT_MAX_SECONDS": str(WAIT_MAX_SECONDS),
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


def test_schemathesis_finds_no_failure_and_follows_every_link(gateway_process, tmp_path):
    from approvals import services
    from approvals.models import Agent, ConfirmationRequest

    apply_config(AGENTS)
    _, key = services.api_key_create(agent=Agent.objects.get(name="fuzzed"))
    User.objects.create_user(STAFF_USERNAME, password=STAFF_PASSWORD, is_staff=True)
    report = tmp_path / "report.json"
    command = [
        shutil.which("schemathesis", path=os.path.dirname(sys.executable)) or "schemathesis",
        "--config-file", str(CONFIG),
        "run", f"{gateway_process}/api/v1/schema/",
        "--checks", "all",
        "--max-examples", str(MAX_EXAMPLES),
        "--workers", "1",
        "--request-timeout", "20",
        "--generation-database", "none",
        # One seed: the run is the same every time (an unlucky random one can leave the stateful phase
        # without a pending confirmation to follow, and its "missing test data" warning fails the run).
        "--seed", "20261126",
        "--report", "json", "--report-json-path", str(report),
        "--no-color",
    ]  # fmt: skip
    env = {**os.environ, "FUZZ_AGENT_KEY": key, "FUZZ_STAFF_USERNAME": STAFF_USERNAME,
           "FUZZ_STAFF_PASSWORD": STAFF_PASSWORD}  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, timeout=480, cwd=tmp_path, env=env)
    output = f"{run.stdout[-20000:]}\n{run.stderr[-2000:]}"

    assert run.returncode == 0, f"schemathesis found failures or warned:\n{output}"
    assert "Tested: 19" in run.stdout, output  # every operation, GET /api/v1/ (the version) included
    assert "✅ Stateful" in run.stdout, output
    links = re.search(r"API Links:\s+(\d+) covered / (\d+) selected", run.stdout)
    assert links and links[1] == links[2] != "0", output  # every link followed at least once
    assert ConfirmationRequest.objects.filter(kind="confirmation").exists()  # the stateful phase had requests to follow
    assert ConfirmationRequest.objects.filter(kind="question").exists()  # and questions


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


@pytest.mark.parametrize("accept", ["text/html", "application/xml", "image/png;q=1"])
def test_an_accept_header_nothing_matches_still_gets_json_never_a_406(agent, accept):
    """The document lists no 406: whatever `Accept` says, every route answers JSON (as the hot path does)."""
    confirmation_id = agent.pre_tool_use("oa__purchase_pay", {}).json()["confirmation_id"]
    answers = [
        agent.http.post("/api/v1/hooks/session-start", json={"session_id": "s"}, headers={"accept": accept}),
        agent.http.post(ASK, json={"session_id": "s", "tool_name": "x"}, headers={"accept": accept}),
        agent.http.get(f"/api/v1/confirmations/{confirmation_id}", headers={"accept": accept}),
        agent.http.get("/api/v1/confirmations/not-a-uuid", headers={"accept": accept}),
    ]

    assert [r.status_code for r in answers] == [200, 200, 200, 404]
    assert all(r.headers["content-type"] == "application/json" for r in answers)


def test_a_long_poll_without_a_timeout_holds_no_longer_than_the_maximum(agent, settings):
    """The default (25 s) is capped by GATEWAY_WAIT_MAX_SECONDS like an explicit timeout, as documented:
    found by the stateful phase, whose long-poll without `timeout` outlived the request timeout."""
    settings.GATEWAY_WAIT_MAX_SECONDS = 1  # read per request by the live gateway in this process
    confirmation_id = agent.pre_tool_use("oa__purchase_pay", {}).json()["confirmation_id"]

    started = time.monotonic()
    response = agent.http.get(f"/api/v1/confirmations/{confirmation_id}/wait", timeout=10)

    assert response.status_code == 200 and response.json()["status"] == "pending"
    assert time.monotonic() - started < 5


def test_a_question_names_a_channel_or_a_gate_not_both_as_the_document_says(agent):
    """The server refuses `channel` with `gate` (400, nothing asked); the document's QuestionInput says so
    (`not: {required: [channel, gate]}`), so a body with both is invalid by the schema too."""
    from approvals.models import ConfirmationRequest

    document = agent.http.get("/api/v1/schema/", headers={"accept": "application/json"}).json()
    question_input = document["components"]["schemas"]["QuestionInput"]
    assert question_input["not"] == {"required": ["channel", "gate"]}
    body = {"question": "Which?", "answer_schema": {"type": "string", "enum": ["a", "b"]}}
    both = {**body, "channel": "web", "gate": "finance-gate"}
    shape = {**question_input, "components": document["components"]}  # its $refs resolve in the document
    assert not jsonschema.Draft202012Validator(shape).is_valid(both)
    for one in ({**body, "channel": "web"}, {**body, "gate": "finance-gate"}, body):
        assert jsonschema.Draft202012Validator(shape).is_valid(one), one

    refused = agent.http.post("/api/v1/questions", json=both)

    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["details"] == {"gate": ["give channel or gate, not both"]}
    assert not ConfirmationRequest.objects.exists()
    for one in ({**body, "channel": "web"}, {**body, "gate": "finance-gate"}, body):
        assert agent.http.post("/api/v1/questions", json=one).status_code == 201, one
