"""The first run: `demo_setup` prints where to go and a key that works, and
examples/agent_demo.py waits for a person's decision on the web page."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from django.core.management import call_command

from approvals.models import ApiKey, ConfirmationRequest
from tests.conftest import decide
from tests.support import parked, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[3]


def demo_setup() -> str:
    out = io.StringIO()
    call_command("demo_setup", stdout=out, stderr=io.StringIO())
    return out.getvalue()


def printed_key(output: str) -> str:
    return re.search(r"Demo API key:\s+(gw_\S+)", output).group(1)


@pytest.fixture
def demo_key(transactional_db, public_url) -> str:
    return printed_key(demo_setup())


def test_demo_setup_prints_where_to_go_and_a_key_that_works(live_gateway, public_url, transactional_db):
    output = demo_setup()

    assert f"Approvals inbox: {public_url}/approvals/" in output
    assert f"Admin:           {public_url}/admin/" in output
    key = printed_key(output)
    assert f"GATEWAY_URL={public_url} GATEWAY_API_KEY={key} " in output
    assert output.rstrip().splitlines()[-1].strip().endswith("examples/agent_demo.py")
    answer = httpx.post(
        f"{live_gateway.url}/api/v1/hooks/pre-tool-use",
        headers={"Authorization": f"Bearer {key}"},
        json={"session_id": "s", "tool_name": "web__search", "tool_args": {}},
    )
    assert answer.json()["decision"] == "allow"


def test_demo_setup_run_again_prints_the_same_key_and_creates_no_other(public_url, transactional_db):
    first = printed_key(demo_setup())
    second = printed_key(demo_setup())

    assert first == second
    assert ApiKey.objects.filter(revoked_at__isnull=True).count() == 1


def run_demo_agent(live_gateway, key: str, decision: str, reason: str = "") -> tuple[int, str]:
    """Run examples/agent_demo.py; when it says it is waiting, a person decides on the web channel."""
    env = {**os.environ, "GATEWAY_URL": live_gateway.url, "GATEWAY_API_KEY": key, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "examples/agent_demo.py"], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    lines = []
    try:
        for line in process.stdout:
            lines.append(line)
            if line.strip().startswith(f"{live_gateway.url}/approvals/"):
                confirmation_id = line.strip().rstrip("/").rsplit("/", 1)[1]
                # The agent (its own process) long-polls the live gateway, which runs in this one.
                wait_until(lambda: parked(confirmation_id), what="the demo agent to long-poll")
                decide(confirmation_id, decision, actor="admin", reason=reason)
        code = process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    return code, "".join(lines)


def test_the_demo_agent_waits_on_the_printed_page_and_pays_when_approved(live_gateway, demo_key):
    code, output = run_demo_agent(live_gateway, demo_key, "approve")

    assert code == 0, output
    assert "this call needs a human decision. Waiting for someone to approve or reject it here:" in output
    assert "allowed (approved by web:admin). Paying invoice INV-2024-0117 ... done." in output
    confirmation = ConfirmationRequest.objects.get()
    assert (confirmation.tool_name, confirmation.status) == ("oa__purchase_pay", "approved")


def test_the_demo_agent_stops_with_the_reason_when_rejected(live_gateway, demo_key):
    code, output = run_demo_agent(live_gateway, demo_key, "reject", reason="not this month")

    assert code == 1, output
    assert "not allowed (deny: rejected by web:admin: not this month). Not paying; stopping here." in output
