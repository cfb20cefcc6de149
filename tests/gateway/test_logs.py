"""Structured logs: `GATEWAY_LOG_FORMAT=json` writes one JSON object per line, and every line says which
request, agent, session, tool and confirmation it is about where that is known."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway_utils import logs
from tests.conftest import apply_config, decide, make_agent_client

ROOT = Path(__file__).resolve().parents[2]

CONFIG = """
channels:
  - {name: logs-web, kind: web}
agents:
  - name: logs-bot
    hooks:
      - kind: command
        name: slow
        event: pre_tool_use
        tools: ["slow__*"]
        command: ["sleep", "5"]
        timeout_ms: 100
      - kind: approval_gate
        name: gate
        tools: ["pay__*"]
        channel: logs-web
        timeout_seconds: 1800
"""


@pytest.fixture
def json_lines():
    """The gateway's loggers also write, for this test, through the JSON formatter settings use."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.json_formatter())
    handler.addFilter(logs.ContextFilter())
    loggers = [
        logging.getLogger(name)
        for name in ("approvals", "hooks", "gateway", "channels_ext")
    ]
    for logger in loggers:
        logger.addHandler(handler)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    for logger in loggers:
        logger.removeHandler(handler)


@pytest.mark.django_db(transaction=True)
def test_each_line_names_the_request_agent_session_tool_and_confirmation(
    live_gateway, json_lines
):
    apply_config(CONFIG)
    agent = make_agent_client(live_gateway, "logs-bot")

    denied = agent.http.post(
        "/api/v1/hooks/pre-tool-use",
        json={
            "session_id": "s-logs",
            "tool_name": "slow__call",
            "tool_args": {},
            "tool_call_id": "call-7",
        },
        headers={"X-Request-ID": "req-logs-1"},
    )
    assert denied.json()["decision"] == "deny"
    asked = agent.http.post(
        "/api/v1/hooks/pre-tool-use",
        json={
            "session_id": "s-logs",
            "tool_name": "pay__invoice",
            "tool_args": {"amount": 3},
        },
        headers={"X-Request-ID": "bad id with spaces"},
    )
    confirmation_id = asked.json()["confirmation_id"]
    decide(confirmation_id, "approve", channel="logs-web")

    lines = json_lines()
    assert lines, "nothing was logged"
    for line in lines:
        assert {"time", "level", "logger", "message"} <= set(line), line
    (hook_failed,) = [line for line in lines if line["logger"] == "hooks"]
    assert hook_failed["level"] == "WARNING"
    assert "timed out" in hook_failed["message"]
    about_the_call = {
        "request_id": "req-logs-1",
        "agent": "logs-bot",
        "session_id": "s-logs",
        "tool_name": "slow__call",
        "tool_call_id": "call-7",
    }
    assert hook_failed.items() >= about_the_call.items()
    (denial,) = [line for line in lines if line["message"].startswith("tool call deny")]
    assert (
        denial.items()
        >= {**about_the_call, "decision": "deny", "level": "INFO"}.items()
    )

    (pending,) = [
        line for line in lines if line["message"].startswith("tool call pending")
    ]
    assert pending["confirmation_id"] == confirmation_id
    assert pending["tool_name"] == "pay__invoice"
    assert (
        len(pending["request_id"]) == 32 and pending["request_id"] != "req-logs-1"
    )  # a new one: that id was not sane
    (decided,) = [
        line for line in lines if line["message"].startswith("confirmation approved")
    ]
    assert decided["confirmation_id"] == confirmation_id
    assert decided["channel"] == "logs-web"
    assert decided["outcome"] == "approved"


def test_the_whole_server_loaded_writes_each_line_once_in_its_format_other_librarys_warnings_too():
    """The ASGI app loaded (with the MCP server, whose SDK calls `logging.basicConfig` with a rich console
    handler): still one line per record, in the chosen format — the root's handler is the gateway's."""
    loaded = "import gateway.asgi\nlogging.getLogger('some.library').warning('disk %s', 'low')\n"
    as_json = _log_in_a_process("json", before=loaded)
    assert as_json.returncode == 0, as_json.stderr
    lines = [json.loads(text) for text in as_json.stderr.splitlines()]
    assert [(line["logger"], line["message"]) for line in lines] == [
        ("some.library", "disk low"),
        ("approvals.confirmations", "confirmation approved"),
    ]
    plain = _log_in_a_process(None, before=loaded)
    assert plain.returncode == 0, plain.stderr
    assert [text.split(" ", 2)[2] for text in plain.stderr.splitlines()] == [
        "WARNING some.library disk low",
        "INFO approvals.confirmations confirmation approved",
    ]


def _log_in_a_process(log_format: str | None, *, before: str = "") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "GATEWAY_LOG_FORMAT"}
    env["DJANGO_SETTINGS_MODULE"] = "gateway.settings"
    if log_format is not None:
        env["GATEWAY_LOG_FORMAT"] = log_format
    script = (
        "import django, logging; django.setup()\n"
        f"{before}"
        "from gateway_utils import logs\n"
        "with logs.bound(agent='purchasing-bot', confirmation_id='c-1'):\n"
        "    logging.getLogger('approvals.confirmations').info('confirmation %s', 'approved')\n"
    )
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_settings_write_json_lines_when_asked_and_plain_text_by_default():
    as_json = _log_in_a_process("json")
    assert as_json.returncode == 0, as_json.stderr
    (line,) = [json.loads(text) for text in as_json.stderr.splitlines()]
    assert line["message"] == "confirmation approved"
    assert line["level"] == "INFO"
    assert line["logger"] == "approvals.confirmations"
    assert line["agent"] == "purchasing-bot"
    assert line["confirmation_id"] == "c-1"

    plain = _log_in_a_process(None)
    assert plain.returncode == 0, plain.stderr
    (text,) = plain.stderr.splitlines()
    assert text.endswith("INFO approvals.confirmations confirmation approved")

    wrong = _log_in_a_process("xml")
    assert wrong.returncode != 0
    assert "GATEWAY_LOG_FORMAT must be text or json, got 'xml'" in wrong.stderr
