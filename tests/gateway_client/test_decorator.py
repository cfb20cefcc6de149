"""@requires_approval against the real gateway: the function runs only on allow, with rewritten arguments."""

from __future__ import annotations

import asyncio

import pytest

from approvals.models import ConfirmationRequest, ToolCall
from gateway_client import AsyncGatewayClient, ToolDenied, requires_approval
from tests.support import parked

pytestmark = pytest.mark.django_db(transaction=True)


class Vendor:
    """Not JSON: the gateway sees its str(), the function gets the object itself."""

    def __init__(self, name: str):
        self.name = name

    def __str__(self) -> str:
        return f"vendor {self.name}"


def test_an_allowed_function_runs_and_its_result_is_reported(gateway_client, live_gateway, coder_key):
    client = gateway_client(live_gateway.url, coder_key)
    runs = []

    @requires_approval(client, tool_name="Read", session_id="s-1", user_id="u-1")
    def read(file_path: str, limit: int = 10) -> str:
        runs.append((file_path, limit))
        return f"{limit} lines of {file_path}"

    assert read("notes.txt") == "10 lines of notes.txt"
    assert runs == [("notes.txt", 10)]
    call = ToolCall.objects.get()
    assert call.tool_args == {"file_path": "notes.txt", "limit": 10}  # defaults are shown to the gateway
    assert (call.user_id, call.outcome, call.result) == ("u-1", "success", "10 lines of notes.txt")


def test_an_approved_function_runs_with_the_arguments_a_hook_rewrote(gateway_client, live_gateway, coder_key, approver):
    client = gateway_client(live_gateway.url, coder_key, long_poll=1)
    approver.decides("approve", when=parked)
    acme = Vendor("acme")
    runs = []

    @requires_approval(client, session_id=lambda: "s-1")
    def pay(amount: int, vendor: Vendor, **extra):
        runs.append((amount, vendor, extra))
        return "paid"

    assert pay(5000, acme, memo="q3") == "paid"
    assert runs == [(100, acme, {"memo": "q3"})]  # capped by the `cap` hook; the vendor is the caller's object
    confirmation = ConfirmationRequest.objects.get()
    assert confirmation.tool_args == {"amount": 100, "vendor": "vendor acme", "memo": "q3"}


def test_a_rejected_function_does_not_run_and_raises_tool_denied_with_the_reason(
    gateway_client, live_gateway, coder_key, approver
):
    client = gateway_client(live_gateway.url, coder_key, long_poll=1)
    approver.decides("reject", reason="over budget")
    runs = []

    @requires_approval(client, session_id="s-1")
    def pay(amount: int, vendor: str):
        runs.append(amount)

    with pytest.raises(ToolDenied) as denied:
        pay(50, "acme")

    assert runs == []
    assert denied.value.reason == "rejected by web:alice: over budget"
    assert denied.value.confirmation_id == str(ConfirmationRequest.objects.get().pk)
    assert denied.value.tool_name == "pay"
    assert "pay was denied" in str(denied.value)


def test_a_function_denied_by_a_hook_never_runs(gateway_client, live_gateway, coder_key):
    runs = []

    @requires_approval(gateway_client(live_gateway.url, coder_key), tool_name="Write", session_id="s-1")
    def write(file_path: str, content: str):
        runs.append(file_path)

    with pytest.raises(ToolDenied, match="writes are frozen"):
        write("/etc/passwd", "x")
    assert runs == []


def test_an_async_function_runs_on_approval_and_is_refused_on_rejection(live_gateway, coder_key, approver):
    client = AsyncGatewayClient(live_gateway.url, coder_key, long_poll=1)
    runs = []

    @requires_approval(client, tool_name="Bash", session_id="s-1")
    async def bash(command: str) -> str:
        runs.append(command)
        return "ok"

    async def scenario():
        approver.decides("approve")
        ran = await bash("make test")
        approver.join()
        approver.decides("reject", reason="no")
        with pytest.raises(ToolDenied, match="rejected by web:alice: no"):
            await bash("make deploy")
        await client.aclose()
        return ran

    assert asyncio.run(scenario()) == "ok"
    assert runs == ["make test"]


def test_an_async_function_can_be_gated_by_the_blocking_client(gateway_client, live_gateway, coder_key):
    @requires_approval(gateway_client(live_gateway.url, coder_key), tool_name="WebFetch", session_id="s-1")
    async def fetch(url: str) -> str:
        return url

    assert asyncio.run(fetch("http://example.com")) == "https://example.com"


def test_the_function_is_refused_when_the_gateway_cannot_be_reached(gateway_client, closed_port_url):
    runs = []

    @requires_approval(gateway_client(closed_port_url, "gw_x", reconnect_for=0.3), session_id="s-1")
    def deploy():
        runs.append(1)

    with pytest.raises(ToolDenied, match="could not be reached") as denied:
        deploy()
    assert runs == [] and denied.value.decision.unreachable


def test_the_function_runs_unapproved_when_the_client_fails_open(gateway_client, closed_port_url):
    @requires_approval(gateway_client(closed_port_url, "gw_x", reconnect_for=0.3, fail_open=True), session_id="s-1")
    def deploy(target: str) -> str:
        return f"deployed {target}"

    assert deploy("staging") == "deployed staging"


def test_a_failing_function_is_reported_as_an_error_and_its_exception_propagates(
    gateway_client, live_gateway, coder_key
):
    @requires_approval(gateway_client(live_gateway.url, coder_key), tool_name="Read", session_id="s-1")
    def read(file_path: str):
        raise FileNotFoundError(file_path)

    with pytest.raises(FileNotFoundError):
        read("missing.txt")
    assert ToolCall.objects.get().outcome == "error"


def test_a_blocking_function_cannot_be_gated_by_the_async_client(live_gateway):
    with pytest.raises(TypeError, match="not async"):

        @requires_approval(AsyncGatewayClient(live_gateway.url, "gw_x"), session_id="s-1")
        def deploy():
            pass
