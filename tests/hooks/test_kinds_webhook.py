"""The `webhook` kind over the agent API, against a policy service faked at the HTTP boundary:
a local server that records what it was sent and answers as scripted."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from standardwebhooks.webhooks import Webhook

from approvals.models import ToolCall
from tests.conftest import apply_config, make_agent_client
from tests.hooks.policy_support import apply_example

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


class PolicyService:
    """A fake policy service: records each request; answers with `status`, `body` after `delay` seconds."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.status, self.body, self.delay = 200, "", 0.0
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers["content-length"])).decode()
                service.requests.append({"path": self.path, "headers": dict(self.headers), "body": raw})
                time.sleep(service.delay)
                payload = service.body if isinstance(service.body, str) else json.dumps(service.body)
                self.send_response(service.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload.encode())))
                self.end_headers()
                self.wfile.write(payload.encode())

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/check"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, body, status: int = 200, delay: float = 0.0) -> None:
        self.status, self.body, self.delay = status, body, delay

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def policy_service():
    service = PolicyService()
    yield service
    service.close()


@pytest.fixture
def opa_bot(live_gateway, transactional_db, policy_service):
    """examples/policies/webhook.yaml with its URL and secret pointing at the fake service."""
    environ = {"POLICY_WEBHOOK_URL": policy_service.url, "POLICY_WEBHOOK_SECRET": SECRET}
    apply_example("webhook", environ)
    return make_agent_client(live_gateway, "opa-bot")


def test_the_example_posts_the_event_signed_like_decision_webhooks(opa_bot, policy_service):
    policy_service.answer({"decision": "allow", "reason": "fine"})

    body = opa_bot.pre_tool_use("crm__search", {"q": "acme"}, user_id="u-1", metadata={"org": "acme"}, tool_call_id="c1").json()

    assert (body["decision"], body["reason"]) == ("allow", "fine")
    sent = policy_service.requests[0]
    event = Webhook(SECRET).verify(sent["body"], sent["headers"])  # raises if the signature is wrong
    assert event["hook_event_name"] == "PreToolUse"
    assert (event["hook"], event["agent"], event["session_id"], event["user_id"]) == ("policy-service", "opa-bot", "s-1", "u-1")
    assert (event["tool_name"], event["tool_input"], event["tool_use_id"]) == ("crm__search", {"q": "acme"}, "c1")
    assert event["metadata"] == {"org": "acme"}


def test_the_example_denies_with_the_services_reason(opa_bot, policy_service):
    policy_service.answer({"decision": "deny", "reason": "not during the freeze"})

    body = opa_bot.pre_tool_use("pay", {"amount": 5}).json()

    assert (body["decision"], body["reason"]) == ("deny", "not during the freeze")
    assert ToolCall.objects.get().decided_by_hook == "policy-service"


def test_the_example_runs_with_the_args_the_service_rewrote(opa_bot, policy_service):
    policy_service.answer({"decision": "allow", "tool_args": {"amount": 100}})

    assert opa_bot.pre_tool_use("pay", {"amount": 5000}).json()["tool_args"] == {"amount": 100}


def test_the_example_reads_claude_codes_answer_shape(opa_bot, policy_service):
    policy_service.answer(
        {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": "blocked by OPA",
            }
        }
    )

    assert opa_bot.pre_tool_use("pay", {}).json()["reason"] == "blocked by OPA"


def test_the_example_takes_an_empty_answer_as_no_opinion(opa_bot, policy_service):
    policy_service.answer("")

    body = opa_bot.pre_tool_use("pay", {}).json()

    assert body["decision"] == "allow"
    assert body["hook_decisions"][0]["decision"] == "none"


def test_the_example_denies_naming_the_hook_when_the_service_is_slower_than_its_budget(opa_bot, policy_service):
    policy_service.answer({"decision": "allow"}, delay=2.0)

    started = time.monotonic()
    body = opa_bot.pre_tool_use("pay", {}).json()

    assert time.monotonic() - started < 1.5  # the 500 ms budget, not the service's 2 s
    assert body["decision"] == "deny"
    assert body["reason"] == f"hook policy-service failed: no answer from {policy_service.url} within 500 ms"


@pytest.mark.parametrize(
    ("status", "answer", "why"),
    [
        (500, {"decision": "allow"}, "answered 500"),
        (200, "<html>oops</html>", "unreadable answer"),
        (200, {"decision": "maybe"}, "unknown decision 'maybe'"),
    ],
)
def test_the_example_denies_naming_the_hook_on_an_error_status_or_an_unreadable_answer(
    opa_bot, policy_service, status, answer, why
):
    policy_service.answer(answer, status=status)

    body = opa_bot.pre_tool_use("pay", {}).json()

    assert body["decision"] == "deny"
    assert body["reason"].startswith("hook policy-service failed: ")
    assert why in body["reason"]


def test_an_unreachable_service_denies_naming_the_hook(live_gateway, transactional_db):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    environ = {"POLICY_WEBHOOK_URL": f"http://127.0.0.1:{port}/"}
    apply_example("webhook", environ)
    agent = make_agent_client(live_gateway, "opa-bot")

    body = agent.pre_tool_use("pay", {}).json()

    assert body["decision"] == "deny"
    assert body["reason"].startswith(f"hook policy-service failed: POST http://127.0.0.1:{port}/ failed: ConnectError")


def webhook_agent(live_gateway, url: str, **keys) -> object:
    extra = "".join(f", {key}: {json.dumps(value)}" for key, value in keys.items())
    apply_config(
        f"""
channels: []
agents:
  - name: hooked
    hooks: [{{kind: webhook, name: svc, url: "{url}"{extra}}}]
"""
    )
    return make_agent_client(live_gateway, "hooked")


def test_fail_open_lets_the_call_through_when_the_service_fails(live_gateway, transactional_db, policy_service):
    agent = webhook_agent(live_gateway, policy_service.url, event="pre_tool_use", on_error="fail_open")
    policy_service.answer({}, status=503)

    body = agent.pre_tool_use("pay", {}).json()

    assert body["decision"] == "allow"
    assert body["side_effects"] == ["hook_error:svc"]
    assert body["hook_decisions"][0]["decision"] == "none"


def test_a_secret_without_the_whsec_prefix_signs_with_its_own_bytes(live_gateway, transactional_db, policy_service):
    agent = webhook_agent(live_gateway, policy_service.url, event="pre_tool_use", secret="plain secret!")
    policy_service.answer({"decision": "allow"})

    agent.pre_tool_use("pay", {})

    sent = policy_service.requests[0]
    assert Webhook(b"plain secret!").verify(sent["body"], sent["headers"])["tool_name"] == "pay"


def test_without_a_secret_the_event_is_sent_unsigned(live_gateway, transactional_db, policy_service):
    agent = webhook_agent(live_gateway, policy_service.url, event="pre_tool_use")
    policy_service.answer({"decision": "allow"})

    agent.pre_tool_use("pay", {})

    assert "webhook-signature" not in {key.lower() for key in policy_service.requests[0]["headers"]}


def test_a_webhook_can_decide_another_event(live_gateway, transactional_db, policy_service):
    agent = webhook_agent(live_gateway, policy_service.url, event="session_start", secret=SECRET)
    policy_service.answer({"decision": "deny", "reason": "this user may not start sessions"})

    answer = agent.http.post("/api/v1/hooks/session-start", json={"session_id": "s-9", "user_id": "u-1"}).json()

    assert (answer["decision"], answer["reason"]) == ("deny", "this user may not start sessions")
    event = Webhook(SECRET).verify(policy_service.requests[0]["body"], policy_service.requests[0]["headers"])
    assert (event["hook_event_name"], event["session_id"]) == ("SessionStart", "s-9")


def test_an_approvers_edit_judged_again_is_sent_marked_check_only(live_gateway, transactional_db, policy_service):
    from approvals import services
    from gateway_contract import Callback

    apply_config(f"""
channels: [{{name: web, kind: web}}]
agents:
  - name: bot
    hooks:
      - {{kind: webhook, name: svc, event: pre_tool_use, url: "{policy_service.url}", secret: "{SECRET}"}}
      - {{kind: approval_gate, name: gate, channel: web, approvers: [alice], allow_edit: [amount]}}
""")
    agent = make_agent_client(live_gateway, "bot")
    policy_service.answer({"decision": "allow"})
    asked = agent.pre_tool_use("pay", {"amount": 10}).json()

    edited = Callback(
        confirmation_id=asked["confirmation_id"], decision="approve", actor="alice", typed_edits={"amount": "20"}
    )
    assert services.confirmation_respond(channel_name="web", callback=edited).code == "decided"

    first, again = (Webhook(SECRET).verify(sent["body"], sent["headers"]) for sent in policy_service.requests)
    assert ("check_only" in first, first["tool_input"]) == (False, {"amount": 10})
    assert (again["check_only"], again["tool_input"]) == (True, {"amount": 20})
