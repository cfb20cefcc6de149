"""The TypeScript `GatewayClient`, installed from the built tarball into a new npm project, against the real
gateway over HTTP — as tests/gateway_client/ holds the Python client: the final decision across long-poll
rounds and a gateway restart (one request, however often it reconnects), fail closed / open, still pending
and picked up later by its key, post-tool-use, the other events, errors by status, a question with a typed
answer; its version in the User-Agent; and a root import that needs no framework."""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from approvals.models import ConfirmationRequest, ToolCall
from tests.conftest import decide
from tests.gateway_client.test_ask import FORM, answer, the_question
from tests.gateway_client.test_client import assert_pending_rounds_then, in_second_wait_round, parked_on
from tests.support import DeadPort, answers, parked, wait_until
from tests.typescript.conftest import INSTALL, PACKAGE, NodeProject

pytestmark = pytest.mark.django_db(transaction=True)


class DroppingPort(DeadPort):
    """A gateway that is down, as `DeadPort`, except that each connection's request is read before the
    connection is dropped. Node 20's `fetch` (undici 6) never settles a request whose connection is closed
    before the request is written — only the client's own timeout ends it — so the outage here is a
    gateway going away under the request, which fails at once."""

    def _drop_connections(self) -> None:
        while True:
            try:
                connection, _ = self.sock.accept()
            except OSError:  # shut down: the outage is over
                return
            connection.settimeout(5)
            with contextlib.suppress(OSError):
                connection.recv(65536)
            connection.close()
            self.attempts += 1


def core(project: NodeProject, url: str, key: str, op: str, **request) -> dict:
    return project.run("core.mjs", json.dumps({"op": op, "url": url, "key": key, **request}))


def start_core(project: NodeProject, url: str, key: str, op: str, **request):
    return project.start("core.mjs", json.dumps({"op": op, "url": url, "key": key, **request}))


def test_the_version_is_the_packages_and_is_sent_in_the_user_agent(node_project: NodeProject):
    version = json.loads((PACKAGE / "package.json").read_text())["version"]
    seen: list[str] = []

    class Recording(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(self.headers["User-Agent"])
            self.rfile.read(int(self.headers["Content-Length"]))
            body = json.dumps({"decision": "allow", "tool_args": {"q": 1}, "reason": "", "confirmation_id": None})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Recording)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        reported = core(node_project, url, "k", "version")
        decided = core(node_project, url, "k", "pre_tool_use", session="s-1", tool="Read", args={"q": 1})
    finally:
        server.shutdown()
        server.server_close()

    assert version == "0.4.0"
    assert reported == {"version": version, "user_agent": f"approval-gateway-client-js/{version}"}
    assert decided["allowed"] and seen == [f"approval-gateway-client-js/{version}"]


def test_an_allowed_call_is_run_and_its_result_reported(node_project: NodeProject, live_gateway, coder_key):
    done = core(
        node_project, live_gateway.url, coder_key, "run_and_report",
        session="s-1", tool="Read", args={"file_path": "/etc/hosts"}, call_id="call_1", result="127.0.0.1 localhost",
    )  # fmt: skip

    assert done["decision"]["allowed"] and done["decision"]["is_decision"]
    assert done["decision"]["idempotency_key"].startswith("gwc-")
    assert done["reported"]["result"] == "127.0.0.1 localhost"
    call = ToolCall.objects.get()
    assert (call.tool_call_id, call.outcome, call.result) == ("call_1", "success", "127.0.0.1 localhost")
    assert call.ran_args == {"file_path": "/etc/hosts"}
    assert call.idempotency_key == done["decision"]["idempotency_key"]


def test_it_waits_across_long_poll_rounds_for_an_approval_with_the_rewritten_arguments(
    node_project: NodeProject, live_gateway, gateway_requests, coder_key, approver
):
    approver.decides("approve", when=in_second_wait_round(gateway_requests))

    decided = core(
        node_project, live_gateway.url, coder_key, "pre_tool_use",
        client={"longPoll": 1}, session="s-1", tool="pay", args={"amount": 900},
    )  # fmt: skip

    assert decided["allowed"]
    assert decided["reason"] == "approved by web:alice"
    assert decided["tool_args"] == {"amount": 100}  # the `cap` hook's rewrite
    assert decided["confirmation_id"] == str(ConfirmationRequest.objects.get().pk)
    assert_pending_rounds_then(answers(gateway_requests, decided["confirmation_id"]), "approved", "allow")


def test_it_keeps_waiting_across_a_gateway_restart_and_asks_only_once(
    node_project: NodeProject, restartable_gateway, coder_key
):
    gateway = restartable_gateway.start()
    agent = start_core(
        node_project, gateway.url, coder_key, "pre_tool_use",
        client={"longPoll": 1}, session="s-1", tool="Bash", args={"command": "make deploy"},
    )  # fmt: skip
    try:
        confirmation_id = parked_on(gateway, server=1)
        gateway.stop()
        with DroppingPort(gateway.port) as outage:
            outage.wait_for_attempts(1)  # the client runs into the outage
        gateway.start()
        parked_on(gateway, server=2)
        decide(confirmation_id, "reject", reason="frozen")
        decided = agent.result()
    finally:
        agent.stop()

    assert decided["denied"] and not decided["unreachable"]
    assert decided["reason"] == "rejected by web:alice: frozen"
    assert ConfirmationRequest.objects.count() == 1  # reconnecting never asked twice
    after = answers(gateway.requests, server=2)
    assert after[-2:] == [("wait", "rejected"), ("ask", "deny")] and set(after[:-2]) <= {("wait", "pending")}


def test_a_call_asked_while_the_gateway_is_down_gets_its_answer_once_it_is_up(
    node_project: NodeProject, restartable_gateway, coder_key
):
    gateway = restartable_gateway  # not started yet
    with DroppingPort(gateway.port) as outage:
        agent = start_core(
            node_project, gateway.url, coder_key, "pre_tool_use",
            client={"reconnectFor": 30}, session="s-1", tool="Read", args={"file_path": "a"},
        )  # fmt: skip
        outage.wait_for_attempts(1)
    try:
        gateway.start()
        decided = agent.result()
    finally:
        agent.stop()

    assert decided["allowed"] and not decided["unreachable"]
    assert ToolCall.objects.count() == 1


def test_an_unreachable_gateway_denies_and_fail_open_allows(node_project: NodeProject, closed_port_url):
    ask = {"session": "s-1", "tool": "Bash", "args": {"command": "ls"}}
    closed = core(node_project, closed_port_url, "k", "pre_tool_use", client={"reconnectFor": 0.5}, **ask)
    open_client = {"reconnectFor": 0.5, "failOpen": True}
    opened = core(node_project, closed_port_url, "k", "pre_tool_use", client=open_client, **ask)

    assert (closed["decision"], closed["unreachable"]) == ("deny", True)
    assert closed["reason"].startswith(f"denied: the gateway at {closed_port_url} could not be reached (")
    assert closed["reason"].endswith("; failing closed")
    assert (opened["decision"], opened["unreachable"], opened["tool_args"]) == ("allow", True, {"command": "ls"})


def test_a_call_still_pending_at_the_deadline_is_denied_and_its_key_picks_up_a_later_approval(
    node_project: NodeProject, live_gateway, coder_key
):
    agent = start_core(
        node_project, live_gateway.url, coder_key, "pre_tool_use_twice",
        session="s-1", tool="Bash", args={"command": "git push"}, options={"maxWait": 1},
    )  # fmt: skip
    try:
        (first,) = wait_until(lambda: agent.lines(), 60, "the first answer")
        first = first["first"]
        decide(first["confirmation_id"], "approve")
        agent.send()
        again = agent.result()["again"]
    finally:
        agent.stop()

    assert (first["decision"], first["still_pending"]) == ("deny", True)
    assert "approval is still pending after" in first["reason"]
    assert (again["decision"], again["confirmation_id"]) == ("allow", first["confirmation_id"])
    assert again["idempotency_key"] == first["idempotency_key"]
    assert ConfirmationRequest.objects.count() == 1


def test_a_question_is_answered_with_its_typed_answer(node_project: NodeProject, live_gateway, coder_key):
    agent = start_core(
        node_project, live_gateway.url, coder_key, "ask",
        client={"longPoll": 1}, question="What should I order?", schema=FORM,
        options={"channel": "web", "approvers": ["alice"], "sessionId": "s-1"},
    )  # fmt: skip
    try:
        question_id = the_question()
        wait_until(lambda: parked(question_id), what="the client to wait")
        answer(question_id, {"vendor": "Globex", "budget": 1200})
        asked = agent.result()
    finally:
        agent.stop()

    assert asked == {"answer": {"vendor": "Globex", "budget": 1200}}


def test_a_question_nobody_answers_in_time_rejects_with_no_answer(node_project: NodeProject, live_gateway, coder_key):
    asked = core(
        node_project, live_gateway.url, coder_key, "ask",
        question="Deploy now?", schema={"type": "boolean"}, options={"maxWait": 1},
    )  # fmt: skip

    assert (asked["error"], asked["status_of_answer"]) == ("NoAnswer", "pending")
    assert "is still pending at the deadline; nobody answered yet" in asked["message"]


def test_errors_carry_the_contracts_status_code_and_details(node_project: NodeProject, live_gateway, coder_key):
    unknown_key = core(node_project, live_gateway.url, "gw_nope", "pre_tool_use", session="s-1", tool="Read", args={})
    invalid = core(node_project, live_gateway.url, coder_key, "pre_tool_use", session="s-1", tool="", args={})
    nobody = "00000000-0000-4000-8000-000000000000"
    missing = core(node_project, live_gateway.url, coder_key, "get_confirmation", id=nobody)

    assert (unknown_key["error"], unknown_key["status"], unknown_key["code"]) == ("Unauthorized", 401, "unauthorized")
    assert (invalid["error"], invalid["status"], invalid["code"]) == ("InvalidRequest", 400, "invalid")
    assert "tool_name" in invalid["details"]
    assert (missing["error"], missing["status"], missing["code"]) == ("NotFound", 404, "not_found")


def test_the_other_events_and_the_confirmation_calls(node_project: NodeProject, live_gateway, coder_key):
    events = core(node_project, live_gateway.url, coder_key, "events", session="s-events")
    pending = core(
        node_project, live_gateway.url, coder_key, "pre_tool_use",
        session="s-1", tool="Bash", args={"command": "ls"}, options={"maxWait": 0},
    )  # fmt: skip
    confirmation_id = pending["confirmation_id"]
    read = core(node_project, live_gateway.url, coder_key, "get_confirmation", id=confirmation_id)
    waited = core(node_project, live_gateway.url, coder_key, "wait", id=confirmation_id, timeout=0)
    cancelled = core(node_project, live_gateway.url, coder_key, "cancel", id=confirmation_id)
    again = core(node_project, live_gateway.url, coder_key, "cancel", id=confirmation_id)

    assert events["session_start"]["decision"] == "allow" and events["pre_turn"]["decision"] == "allow"
    assert events["post_turn"]["side_effects"] == [] and events["session_end"]["side_effects"] == []
    assert pending["still_pending"]
    assert (read["confirmation"]["status"], read["confirmation"]["tool_name"]) == ("pending", "Bash")
    assert waited["confirmation"]["status"] == "pending"
    assert cancelled["confirmation"]["status"] == "cancelled"
    assert (again["error"], again["code"]) == ("AlreadyDecided", "already_decided")


def test_the_root_import_needs_no_framework(node_project: NodeProject, tmp_path: Path):
    project = tmp_path / "bare"
    project.mkdir()
    (project / "package.json").write_text(json.dumps({"name": "bare", "private": True, "type": "module"}))
    subprocess.run([*INSTALL, str(node_project.tarball)], cwd=project, check=True, capture_output=True, timeout=300)
    program = (
        "const client = await import('@approval-gateway/client');"
        "const made = new client.GatewayClient('http://127.0.0.1:1', 'k');"
        "let adapter = 'loaded';"
        "try { await import('@approval-gateway/client/ai-sdk'); } catch (e) { adapter = e.code + ' ' + e.message; }"
        "console.log(JSON.stringify({version: client.VERSION, base: made.baseUrl, adapter}));"
    )
    done = subprocess.run(
        ["node", "--input-type=module", "-e", program], cwd=project, capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert (said["version"], said["base"]) == ("0.4.0", "http://127.0.0.1:1")
    assert said["adapter"].startswith("ERR_MODULE_NOT_FOUND Cannot find package 'ai'")
    assert not (project / "node_modules" / "ai").exists()


def test_a_typescript_users_code_type_checks_against_the_installed_declarations(node_project: NodeProject):
    # A user's usual settings (`tsc --init`'s skipLibCheck: their code is checked, not every library's
    # declarations; ours are tsc's own output of sources it checked strictly when the package was built).
    config = {
        "compilerOptions": {
            "target": "ES2022", "module": "NodeNext", "moduleResolution": "NodeNext", "strict": True,
            "noEmit": True, "skipLibCheck": True, "types": ["node"],
        },
        "files": ["typed_agent.ts"],
    }  # fmt: skip
    (node_project.path / "tsconfig.typed.json").write_text(json.dumps(config))
    tsc = node_project.path / "node_modules" / ".bin" / "tsc"

    done = subprocess.run(
        [str(tsc), "-p", "tsconfig.typed.json"], cwd=node_project.path, capture_output=True, text=True, timeout=300
    )

    assert done.returncode == 0, done.stdout + done.stderr
