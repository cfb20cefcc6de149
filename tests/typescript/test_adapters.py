"""The TypeScript adapters, installed from the built tarball into a new npm project, on the real frameworks
(the Vercel AI SDK, the OpenAI Agents SDK for JS, LangGraph.js) whose model is the fake OpenAI API, against
the live gateway: an allowed call runs and is reported; a call approved on the web approval page runs with
the approver's edited arguments (and the hook's rewrite, and the masked card from the agent's own call —
tests.approved_call); a rejection's reason is what the model reads; a gateway that is down means the tool
does not run (fail closed). Each agent program is tests/typescript/agents/<adapter>_agent.mjs."""

from __future__ import annotations

import threading
import time

import pytest

from approvals.models import ConfirmationRequest, ToolCall
from tests.approved_call import APPROVED, PROPOSED, SHOWN, TOOL, configure
from tests.fakes.openai_api import FakeOpenAI
from tests.gateway_client.test_ask import answer, the_question
from tests.integrations.test_adapters import ABORT, RECOVER, RETRY
from tests.support import SignedIn
from tests.typescript.conftest import NodeProject

pytestmark = pytest.mark.django_db(transaction=True)

ADAPTERS = ["ai_sdk", "openai_agents", "langgraph"]
# The gateway session each adapter names for a run of the allowed call's program (docs/integrations/typescript-*.md):
# the AI SDK's conversation, the Agents SDK's run (tracing is off), the LangGraph thread the program names.
SESSIONS = {"ai_sdk": "ai-sdk-", "openai_agents": "openai-agents-run-", "langgraph": "langgraph-thread-9"}
PASSWORD = "correct horse battery staple"


@pytest.fixture
def alice(transactional_db):
    """alice approves on the web page (the gate of tests.approved_call asks her)."""
    from django.contrib.auth.models import User

    return User.objects.create_user("alice", password=PASSWORD)


class PageApprover:
    """alice at the approval page, in another thread: once a request is pending she opens it (signed in,
    over HTTP, as a browser without JavaScript) and approves it with her edits, or rejects it with a reason."""

    def __init__(self, gateway_url: str, decision: str, *, edits: dict[str, str] | None = None, reason: str = ""):
        self.fields = {"decision": decision, "reason": reason, **{f"edit.{k}": v for k, v in (edits or {}).items()}}
        self.gateway_url = gateway_url
        self.said: list[str] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="page-approver", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from django.db import connection

        try:
            deadline = time.monotonic() + 60
            pending = None
            while pending is None:
                if time.monotonic() > deadline:
                    raise AssertionError("no request appeared to decide")
                pending = ConfirmationRequest.objects.filter(status="pending").order_by("created_at").first()
                time.sleep(0.05)
            page = SignedIn(self.gateway_url, "alice", PASSWORD)
            try:
                assert page.get(f"/approvals/{pending.pk}/").status_code == 200
                response = page.post(f"/approvals/{pending.pk}/", self.fields)
                assert response.status_code == 200, response.text[:2000]
                self.said = SignedIn.messages(response)
            finally:
                page.close()
        except BaseException as exc:
            self.error = exc
        finally:
            connection.close()

    def join(self) -> list[str]:
        self.thread.join(70)
        assert not self.thread.is_alive(), "alice never decided"
        if self.error is not None:
            raise self.error
        return self.said


def agent_env(gateway_url: str, key: str, fake_openai: FakeOpenAI, **extra: str) -> dict[str, str]:
    return {
        "GATEWAY_URL": gateway_url,
        "GATEWAY_API_KEY": key,
        "OPENAI_BASE_URL": fake_openai.base_url,
        "OPENAI_API_KEY": "sk-test-not-a-real-key",
        **extra,
    }


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_an_allowed_call_runs_and_its_result_is_reported(
    adapter, node_project: NodeProject, live_gateway, fake_openai: FakeOpenAI, alice
):
    key = configure(f"ts-{adapter}".replace("_", "-"))
    request = f"[{adapter}] what is my balance?"
    fake_openai.script(request, [[("get_balance", {})]])

    env = agent_env(live_gateway.url, key, fake_openai, LANGGRAPH_THREAD_ID="thread-9")
    ran = node_project.run(f"{adapter}_agent.mjs", request, env=env)

    assert ran["final"] == "FINAL: get_balance: balance: 1200 EUR"
    assert ran["paid"] == []
    call = ToolCall.objects.get()
    assert (call.tool_name, call.outcome, call.result, call.confirmation) == (
        "get_balance",
        "success",
        "balance: 1200 EUR",
        None,
    )
    assert call.session_id.startswith(SESSIONS[adapter])
    assert call.metadata["source"] == adapter.replace("_", "-")


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_call_approved_on_the_web_page_runs_with_the_approvers_edited_arguments(
    adapter, node_project: NodeProject, live_gateway, fake_openai: FakeOpenAI, alice
):
    key = configure(f"ts-{adapter}".replace("_", "-"))
    request = f"[{adapter}] pay INV-7"
    fake_openai.script(request, [[(TOOL, PROPOSED)]])

    agent = node_project.start(f"{adapter}_agent.mjs", request, env=agent_env(live_gateway.url, key, fake_openai))
    try:
        said = PageApprover(live_gateway.url, "approve", edits={"memo": "laptop for Dana"}).join()
        ran = agent.result()
    finally:
        agent.stop()

    assert said == ["Approved with your edits."]
    assert ran["paid"] == [APPROVED]  # the hook's rewrite, alice's edit, and the card from the agent's own call
    assert ran["final"] == "FINAL: pay_invoice: paid INV-7"
    call = ToolCall.objects.get()
    assert call.confirmation.decided_by == "web:alice"
    assert call.confirmation.approved_args == SHOWN
    assert (call.outcome, call.ran_args, call.result) == ("success", SHOWN, "paid INV-7")


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_rejection_is_told_to_the_model_and_the_tool_never_runs(
    adapter, node_project: NodeProject, live_gateway, fake_openai: FakeOpenAI, alice
):
    key = configure(f"ts-{adapter}".replace("_", "-"))
    request = f"[{adapter}] pay INV-8"
    fake_openai.script(request, [[(TOOL, {**PROPOSED, "invoice_id": "INV-8"})]])

    agent = node_project.start(f"{adapter}_agent.mjs", request, env=agent_env(live_gateway.url, key, fake_openai))
    try:
        said = PageApprover(live_gateway.url, "reject", reason="Over budget this quarter").join()
        ran = agent.result()
    finally:
        agent.stop()

    assert said == ["Rejected."]
    assert ran["paid"] == []
    seen = fake_openai.outputs_seen(request)[TOOL]
    assert seen == "pay_invoice was not run: rejected by web:alice: Over budget this quarter"
    assert ran["final"] == f"FINAL: pay_invoice: {seen}"
    assert ConfirmationRequest.objects.get().status == "rejected"


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_gateway_that_is_down_means_the_tool_does_not_run(
    adapter, node_project: NodeProject, fake_openai: FakeOpenAI, closed_port_url
):
    request = f"[{adapter}] pay INV-9 while the gateway is down"
    fake_openai.script(request, [[(TOOL, {**PROPOSED, "invoice_id": "INV-9"})]])

    env = agent_env(closed_port_url, "gw_not-checked", fake_openai, GATEWAY_RECONNECT_FOR="1")
    ran = node_project.run(f"{adapter}_agent.mjs", request, env=env)

    assert ran["paid"] == []
    seen = fake_openai.outputs_seen(request)[TOOL]
    assert seen.startswith(f"pay_invoice was not run: denied: the gateway at {closed_port_url} could not be reached (")
    assert seen.endswith("); failing closed")
    assert "ECONNREFUSED" in seen
    assert ran["final"] == f"FINAL: pay_invoice: {seen}"


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_the_model_asks_a_person_and_gets_the_typed_answer_without_a_gated_call(
    adapter, node_project: NodeProject, live_gateway, fake_openai: FakeOpenAI, alice
):
    key = configure(f"ts-{adapter}".replace("_", "-"))  # questions go where its first gate asks: alice, on the web
    request = f"[{adapter}] which vendor?"
    asked = {"question": "Which vendor for the laptops?", "choices": ["Acme", "Globex"], "several": None}
    fake_openai.script(request, [[("ask_human", asked)]])

    agent = node_project.start(f"{adapter}_agent.mjs", request, env=agent_env(live_gateway.url, key, fake_openai))
    try:
        question_id = the_question()
        answer(question_id, "Globex")
        ran = agent.result()
    finally:
        agent.stop()

    assert fake_openai.outputs_seen(request) == {"ask_human": '"Globex" (answered by alice)'}
    assert ran["final"] == 'FINAL: ask_human: "Globex" (answered by alice)'
    question = ConfirmationRequest.objects.get()
    assert (question.kind, question.status, question.decided_by) == ("question", "answered", "web:alice")
    assert question.session_id.startswith(SESSIONS[adapter].removesuffix("thread-9"))
    assert not ToolCall.objects.exists()  # asking is not a call to gate


# --------------------------------------------------------------------------- a failing tool and tool-error


def configure_hooks(agent: str, hooks: list[dict]) -> str:
    """`agent` with these hooks (and the web channel); a new API key for it."""
    import yaml

    from approvals import services
    from approvals.models import Agent
    from tests.conftest import apply_config

    config = {"channels": [{"name": "web", "kind": "web"}], "agents": [{"name": agent, "hooks": hooks}]}
    apply_config(yaml.safe_dump(config))
    return services.api_key_create(agent=Agent.objects.get(name=agent))[1]


def test_the_ai_sdk_runs_a_failing_tool_again_when_the_gateway_says_retry(
    node_project: NodeProject, live_gateway, fake_openai: FakeOpenAI
):
    key = configure_hooks("ts-crm", [RETRY])
    request = "[ai_sdk] look up c-1 (flaky)"
    fake_openai.script(request, [[("lookup", {"customer_id": "c-1"})]])

    env = agent_env(live_gateway.url, key, fake_openai, FLAKY_FAILURES="1")
    ran = node_project.run("crm_agent.mjs", "ai_sdk", request, env=env)

    assert ran["calls"] == ["c-1", "c-1"]
    assert ran["final"] == "FINAL: lookup: profile of c-1"
    call = ToolCall.objects.get()
    assert (call.outcome, call.result) == ("success", "profile of c-1")


def test_langgraph_gives_the_model_the_gateways_result_when_it_recovers_a_failed_tool(
    node_project: NodeProject, live_gateway, fake_openai: FakeOpenAI
):
    key = configure_hooks("ts-crm", [RECOVER])
    request = "[langgraph] look up c-3 (recover)"
    fake_openai.script(request, [[("lookup", {"customer_id": "c-3"})]])

    ran = node_project.run("crm_agent.mjs", "langgraph", request, env=agent_env(live_gateway.url, key, fake_openai))

    assert ran["calls"] == ["c-3"]
    assert fake_openai.outputs_seen(request) == {"lookup": "cached profile"}
    assert ran["final"] == "FINAL: lookup: cached profile"
    call = ToolCall.objects.get()
    assert (call.outcome, call.result) == ("recovered", "cached profile")


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_the_run_stops_when_the_gateway_aborts_a_failed_tool(
    adapter, node_project: NodeProject, live_gateway, fake_openai: FakeOpenAI
):
    key = configure_hooks("ts-crm", [ABORT])
    request = f"[{adapter}] look up c-2 (abort)"
    fake_openai.script(request, [[("lookup", {"customer_id": "c-2"})]])

    ran = node_project.run("crm_agent.mjs", adapter, request, env=agent_env(live_gateway.url, key, fake_openai))

    stopped = "ToolRunAborted: lookup failed and the gateway stopped the run: the CRM is being migrated"
    if adapter == "ai_sdk":  # the model is told, and `stopWhen: gatewayStopped` ends the run after that step
        assert (ran["final"], ran["stopped_by"]) == ("", [stopped])
    else:  # the run fails with it (the Agents SDK wraps it: `ToolCallError: Failed to run function tools: …`)
        assert stopped in ran["error"]
    assert ran["calls"] == ["c-2"]
    call = ToolCall.objects.get()
    assert (call.outcome, call.result["action"]) == ("error", "abort")
