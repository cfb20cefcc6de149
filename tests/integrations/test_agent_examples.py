"""The example agents, run exactly as their docs say (`python examples/<framework>/agent.py "<request>"`),
on the real OpenAI Agents SDK and LangChain v1: their own OpenAI clients talk to the fake OpenAI API
(`OPENAI_BASE_URL`), their tools ask the real gateway over HTTP, and approvers click in (fake) Slack."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from approvals.models import ConfirmationRequest, ToolCall
from tests.fakes.openai_api import FINAL_PREFIX, FakeOpenAI
from tests.integrations.conftest import (
    ROOT,
    WAIT,
    Gateway,
    cap_amount,
    command_hook,
    example_env,
    slack_gate,
)

pytestmark = pytest.mark.django_db(transaction=True)

AGENT = "payments-agent"
EXAMPLES = ["openai_agents", "langchain"]


def start(example: str, request: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / example / "agent.py"), request],
        env=env,
        cwd="/",  # the examples find gateway_client themselves, from any directory
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen) -> list[str]:
    """The example's output lines, once it exited successfully."""
    stdout, stderr = process.communicate(timeout=2 * WAIT)
    assert process.returncode == 0, stderr
    return stdout.splitlines()


@pytest.mark.parametrize("example", EXAMPLES)
def test_an_approved_payment_runs_with_the_gateways_arguments_and_the_model_sees_its_result(
    example: str, gateway: Gateway, fake_openai: FakeOpenAI
):
    key = gateway.configure(
        AGENT, [command_hook("cap-at-100", ["pay_invoice"], cap_amount(100)), slack_gate(["pay_invoice"])]
    )
    request = f"[{example}] Pay invoice INV-1, 120 dollars"
    fake_openai.script(request, [[("pay_invoice", {"invoice_id": "INV-1", "amount": 120})]])

    process = start(example, request, example_env(gateway.url, key, fake_openai.base_url))
    card = gateway.approver.card()
    assert ConfirmationRequest.objects.get().tool_args == {"invoice_id": "INV-1", "amount": 100}
    gateway.approver.approve(card)
    lines = finish(process)

    assert "PAID INV-1 100" in lines  # the capped amount, not the model's 120
    assert lines[-1] == f"{FINAL_PREFIX}pay_invoice: paid INV-1"
    assert fake_openai.outputs_seen(request) == {"pay_invoice": "paid INV-1"}
    call = ToolCall.objects.get(tool_name="pay_invoice")
    assert (call.outcome, call.result) == ("success", "paid INV-1")


@pytest.mark.parametrize("example", EXAMPLES)
def test_a_rejected_payment_never_runs_and_the_model_sees_the_approvers_reason(
    example: str, gateway: Gateway, fake_openai: FakeOpenAI
):
    key = gateway.configure(AGENT, [slack_gate(["pay_invoice"])])
    request = f"[{example}] Pay invoice INV-2, 900 dollars"
    fake_openai.script(request, [[("pay_invoice", {"invoice_id": "INV-2", "amount": 900})]])

    process = start(example, request, example_env(gateway.url, key, fake_openai.base_url))
    gateway.approver.reject("Over budget this quarter")
    lines = finish(process)

    refusal = "pay_invoice was not run: rejected by bob (slack:U0BOB): Over budget this quarter"
    assert not [line for line in lines if line.startswith("PAID")]
    assert fake_openai.outputs_seen(request) == {"pay_invoice": refusal}
    assert lines[-1] == f"{FINAL_PREFIX}pay_invoice: {refusal}"


@pytest.mark.parametrize("example", EXAMPLES)
def test_an_ungated_tool_runs_at_once_and_the_model_gets_its_result_as_the_gateway_cut_it(
    example: str, quiet_gateway: Gateway, fake_openai: FakeOpenAI
):
    key = quiet_gateway.configure(
        AGENT, [slack_gate(["pay_invoice"]), {"kind": "truncate_result", "tools": ["get_balance"], "max_chars": 5}]
    )
    request = f"[{example}] What is my balance?"
    fake_openai.script(request, [[("get_balance", {})]])

    lines = finish(start(example, request, example_env(quiet_gateway.url, key, fake_openai.base_url)))

    cut = "12840\n[truncated by the gateway: showing the first 5 of 7 characters]"
    assert fake_openai.outputs_seen(request) == {"get_balance": cut}
    assert quiet_gateway.slack.calls("chat.postMessage") == [] and ConfirmationRequest.objects.count() == 0
    call = ToolCall.objects.get(tool_name="get_balance")
    assert (call.decision, call.outcome, call.result_size) == ("allow", "success", 7)
    assert "\n".join(lines).endswith(f"{FINAL_PREFIX}get_balance: {cut}")  # printed last


@pytest.mark.parametrize("example", EXAMPLES)
def test_with_the_gateway_down_nothing_runs_and_the_model_is_told_why(example: str, fake_openai: FakeOpenAI):
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    probe.close()
    request = f"[{example}] Pay invoice INV-3, 50 dollars"
    fake_openai.script(request, [[("pay_invoice", {"invoice_id": "INV-3", "amount": 50})]])

    lines = finish(start(example, request, example_env(url, "gw_unused", fake_openai.base_url)))

    assert not [line for line in lines if line.startswith("PAID")]
    seen = fake_openai.outputs_seen(request)["pay_invoice"]
    assert seen.startswith(f"pay_invoice was not run: denied: the gateway at {url} could not be reached")
    assert seen.endswith("failing closed")
