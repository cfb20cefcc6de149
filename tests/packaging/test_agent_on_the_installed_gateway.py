"""Issue 34's "done when", nothing of the checkout on a path: the gateway started by `approval-gateway run`
from its own wheel (one new virtualenv), the OpenAI Agents example run from the client's wheel installed
with `[openai-agents]` (another new virtualenv), the model a local fake, and the payment approved on the
gateway's web page with an edit — the example pays the approved amount."""

from __future__ import annotations

import re
import time

import httpx
import pytest
import yaml

from tests.fakes.openai_api import FINAL_PREFIX, FakeOpenAI, fake_openai  # noqa: F401
from tests.gateway_client.installed import InstalledClient, installed_client
from tests.packaging.conftest import ROOT, Installed, free_port
from tests.packaging.test_server_wheel import Running, sign_in

DEV = {"GATEWAY_ALLOW_DEV_AUDIT_KEY": "1"}


@pytest.fixture(scope="session")
def client(tmp_path_factory, worker_id):
    yield from installed_client(tmp_path_factory, worker_id)


def agents_config() -> str:
    """examples/agents.yaml, its payment gate letting the approver change the amount."""
    config = yaml.safe_load((ROOT / "examples" / "agents.yaml").read_text())
    gate = config["agents"][0]["hooks"][0]
    assert gate["tools"] == ["pay_invoice"]
    gate["allow_edit"] = ["amount"]
    return yaml.safe_dump(config)


def approve_the_pending_payment(base: str, amount: str) -> str:
    """As the demo's admin on the approval page (a browser without JavaScript): wait for the payment to be
    pending in the inbox, open it, change the amount, approve. Returns the request's id."""
    person = httpx.Client(base_url=base, timeout=30)
    sign_in(person)
    deadline = time.monotonic() + 60
    while not (found := re.search(r'href="/approvals/([0-9a-f-]{36})/"', person.get("/approvals/").text)):
        assert time.monotonic() < deadline, "the payment never became pending"
        time.sleep(0.1)
    request_id = found.group(1)
    page = person.get(f"/approvals/{request_id}/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    decided = person.post(
        f"/approvals/{request_id}/",
        data={"csrfmiddlewaretoken": token, "decision": "approve", "reason": "", "edit.amount": amount},
    )
    assert decided.status_code in (200, 302), decided.text[:2000]
    return request_id


def test_the_openai_agents_example_from_the_client_wheel_is_approved_on_a_gateway_run_from_its_wheel(
    installed: Installed, client: InstalledClient, fake_openai: FakeOpenAI, tmp_path  # noqa: F811
):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    (tmp_path / "agents.yaml").write_text(agents_config())
    gateway = Running(installed, tmp_path, port)
    try:
        gateway.wait_for("Ctrl-C stops everything")
        applied = installed.gateway("apply-config", "agents.yaml", cwd=tmp_path, **DEV)
        assert applied.returncode == 0, applied.stderr
        key = installed.gateway("create-api-key", "payments-agent", cwd=tmp_path, **DEV).stdout.split()[-1]
        request = "[installed gateway] Pay invoice INV-9, 120 dollars"
        fake_openai.script(request, [[("pay_invoice", {"invoice_id": "INV-9", "amount": 120})]])
        agent = client.full.start(
            [str(client.full.python), "agent.py", request],
            GATEWAY_URL=base, GATEWAY_API_KEY=key, OPENAI_BASE_URL=fake_openai.base_url,
            OPENAI_API_KEY="sk-test-not-a-real-key", OPENAI_AGENTS_DISABLE_TRACING="1",
        )  # fmt: skip
        try:
            try:
                request_id = approve_the_pending_payment(base, "100")
            except (httpx.HTTPError, AssertionError) as failed:  # with what the gateway said
                raise AssertionError(f"{failed}\n--- approval-gateway run:\n{gateway.output()}") from failed
            stdout, stderr = agent.communicate(timeout=120)
        finally:
            agent.kill()
        record = httpx.get(f"{base}/api/v1/confirmations/{request_id}", headers={"Authorization": f"Bearer {key}"})
    finally:
        gateway.stop()

    assert agent.returncode == 0, stderr
    lines = stdout.splitlines()
    assert "PAID INV-9 100" in lines  # the amount the approver set on the page, not the model's 120
    assert lines[-1] == f"{FINAL_PREFIX}pay_invoice: paid INV-9"
    assert record.json()["status"] == "approved" and record.json()["decided_by"] == "web:admin"
    assert ROOT not in (client.full.home / "agent.py").resolve().parents  # the example ran from outside
