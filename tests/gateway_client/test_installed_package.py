"""The agent client as a user installs it (docs/agent-client.md, "Install"): its wheel, built from
clients/python, installed with its extras into a new virtualenv outside the checkout (tests/gateway_client/
installed.py), and run from there against the live gateway — the client's calls, the two console commands
launched by name (`gateway-claude-code` as Claude Code runs a hook, `gateway-mcp-proxy` by a real MCP
client), `ask_human`, and the OpenAI Agents example with its own requirements.txt. Nothing of the checkout
is on a path there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import gateway_client
from approvals import services
from approvals.models import Agent, ConfirmationRequest
from tests.conftest import apply_config
from tests.fakes.openai_api import FINAL_PREFIX, FakeOpenAI, fake_openai  # noqa: F401
from tests.gateway_client.conftest import coder_key  # noqa: F401
from tests.gateway_client.installed import ROOT, InstalledClient, installed_client, last_json
from tests.gateway_client.test_ask import answer, the_question
from tests.gateway_client.test_claude_code import hook_json
from tests.typescript.test_adapters import PageApprover, alice  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="session")
def installed(tmp_path_factory, worker_id):
    yield from installed_client(tmp_path_factory, worker_id)


def gated_agent(name: str, tools: list[str], *, allow_edit: list[str] | None = None) -> str:
    """An agent whose `tools` wait for alice on the web page; a new API key for it."""
    gate = {"kind": "approval_gate", "name": "ask-alice", "tools": tools, "channel": "web", "approvers": ["alice"],
            "timeout_seconds": 600, **({"allow_edit": allow_edit} if allow_edit else {})}  # fmt: skip
    apply_config(yaml.safe_dump({"channels": [{"name": "web", "kind": "web"}], "agents": [{"name": name, "hooks": [gate]}]}))
    return services.api_key_create(agent=Agent.objects.get(name=name))[1]


def test_the_wheel_is_what_runs_outside_the_checkout_with_httpx_and_tenacity_only(installed: InstalledClient):
    full = last_json(installed.full.run([str(installed.full.python), "where.py"]))
    bare = last_json(installed.bare.run([str(installed.bare.python), "where.py"]))

    for venv, seen in ((installed.full, full), (installed.bare, bare)):
        assert Path(seen["file"]).is_relative_to(venv.path)  # the wheel's copy, not the checkout's
        assert not any(entry and Path(entry).resolve().is_relative_to(ROOT) for entry in seen["sys_path"])
        assert (venv.bin / "gateway-mcp-proxy").exists() and (venv.bin / "gateway-claude-code").exists()
        assert seen["version"] == seen["distribution"] == gateway_client.__version__
        assert seen["user_agent"] == f"approval-gateway-client/{gateway_client.__version__} (python)"
    runtime = {requirement.split("<")[0].split(">")[0] for requirement in bare["requires"] if "extra ==" not in requirement}
    assert runtime == {"httpx", "tenacity"}
    assert not {"mcp", "openai-agents", "langchain", "pydantic"} & set(bare["installed"])
    assert {"mcp", "openai-agents", "openai"} <= set(full["installed"])


def test_an_allowed_call_and_a_refusal_through_the_installed_client(installed, live_gateway, coder_key):  # noqa: F811
    done = installed.full.run(
        [str(installed.full.python), "calls.py"], GATEWAY_URL=live_gateway.url, GATEWAY_API_KEY=coder_key
    )
    said = last_json(done)

    assert said["read"] == {"decision": "allow", "tool_args": {"file_path": "/etc/hosts"}}
    assert said["write"]["decision"] == "deny" and "writes are frozen" in said["write"]["reason"]


def test_the_claude_code_command_answers_a_hook_by_name_without_any_extra(
    installed, live_gateway, coder_key, tmp_path  # noqa: F811
):
    def hook(tool: str, tool_input: dict) -> dict:
        done = installed.bare.run(
            ["gateway-claude-code", "--max-wait", "0"],
            stdin=json.dumps(hook_json(tool, tool_input)),
            GATEWAY_URL=live_gateway.url, GATEWAY_API_KEY=coder_key, GATEWAY_CLAUDE_STATE_DIR=str(tmp_path),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)["hookSpecificOutput"]

    read, write = hook("Read", {"file_path": "/etc/hosts"}), hook("Write", {"file_path": "/etc/hosts", "content": "x"})

    assert read["permissionDecision"] == "allow"
    assert write["permissionDecision"] == "deny" and "writes are frozen" in write["permissionDecisionReason"]


def test_the_mcp_command_without_its_extra_says_how_to_install_it_and_exits_2(installed: InstalledClient):
    done = installed.bare.run(["gateway-mcp-proxy", "--name", "time", "--", "mcp-server-time"])

    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "pip install 'approval-gateway-client[mcp]'" in done.stderr


def test_a_real_mcp_client_launches_the_proxy_by_name_its_gated_call_waits_and_ask_human_is_answered(
    installed, live_gateway, approver, tmp_path
):
    key = gated_agent("mcp-agent", ["billing__pay_invoice"])
    log = tmp_path / "upstream.log"
    session = installed.full.start(
        [str(installed.full.python), "mcp_session.py", str(log)], GATEWAY_URL=live_gateway.url, GATEWAY_API_KEY=key
    )
    try:
        approver.decides("approve")
        approver.join()
        question_id = the_question()
        answer(question_id, "Globex")
        stdout, stderr = session.communicate(timeout=120)
    finally:
        session.kill()
    assert session.returncode == 0, stderr
    steps = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]

    assert steps[0] == {"tools": ["pay_invoice", "delete_customer", "ask_human"]}
    assert steps[1] == {"paid": json.dumps({"amount": 120, "invoice_id": "INV-7"}), "is_error": False}
    assert steps[2]["is_error"] is False and steps[2]["asked"].startswith('"Globex"')
    ran = [json.loads(line) for line in log.read_text().splitlines() if '"ran"' in line]
    assert ran == [{"ran": "pay_invoice", "arguments": {"invoice_id": "INV-7", "amount": 120}}]
    assert ConfirmationRequest.objects.exclude(kind="question").get().tool_name == "billing__pay_invoice"


def test_the_openai_agents_example_runs_from_the_wheel_with_the_web_pages_approval(
    installed, live_gateway, fake_openai: FakeOpenAI, alice  # noqa: F811
):
    key = gated_agent("payments-agent", ["pay_invoice"], allow_edit=["amount"])
    request = "[installed] Pay invoice INV-1, 120 dollars"
    fake_openai.script(request, [[("pay_invoice", {"invoice_id": "INV-1", "amount": 120})]])
    env = {"GATEWAY_URL": live_gateway.url, "GATEWAY_API_KEY": key, "OPENAI_BASE_URL": fake_openai.base_url,
           "OPENAI_API_KEY": "sk-test-not-a-real-key", "OPENAI_AGENTS_DISABLE_TRACING": "1"}  # fmt: skip
    assert not (installed.full.home / "agent.py").is_relative_to(ROOT)

    agent = installed.full.start([str(installed.full.python), "agent.py", request], **env)
    try:
        PageApprover(live_gateway.url, "approve", edits={"amount": "100"}).join()
        stdout, stderr = agent.communicate(timeout=120)
    finally:
        agent.kill()
    assert agent.returncode == 0, stderr
    lines = stdout.splitlines()

    assert "PAID INV-1 100" in lines  # the amount alice approved, not the model's 120
    assert lines[-1] == f"{FINAL_PREFIX}pay_invoice: paid INV-1"
    assert ConfirmationRequest.objects.get().decided_by == "web:alice"
