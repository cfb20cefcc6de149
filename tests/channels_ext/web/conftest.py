"""People for the web page's tests, and a pending request whose agent is held waiting."""

from __future__ import annotations

import os
import re
import threading
import time

import httpx
import pytest

from tests.conftest import apply_config, make_agent_client
from tests.oidc.provider import LocalProvider

PASSWORD = "correct horse battery staple"


@pytest.fixture
def people(transactional_db):
    """alice and bob approve purchasing-bot's payments; carol is signed in but no approver;
    olga is staff who may decide any request; sam is staff without that right."""
    from django.contrib.auth.models import Permission, User

    made = {name: User.objects.create_user(name, password=PASSWORD) for name in ("alice", "bob", "carol")}
    made["olga"] = User.objects.create_user("olga", password=PASSWORD, is_staff=True)
    made["olga"].user_permissions.add(
        Permission.objects.get(codename="change_confirmationrequest"),
        Permission.objects.get(codename="view_confirmationrequest"),
    )
    made["sam"] = User.objects.create_user("sam", password=PASSWORD, is_staff=True)
    return made


@pytest.fixture
def public_url(settings, live_gateway):
    """Links in cards and API answers point at the live gateway, as GATEWAY_PUBLIC_URL does in production."""
    settings.GATEWAY_PUBLIC_URL = live_gateway.url
    return live_gateway.url


class HeldCall:
    """The agent's pre-tool-use call with `wait_seconds`, held by the gateway in a thread until decided."""

    def __init__(self, agent, tool_name: str, tool_args: dict, wait_seconds: int = 30, **extra):
        from approvals.models import ConfirmationRequest

        self.agent = agent
        self.response: httpx.Response | None = None
        known = set(ConfirmationRequest.objects.values_list("pk", flat=True))
        self.thread = threading.Thread(
            target=self._call, args=(tool_name, tool_args, wait_seconds, extra), name="held-agent-call", daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + 15
        while True:
            new = ConfirmationRequest.objects.exclude(pk__in=known).values_list("pk", flat=True).first()
            if new is not None:
                self.confirmation_id = str(new)
                break
            if time.monotonic() > deadline:
                raise AssertionError("the agent's call did not create a confirmation request")
            time.sleep(0.05)

    def _call(self, tool_name, tool_args, wait_seconds, extra) -> None:
        self.response = self.agent.pre_tool_use(tool_name, tool_args, wait_seconds=wait_seconds, **extra)

    def link(self) -> str:
        """The approval page's link, as the agent API hands it out."""
        answer = httpx.get(
            str(self.agent.http.base_url.join(f"/api/v1/confirmations/{self.confirmation_id}")),
            headers={"Authorization": f"Bearer {self.agent.key}"},
        )
        return answer.json()["url"]

    def result(self, timeout: float = 35) -> dict:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the agent is still waiting"
        assert self.response is not None and self.response.status_code == 200, self.response
        return self.response.json()

    def still_waiting(self) -> bool:
        return self.thread.is_alive()


def inbox_shown(html: str) -> dict[str, str]:
    """The inbox's checkboxes as drawn: {request id: the value its checkbox posts, `<id>:<digest of the row>`}."""
    return {value.split(":")[0]: value for value in re.findall(r'name="ids" value="([^"]+)"', html)}


def shown_as_now(confirmation_id) -> str:
    """The checkbox value a row of this request would carry if drawn now (a hand-made form's best forgery)."""
    from approvals import selectors
    from approvals.models import ConfirmationRequest

    confirmation = ConfirmationRequest.objects.get(pk=confirmation_id)
    return f"{confirmation.pk}:{selectors.confirmation_shown_digest(confirmation)}"


# --------------------------------------------------------------------------- the inbox

RISK_BY_AMOUNT = """'args.amount > 1000 ? "high" : (args.amount > 100 ? "medium" : "low")'"""
TRIAGE_CONFIG = f"""
channels:
  - {{name: web, kind: web}}
agents:
  - name: billing-bot
    hooks:
      - {{kind: approval_gate, name: pay-gate, tools: ["*"], channel: web, approvers: [alice], timeout_seconds: 3600, risk: {RISK_BY_AMOUNT}}}
  - name: deploy-bot
    hooks:
      - {{kind: approval_gate, name: ship-gate, tools: ["*"], channel: web, approvers: [alice], timeout_seconds: 3600, risk: {RISK_BY_AMOUNT}}}
  - name: mail-bot
    hooks:
      - {{kind: approval_gate, name: mail-gate, tools: ["*"], channel: web, approvers: [bob], timeout_seconds: 3600}}
"""


@pytest.fixture
def bots(live_gateway, transactional_db):
    """The inbox's triage: billing-bot and deploy-bot ask alice (risk by amount), mail-bot asks bob (medium)."""
    from django.contrib.auth.models import User

    for name in ("alice", "bob"):
        User.objects.create_user(name, password=PASSWORD)
    apply_config(TRIAGE_CONFIG)
    clients = {name: make_agent_client(live_gateway, name) for name in ("billing-bot", "deploy-bot", "mail-bot")}
    yield clients
    for client in clients.values():
        client.http.close()


def ask(bot, tool: str, **args) -> str:
    """A call `bot` is asked about (pending, for end user u-7): its confirmation id."""
    body = bot.pre_tool_use(tool, args, user_id="u-7").json()
    assert body["decision"] == "pending", body
    return body["confirmation_id"]


# --------------------------------------------------------------------------- the browser

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def browser():
    """One Chromium for this module. Playwright's sync API keeps an event loop on this thread,
    which Django would take for an async context; the test thread's ORM calls are plain sync."""
    from playwright.sync_api import sync_playwright

    if not os.path.exists(CHROMIUM):
        raise RuntimeError(f"{CHROMIUM} is missing: run scripts/ensure-browser.sh")
    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield chromium
            chromium.close()
    finally:
        if before is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before


@pytest.fixture
def new_page(browser):
    contexts = []

    def make():
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.set_default_timeout(10_000)
        contexts.append(context)
        return context.new_page()

    yield make
    for context in contexts:
        context.close()


def sign_in_from_the_link(page, link: str, username: str) -> None:
    """Open the link signed out; the gateway sends us to sign in, then back to the request."""
    page.goto(link)
    assert "/login/" in page.url
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(link)


# --------------------------------------------------------------------------- sign-in with an identity provider, teams

TEAMS_CONFIG = """
channels:
  - {name: payments-web, kind: web, team: payments}
  - {name: research-web, kind: web, team: research}
agents:
  - name: purchasing-bot
    team: payments
    hooks:
      - {kind: approval_gate, name: finance-gate, tools: ["oa__*"], channel: payments-web, approvers: []}
  - name: lab-bot
    team: research
    hooks:
      - {kind: approval_gate, name: lab-gate, tools: ["lab__*"], channel: research-web, approvers: []}
"""
INVOICE = {"vendor": "ACME Office Supplies", "amount": 1250, "currency": "EUR"}


@pytest.fixture(scope="session")
def oidc_provider(live_gateway):
    provider = LocalProvider(redirect_uri=f"{live_gateway.url}/oidc/callback/")
    yield provider
    provider.stop()


@pytest.fixture
def idp(settings, oidc_provider):
    """The gateway configured for the local provider, as the GATEWAY_OIDC_* variables configure it."""
    for name, value in oidc_provider.gateway_settings().items():
        setattr(settings, name, value)
    return oidc_provider


@pytest.fixture
def teams(live_gateway, transactional_db):
    """Two teams whose members come from the IdP's groups (the directory's groups `payments` and
    `research`, each in its team); the default team closed (teams in use).
    A payment waits in payments' inbox, a sample order in research's."""
    from approvals.models import PeopleGroup, Team

    apply_config(TEAMS_CONFIG)
    Team.objects.update_or_create(name="default", defaults={"everyone": False})
    PeopleGroup.objects.create(name="payments", team=Team.objects.get(name="payments"))
    PeopleGroup.objects.create(name="research", team=Team.objects.get(name="research"))
    purchasing = make_agent_client(live_gateway, "purchasing-bot")
    lab = make_agent_client(live_gateway, "lab-bot")
    paying = purchasing.pre_tool_use("oa__purchase_pay", INVOICE).json()["confirmation_id"]
    sampling = lab.pre_tool_use("lab__order_samples", {"reagent": "Tris-HCl"}).json()["confirmation_id"]
    yield {"paying": paying, "sampling": sampling, "purchasing": purchasing, "lab": lab}
    purchasing.http.close()
    lab.http.close()


