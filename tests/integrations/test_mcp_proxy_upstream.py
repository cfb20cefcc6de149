"""The MCP proxy and its command upstream (`upstream.py`: the proxy relays the upstream's pipes itself):
the upstream crashing mid-call or exiting answers the client's open requests with an error and ends the
proxy; notifications pass both ways; calls in flight are answered in the upstream's order; and the ways a
client might slip a `tools/call` past the gate or pass an upstream answer off as another's — a method
spelled otherwise, a request id already in use — are refused. The real proxy as a subprocess, in front of
the naive echo upstream (`echo_mcp_server.py`: `crash`, `notify`, `hold` / `release`)."""

from __future__ import annotations

import json
import os
import signal

import pytest

from approvals.models import ConfirmationRequest, ToolCall
from tests.integrations.conftest import WAIT
from tests.integrations.test_mcp_proxy_gate import EXIT_WITHIN, alive, call, key, logged, started  # noqa: F401
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

UPSTREAM_CLOSED = {"code": -32000, "message": "the upstream server closed the connection before it answered"}
ID_IN_USE = {"code": -32600, "message": "the request id is already in use by a request not yet answered"}
ALLOWED = ("--name", "echo")  # echo__* matches no gate of the agent's: allowed at once


def tool_call(request_id, name: str, **arguments) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


def received_methods(log) -> list:
    return [json.loads(e["received"]).get("method") for e in logged(log) if "received" in e]


def test_an_upstream_that_crashes_mid_call_answers_the_open_requests_with_an_error_and_ends_the_proxy(started):
    proxy, log = started(*ALLOWED)
    proxy.handshake()
    proxy.write({**call(1), "params": {**call(1)["params"], "name": "hold"}})  # in flight upstream, unanswered
    wait_until(lambda: "tools/call" in received_methods(log), WAIT, "the held call upstream")
    proxy.write(tool_call(2, "crash"))

    answers = sorted((proxy.answer(), proxy.answer()), key=lambda a: a["id"])
    status = proxy.process.wait(timeout=EXIT_WITHIN)

    assert answers == [
        {"jsonrpc": "2.0", "id": 1, "error": UPSTREAM_CLOSED},
        {"jsonrpc": "2.0", "id": 2, "error": UPSTREAM_CLOSED},
    ]
    assert status == 1
    assert "mcp_proxy: the upstream server 'echo' closed the connection" in proxy.process.stderr.read()
    crashed = ToolCall.objects.get(tool_name="echo__crash")
    assert crashed.decision == "allow"  # it was asked about before it reached the upstream


def test_a_call_held_for_a_human_when_the_upstream_exits_is_answered_with_an_error_and_withdrawn(started):
    proxy, log = started()
    proxy.handshake()
    pid = wait_until(lambda: next((e["pid"] for e in logged(log) if "pid" in e), None), WAIT, "the upstream's pid")
    proxy.write(call(3))
    pending = wait_until(lambda: ConfirmationRequest.objects.filter(status="pending").first(), WAIT, "the request")

    os.kill(pid, signal.SIGTERM)  # the upstream goes on its own, the client still there
    answer = proxy.answer()
    status = proxy.process.wait(timeout=EXIT_WITHIN)

    assert answer == {"jsonrpc": "2.0", "id": 3, "error": UPSTREAM_CLOSED}
    assert status == 1
    wait_until(lambda: not alive(pid), 5, "the upstream's exit")
    pending.refresh_from_db()
    assert (pending.status, pending.decided_by) == ("cancelled", "agent:mcp-agent")
    assert [e for e in logged(log) if "ran" in e] == []


def test_notifications_pass_both_ways_and_a_call_in_flight_does_not_hold_up_a_later_one(started):
    """`hold` is answered upstream only after `release` is: the later call is not kept behind the earlier,
    and each answer reaches its own request (each is then reported to the gateway, so they may arrive in
    either order)."""
    proxy, log = started(*ALLOWED)
    proxy.handshake()
    proxy.write({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"})
    proxy.write(tool_call("first", "hold", n=1))
    wait_until(lambda: received_methods(log).count("tools/call") == 1, WAIT, "the first call upstream")
    proxy.write(tool_call("second", "release", n=2))
    answers = [proxy.answer() for _ in range(2)]
    proxy.write(tool_call("third", "notify", n=3))
    answers += [proxy.answer() for _ in range(2)]

    assert received_methods(log)[2] == "notifications/roots/list_changed"
    assert sorted(a["id"] for a in answers[:2]) == ["first", "second"]
    assert {a["id"]: a["result"]["structuredContent"] for a in answers[:2]} == {"first": {"n": 1}, "second": {"n": 2}}
    assert answers[2] == {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "hi"}}
    assert (answers[3]["id"], answers[3]["result"]["structuredContent"]) == ("third", {"n": 3})
    ran = {c.tool_name: c.outcome for c in ToolCall.objects.all()}
    assert ran == {"echo__hold": "success", "echo__release": "success", "echo__notify": "success"}


@pytest.mark.parametrize("method", ["Tools/Call", "TOOLS/CALL", " tools/call", "tools/call\n"])
def test_a_tools_call_spelled_otherwise_is_refused_and_never_reaches_the_upstream(started, method):
    proxy, log = started("--max-wait", "0.5")
    proxy.handshake()
    proxy.write({**call(4), "method": method})
    proxy.write({**call(), "method": method})  # as a notification: dropped
    proxy.write({"jsonrpc": "2.0", "id": "last", "method": "ping"})

    answers = proxy.answers_until("last")

    assert answers[0] == {
        "jsonrpc": "2.0", "id": 4, "error": {"code": -32600, "message": "the method is tools/call, spelled exactly so"},
    }  # fmt: skip
    assert len(answers) == 2
    assert received_methods(log) == ["initialize", "notifications/initialized", "ping"]
    assert ToolCall.objects.count() == 0


def test_a_request_reusing_the_id_of_one_in_flight_is_refused_and_its_answer_cannot_pass_for_the_calls(started):
    """A ping with the id of a call being asked about: its answer would be taken for the call's (and the
    call's own result passed on unreported). It is refused; a string id equal to an integer's is another id."""
    proxy, log = started("--max-wait", "30")
    proxy.handshake()
    proxy.write(call(5))  # held: a human decides
    wait_until(lambda: ConfirmationRequest.objects.filter(status="pending").exists(), WAIT, "the request")
    proxy.write({"jsonrpc": "2.0", "id": 5, "method": "ping"})
    proxy.write(call(5))
    proxy.write({"jsonrpc": "2.0", "id": "5", "method": "ping"})  # "5" is not 5

    answers = [proxy.answer() for _ in range(3)]

    assert answers == [
        {"jsonrpc": "2.0", "id": 5, "error": ID_IN_USE},
        {"jsonrpc": "2.0", "id": 5, "error": ID_IN_USE},
        {"jsonrpc": "2.0", "id": "5", "result": {}},
    ]
    assert received_methods(log) == ["initialize", "notifications/initialized", "ping"]
    assert ConfirmationRequest.objects.count() == 1
    assert [e for e in logged(log) if "ran" in e] == []


def test_an_allowed_call_and_a_request_with_its_id_sent_together_get_one_answer_each(started):
    proxy, log = started(*ALLOWED)
    proxy.handshake()
    proxy.write(tool_call(6, "pay_invoice", amount=1))
    proxy.write({"jsonrpc": "2.0", "id": 6, "method": "ping"})  # while the call is asked about
    proxy.write({"jsonrpc": "2.0", "id": "last", "method": "ping"})

    answers = [proxy.answer() for _ in range(3)]  # the refusal at once; the call's after the gateway's

    assert sorted(answers, key=lambda a: str(a["id"])) == [
        {"jsonrpc": "2.0", "id": 6, "error": ID_IN_USE},
        {"jsonrpc": "2.0", "id": 6, "result": {
            "content": [{"type": "text", "text": '{"amount": 1}'}], "structuredContent": {"amount": 1},
        }},
        {"jsonrpc": "2.0", "id": "last", "result": {}},
    ]  # fmt: skip
    assert received_methods(log).count("ping") == 1  # only "last"


def test_a_call_cancelled_after_it_reached_the_upstream_never_reaches_the_client_unreported(started):
    """The client cancels a call the upstream is running; the upstream answers it anyway (cancellation
    ignored, or its answer already on the way). Relayed, that result would reach the client without the
    gateway's post-tool-use hooks: it is dropped, and the id stays in use until it comes."""
    proxy, log = started(*ALLOWED)
    proxy.handshake()
    proxy.write(tool_call("c", "hold", secret="s3cr3t"))
    wait_until(lambda: received_methods(log).count("tools/call") == 1, WAIT, "the call upstream")
    proxy.write({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "c"}})
    wait_until(lambda: "notifications/cancelled" in received_methods(log), WAIT, "the cancel upstream")
    proxy.write(tool_call("c", "pay_invoice", amount=2))  # its answer not come yet: the id is still in use
    proxy.write(tool_call("r", "release"))  # the upstream answers "r", then the cancelled "c"
    proxy.write({"jsonrpc": "2.0", "id": "last", "method": "ping"})

    answers = proxy.answers_until("last")
    while "r" not in [a.get("id") for a in answers]:  # (reported to the gateway first: it may come after)
        answers.append(proxy.answer())
    proxy.write(tool_call("c", "pay_invoice", amount=3))  # answered (dropped) now: the id is free again
    again = proxy.answer()

    assert {"jsonrpc": "2.0", "id": "c", "error": ID_IN_USE} in answers
    assert sorted(str(a["id"]) for a in answers) == ["c", "last", "r"]
    assert not any("s3cr3t" in json.dumps(a) for a in answers)
    assert (again["id"], again["result"]["structuredContent"]) == ("c", {"amount": 3})
    assert [e["arguments"] for e in logged(log) if e.get("ran") == "pay_invoice"] == [{"amount": 3}]


def test_a_request_cancelled_upstream_keeps_its_id_until_answered_so_a_call_cannot_take_its_answer(started):
    """A held ping, cancelled, then a call under its id: the ping's late answer would be taken for the call's
    and the call's own result relayed unreported. The id is in use until the ping is answered."""
    proxy, log = started(*ALLOWED)
    proxy.handshake()
    proxy.write({"jsonrpc": "2.0", "id": "p", "method": "ping", "params": {"hold": True}})
    wait_until(lambda: "ping" in received_methods(log), WAIT, "the ping upstream")
    proxy.write({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "p"}})
    proxy.write(tool_call("p", "hold", n=1))

    refused = proxy.answer()

    assert refused == {"jsonrpc": "2.0", "id": "p", "error": ID_IN_USE}
    assert received_methods(log).count("tools/call") == 0
