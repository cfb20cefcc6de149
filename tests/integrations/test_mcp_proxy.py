"""The MCP gateway proxy, `python -m gateway_client.mcp_proxy`, run as a subprocess the way an MCP client
launches it, and driven by the MCP SDK's own `Client`. Upstreams: the third-party `mcp-server-time`
(PyPI) over stdio, and a CRM on the SDK's `MCPServer` over streamable HTTP. Approvals are clicks in
(fake) Slack, through the real gateway and a real Celery worker."""

from __future__ import annotations

import contextlib
import functools
import socket
import sys
from collections.abc import Iterator
from typing import Any

import anyio.from_thread
import pytest
from mcp import Client, StdioServerParameters

from approvals.models import ConfirmationRequest, ToolCall
from tests.fakes.slack_api import view_submission_payload
from tests.integrations.conftest import ALICE, WAIT, Gateway, slack_gate
from tests.integrations.crm_server import PROFILE, CrmServer
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

AGENT = "mcp-agent"
TIME_SERVER = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]
LONDON_TO_TOKYO = {"source_timezone": "Europe/London", "time": "09:30", "target_timezone": "Asia/Tokyo"}
FROM_UTC = (  # a command hook: conversions always start from UTC
    "import json,sys; e=json.load(sys.stdin); a=e['tool_input']; a['source_timezone']='UTC'; "
    "print(json.dumps({'tool_args': a}))"
)


@pytest.fixture(scope="module")
def crm() -> Iterator[CrmServer]:
    server = CrmServer().start()
    yield server
    server.stop()


@pytest.fixture
def crm_server(crm: CrmServer) -> CrmServer:
    crm.calls.clear()
    return crm


def proxy(
    gateway_url: str, api_key: str, name: str, *options: str, upstream: list[str] | None = None
) -> StdioServerParameters:
    """The proxy as an MCP client's config launches it (docs/integrations/mcp-proxy.md)."""
    args = ["-m", "gateway_client.mcp_proxy", "--name", name, *options]
    if upstream is not None:
        args += ["--", *upstream]
    return StdioServerParameters(
        command=sys.executable,
        args=args,
        env={"GATEWAY_URL": gateway_url, "GATEWAY_API_KEY": api_key},  # the installed package, from anywhere
        cwd="/",
    )


@contextlib.contextmanager
def mcp_client(
    server: Any, *, mode: str = "auto", **options: Any
) -> Iterator[tuple[anyio.from_thread.BlockingPortal, Client]]:
    """The MCP SDK's `Client`, connected, on its own event loop thread (`options`: more of `Client`'s)."""
    with anyio.from_thread.start_blocking_portal() as portal:
        client_of = Client(server, mode=mode, read_timeout_seconds=2 * WAIT, **options)
        with portal.wrap_async_context_manager(client_of) as client:
            yield portal, client


def text(result: Any) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


def dumped(items: list[Any]) -> list[dict[str, Any]]:
    return [item.model_dump(by_alias=True, exclude_none=True) for item in items]


def closed_port_url() -> str:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return f"http://127.0.0.1:{port}"


# --------------------------------------------------------------------------- pass-through


def test_the_proxy_lists_the_upstream_tools_unchanged_and_ungated_calls_run_at_once(quiet_gateway: Gateway):
    key = quiet_gateway.configure(AGENT, [slack_gate(["time__convert_time"])])
    with mcp_client(StdioServerParameters(command=TIME_SERVER[0], args=TIME_SERVER[1:])) as (portal, direct):
        upstream_tools = portal.call(direct.list_tools).tools

    with mcp_client(proxy(quiet_gateway.url, key, "time", upstream=TIME_SERVER)) as (portal, client):
        tools = portal.call(client.list_tools).tools
        now = portal.call(client.call_tool, "get_current_time", {"timezone": "UTC"})
        failed = portal.call(client.call_tool, "get_current_time", {"timezone": "Mars/Olympus"})

    assert dumped(tools) == dumped(upstream_tools)
    assert [tool.name for tool in tools] == ["get_current_time", "convert_time"]
    assert not now.is_error
    assert now.structured_content["timezone"] == "UTC"
    assert failed.is_error and "Mars/Olympus" in text(failed)  # the upstream's own error, passed through
    assert quiet_gateway.slack.calls("chat.postMessage") == [] and ConfirmationRequest.objects.count() == 0
    calls = {c.tool_args["timezone"]: c for c in ToolCall.objects.filter(tool_name="time__get_current_time")}
    assert (calls["UTC"].decision, calls["UTC"].outcome) == ("allow", "success")
    assert calls["Mars/Olympus"].outcome == "error"  # reported as tool-error


def test_resources_prompts_and_upstream_progress_pass_through_and_results_are_cut_by_the_gateway(
    quiet_gateway: Gateway, crm_server: CrmServer
):
    key = quiet_gateway.configure(
        AGENT,
        [slack_gate(["crm__delete_customer"]), {"kind": "truncate_result", "tools": ["crm__lookup"], "max_chars": 40}],
    )
    with mcp_client(crm_server.url) as (portal, direct):
        resource_templates = portal.call(direct.list_resource_templates).resource_templates
        prompts = portal.call(direct.list_prompts).prompts

    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    with mcp_client(proxy(quiet_gateway.url, key, "crm", "--upstream-url", crm_server.url)) as (portal, client):
        assert dumped(portal.call(client.list_resource_templates).resource_templates) == dumped(resource_templates)
        assert dumped(portal.call(client.list_prompts).prompts) == dumped(prompts)
        record = portal.call(client.read_resource, "crm://customers/c-7")
        prompt = portal.call(client.get_prompt, "follow_up", {"customer_id": "c-7"})
        looked_up = portal.call(
            functools.partial(client.call_tool, "lookup", {"customer_id": "c-7"}, progress_callback=on_progress)
        )

    assert record.contents[0].text == "record of c-7"
    assert prompt.messages[0].content.text == "Write a short follow-up email to customer c-7."
    full = PROFILE.format(customer_id="c-7")
    assert text(looked_up) == f"{full[:40]}\n[truncated by the gateway: showing the first 40 of {len(full)} characters]"
    assert crm_server.calls == [("lookup", {"customer_id": "c-7"})]
    assert [p[0] for p in progress] == [1, 2]  # the upstream's own progress notifications, relayed


# --------------------------------------------------------------------------- decisions in Slack


def test_an_approved_call_waits_with_progress_then_runs_upstream_with_the_rewritten_arguments(gateway: Gateway):
    key = gateway.configure(
        AGENT,
        [
            {
                "kind": "command",
                "name": "from-utc",
                "event": "pre_tool_use",
                "priority": 10,
                "tools": ["time__convert_time"],
                "command": [sys.executable, "-c", FROM_UTC],
            },
            slack_gate(["time__convert_time"]),
        ],
    )
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    server = proxy(gateway.url, key, "time", "--progress-interval", "0.2", upstream=TIME_SERVER)
    with mcp_client(server, mode="legacy") as (portal, client):
        call = portal.start_task_soon(
            functools.partial(client.call_tool, "convert_time", LONDON_TO_TOKYO, progress_callback=on_progress)
        )
        card = gateway.approver.card()
        wait_until(lambda: len(progress) >= 2, WAIT, "progress notifications while waiting")
        assert not call.done()
        gateway.approver.approve(card)
        result = call.result(timeout=WAIT)

    assert not result.is_error, text(result)
    assert result.structured_content["source"]["timezone"] == "UTC"  # the hook's arguments ran
    assert "T18:30:00+09:00" in result.structured_content["target"]["datetime"]
    confirmation = ConfirmationRequest.objects.get()
    assert confirmation.tool_name == "time__convert_time"
    assert confirmation.tool_args["source_timezone"] == "UTC"
    assert progress[0][1] == 300.0 and "waiting for approval" in progress[0][2]
    assert ToolCall.objects.get(tool_name="time__convert_time").outcome == "success"


def test_a_rejected_call_never_reaches_the_upstream_and_the_client_gets_the_reason(
    gateway: Gateway, crm_server: CrmServer
):
    key = gateway.configure(AGENT, [slack_gate(["crm__delete_customer"])])
    server = proxy(gateway.url, key, "crm", "--upstream-url", crm_server.url)
    with mcp_client(server, mode="legacy") as (portal, client):
        call = portal.start_task_soon(client.call_tool, "delete_customer", {"customer_id": "c-9"})
        gateway.approver.reject("Not without a support ticket")
        result = call.result(timeout=WAIT)

    assert result.is_error
    assert text(result) == "crm__delete_customer was not run: rejected by bob (slack:U0BOB): Not without a support ticket"
    assert crm_server.calls == []


def test_an_approver_edits_the_arguments_in_slack_and_the_upstream_runs_the_edit(
    gateway: Gateway, crm_server: CrmServer
):
    key = gateway.configure(AGENT, [slack_gate(["crm__delete_customer"], allow_edit=["customer_id"])])
    server = proxy(gateway.url, key, "crm", "--upstream-url", crm_server.url)
    with mcp_client(server, mode="legacy") as (portal, client):
        call = portal.start_task_soon(client.call_tool, "delete_customer", {"customer_id": "c-9"})
        card = gateway.approver.card()
        gateway.approver.click(card, ALICE, "edit")  # Edit… opens a modal with the editable arguments
        trigger = f"trigger.{ALICE.name}.edit.{card.ts}"
        (opened,) = wait_until(lambda: [c for c in gateway.slack.calls("views.open") if c.json["trigger_id"] == trigger])
        submission = view_submission_payload(
            private_metadata=opened.json["view"]["private_metadata"], reason=None, user_id=ALICE.id,
            user_name=ALICE.name, callback_id="edit_arguments",
        )  # fmt: skip
        submission["view"]["state"]["values"] = {"edit_0": {"value": {"type": "plain_text_input", "value": '"c-10"'}}}
        assert gateway.approver._post(submission).json() == {"response_action": "clear"}
        result = call.result(timeout=WAIT)

    assert text(result) == "deleted c-10"
    assert crm_server.calls == [("delete_customer", {"customer_id": "c-10"})]  # the edit ran, not the proposal
    tool_call = ToolCall.objects.get()
    assert (tool_call.tool_args, tool_call.ran_args) == ({"customer_id": "c-9"}, {"customer_id": "c-10"})
    assert tool_call.confirmation.approved_args == {"customer_id": "c-10"}


def test_a_call_still_pending_at_max_wait_says_so_and_a_retry_picks_up_the_approval(gateway: Gateway):
    key = gateway.configure(AGENT, [slack_gate(["time__convert_time"])])
    server = proxy(gateway.url, key, "time", "--max-wait", "1", upstream=TIME_SERVER)
    with mcp_client(server) as (portal, client):
        first = portal.call(client.call_tool, "convert_time", LONDON_TO_TOKYO)
        gateway.approver.approve()
        retried = portal.call(client.call_tool, "convert_time", LONDON_TO_TOKYO)

    confirmation = ConfirmationRequest.objects.get()
    assert first.is_error
    assert text(first).startswith(
        f"time__convert_time was not run: approval is still pending in the gateway (request {confirmation.pk} at "
    )
    assert "Call time__convert_time again later with the same arguments" in text(first)
    assert not retried.is_error, text(retried)
    assert retried.structured_content["target"]["timezone"] == "Asia/Tokyo"
    assert len(gateway.approver.cards()) == 1 and confirmation.status == "approved"


# --------------------------------------------------------------------------- cancelled, unreachable


def test_a_cancelled_call_or_a_client_that_goes_away_withdraws_the_confirmation(
    quiet_gateway: Gateway, crm_server: CrmServer
):
    key = quiet_gateway.configure(AGENT, [slack_gate(["crm__delete_customer"])])

    def pending(customer_id: str) -> ConfirmationRequest:
        return wait_until(
            lambda: ConfirmationRequest.objects.filter(status="pending", tool_args__customer_id=customer_id).first(),
            WAIT,
            f"the request for {customer_id}",
        )

    def withdrawn(confirmation: ConfirmationRequest) -> None:
        wait_until(
            lambda: ConfirmationRequest.objects.filter(pk=confirmation.pk, status="cancelled").exists(),
            WAIT,
            "the withdrawal",
        )

    with mcp_client(proxy(quiet_gateway.url, key, "crm", "--upstream-url", crm_server.url)) as (portal, client):
        cancelled = portal.start_task_soon(client.call_tool, "delete_customer", {"customer_id": "c-8"})
        first = pending("c-8")
        cancelled.cancel()  # the SDK sends notifications/cancelled
        withdrawn(first)
        left = portal.start_task_soon(client.call_tool, "delete_customer", {"customer_id": "c-9"})
        second = pending("c-9")
    withdrawn(second)  # the client closed the proxy's stdin with the call still held

    assert left.exception() is not None  # the client got no answer: it left
    assert set(ConfirmationRequest.objects.values_list("decided_by", flat=True)) == {f"agent:{AGENT}"}
    assert crm_server.calls == []


def test_with_the_gateway_down_a_call_fails_closed(crm_server: CrmServer):
    url = closed_port_url()
    server = proxy(url, "gw_unused", "crm", "--reconnect-for", "0.5", "--upstream-url", crm_server.url)
    with mcp_client(server) as (portal, client):
        result = portal.call(client.call_tool, "delete_customer", {"customer_id": "c-9"})

    assert result.is_error
    assert text(result).startswith(
        f"crm__delete_customer was not run: denied: the gateway at {url} could not be reached"
    )
    assert crm_server.calls == []
