"""The contract every channel keeps, written once and run against each of them.

Like Django's `SessionTestsMixin`: `ChannelContract` holds the scenarios, and
each channel's `test_contract.py` subclasses it (`class TestSlackChannel(ChannelContract)`)
with a `driver` fixture that knows how that channel shows a request and how a
click reaches the gateway: a signed Slack interactivity request, an encrypted
and signed Feishu card callback, a form POST on the web approval page. What
the contract asserts is what an agent, an approver and the audit trail see.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from approvals import selectors, services
from approvals.models import ApproverResponse, ConfirmationEvent, ConfirmationRequest, Grant, Outbox, PersonIdentity, StandIn, ToolCall
from approvals.models import Person as DirectoryPerson
from approvals.tasks import expire_due
from tests.conftest import AgentClient
from tests.support import rewrite_request, wait_until

TOOL = "oa__purchase_pay"
# A deny rule of the agent's own: the gate may ask about any payment, but none over 5000 runs.
SPENDING_CAP = {
    "kind": "policy",
    "name": "spending-cap",
    "rules": [
        {"effect": "deny", "tools": [TOOL], "when": "args.amount > 5000", "reason": "payments over 5000 need the CFO"}
    ],
}


def gate_keys(keys: dict[str, Any]) -> str:
    """More keys of the gate, as YAML lines at a hook's indentation (JSON is YAML)."""
    return "".join(f"        {key}: {json.dumps(value)}\n" for key, value in keys.items())


def more_hooks(hooks: list[dict[str, Any]]) -> str:
    """More hooks of the agent after its gate, as YAML list items (JSON is YAML)."""
    return "".join(f"      - {json.dumps(hook)}\n" for hook in hooks)


def gated_agent_yaml(channel: str, approvers: tuple[str, ...], timeout_seconds: int, more_keys: str = "") -> str:
    """The config's `agents:` part: purchasing-bot, whose gate `finance-gate` asks `approvers` on `channel`
    about TOOL (`more_keys`: more of the gate's keys, as YAML lines)."""
    listed = ", ".join(json.dumps(who) for who in approvers)
    return f"""
agents:
  - name: purchasing-bot
    hooks:
      - kind: approval_gate
        name: finance-gate
        tools: ["{TOOL}"]
        channel: {channel}
        approvers: [{listed}]
        timeout_seconds: {timeout_seconds}
{more_keys}"""


def purchasing_gate(channel: str, approvers: list[str], *, timeout_seconds: int | None = 1800, more: str = "") -> str:
    """The config file's `agents:` part: purchasing-bot whose gate on TOOL asks `approvers` on `channel`
    (`more`: more of the gate's keys, as YAML lines, e.g. from `gate_keys`)."""
    return f"""
agents:
  - name: purchasing-bot
    hooks:
      - kind: approval_gate
        name: finance-gate
        tools: ["{TOOL}"]
        channel: {channel}
        approvers: {json.dumps(approvers)}
        timeout_seconds: {json.dumps(timeout_seconds)}
{more}"""


@dataclasses.dataclass(frozen=True)
class Person:
    """Someone in a channel: `id` as the channel knows them (what gates list as approvers),
    `decided_by` as the gateway records and reports a decision of theirs (channel-qualified:
    `slack:U…`, `feishu:ou_…`, `web:alice`), `name` their display name beside it."""

    id: str
    name: str
    decided_by: str

    @property
    def label(self) -> str:
        """How people and agents are told who decided: "alice (slack:U0ALICE)"."""
        return self.decided_by if self.name in ("", self.id, self.decided_by) else f"{self.name} ({self.decided_by})"


@dataclasses.dataclass(frozen=True)
class Told:
    """What came of one click: whether the gateway took it, and what the clicker was shown."""

    taken: bool  # the request was answered as a click (2xx / the form processed), whatever it decided
    text: str | None  # the sentence shown to the clicker (a note, a toast, a flash message); None if nothing


class ChannelDriver(Protocol):
    """One channel, deployed on the live gateway for the purchasing-bot's gate on TOOL."""

    approvers: tuple[Person, Person]
    outsider: Person
    # What a click delivered a second time is answered with; `{by}` is who decided.
    duplicate_told: str

    def deploy(
        self, *, timeout_seconds: int = 1800, gate: dict[str, Any] | None = None, hooks: list[dict[str, Any]] | None = None
    ) -> AgentClient:
        """Configure the channel and the gate (approvers: the two approvers; `gate`: more of its keys;
        `hooks`: more hooks of the agent, after the gate); the agent's client."""

    def card(self, confirmation_id: str) -> Any:
        """Wait until the request is shown to its approvers; a handle on what they see."""

    def click(self, card: Any, person: Person, decision: str, *, reason: str = "") -> Told:
        """`person` presses Approve or Reject (giving `reason` where the channel asks for one)."""

    def click_twice(self, card: Any, person: Person, decision: str) -> tuple[Told, Told]:
        """The same click delivered twice, as the vendor would redeliver it."""

    def forged_click(self, card: Any, person: Person, decision: str) -> int:
        """A click that does not come from the channel (unsigned, no CSRF token…); the HTTP status."""

    def edit(self, card: Any, person: Person, typed: dict[str, str]) -> Told:
        """`person` types new values (`{path: text}`) into the channel's edit form and approves;
        the other fields keep what the form shows."""

    def scope_buttons(self, card: Any) -> list[str]:
        """The texts of the card's "approve for a scope" buttons, in order."""

    def approve_for(self, card: Any, person: Person, scope: int) -> Told:
        """`person` presses the card's scope button number `scope`."""

    def expect_decided(
        self, card: Any, *, status: str, by: Person | None, reason: str = "", edited: bool = False
    ) -> None:
        """Wait until the card shows `status` (and who, and why, and that it was edited), with no buttons
        left; assert how it says so."""

    def expect_open(self, card: Any) -> None:
        """Assert the card still offers Approve and Reject."""


def request_state(confirmation_id: str) -> dict[str, Any]:
    """What a click could change about one request: its decision, its responses, the work it queued.

    The queued work is compared by what it is (its dedupe key), not by how far a worker got with it.
    """
    confirmation = ConfirmationRequest.objects.get(pk=confirmation_id)
    return {
        "decision": (confirmation.status, confirmation.decided_by, confirmation.decided_at, confirmation.decision_reason),
        "responses": sorted(
            ApproverResponse.objects.filter(confirmation_id=confirmation_id).values_list("approver", "decision", "reason")
        ),
        "outbox": sorted(Outbox.objects.filter(confirmation_id=confirmation_id).values_list("dedupe_key", flat=True)),
    }


def pending(agent: AgentClient, args: dict[str, Any] | None = None) -> str:
    answer = agent.pre_tool_use(TOOL, args or {"amount": 80000}, user_id="u-42").json()
    assert answer["decision"] == "pending", answer
    return answer["confirmation_id"]


def waiting_for(driver: ChannelDriver, background: Any, agent: AgentClient, args: dict[str, Any]) -> tuple[Any, str, Any]:
    """The agent asks (for u-42) and waits in the background: (its pending answer, the request's id, its card)."""
    waiting = background(agent.pre_tool_use, TOOL, args, user_id="u-42", wait_seconds=60)
    confirmation_id = str(wait_until(lambda: ConfirmationRequest.objects.values_list("pk", flat=True).first()))
    return waiting, confirmation_id, driver.card(confirmation_id)


class ChannelContract:
    """The scenarios; subclasses provide the `driver` fixture."""

    @pytest.fixture
    def background(self):
        """Run a blocking call (a waiting agent, a click) in another thread; its DB connection closes after."""

        def closing(fn, *args, **kwargs):
            try:
                return fn(*args, **kwargs)
            finally:
                connection.close()

        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="contract") as pool:
            yield lambda fn, *args, **kwargs: pool.submit(closing, fn, *args, **kwargs)

    # --- deciding ---------------------------------------------------------------------------

    def test_an_approvers_click_allows_the_waiting_agent_and_the_card_shows_the_approval(self, driver, background):
        agent = driver.deploy()
        approver = driver.approvers[0]
        waiting = background(agent.pre_tool_use, TOOL, {"amount": 80000}, user_id="u-42", wait_seconds=30)
        confirmation_id = wait_until(lambda: ConfirmationRequest.objects.values_list("pk", flat=True).first())
        card = driver.card(str(confirmation_id))

        told = driver.click(card, approver, "approve")

        assert told.taken
        answer = waiting.result(timeout=20).json()
        assert (answer["decision"], answer["reason"]) == ("allow", f"approved by {approver.label}")
        assert answer["tool_args"] == {"amount": 80000}
        confirmation = ConfirmationRequest.objects.get()
        assert (confirmation.status, confirmation.decided_by, confirmation.decided_by_name) == (
            "approved",
            approver.decided_by,
            approver.name,
        )
        assert list(ApproverResponse.objects.values_list("approver", "approver_name", "decision")) == [
            (approver.decided_by, approver.name, "approve")
        ]
        driver.expect_decided(card, status="approved", by=approver)

    def test_a_rejection_reaches_an_agent_long_polling_with_who_rejected_and_why(self, driver, background):
        agent = driver.deploy()
        approver = driver.approvers[1]
        confirmation_id = pending(agent)
        card = driver.card(confirmation_id)
        waiting = background(agent.wait, confirmation_id, timeout=30)

        told = driver.click(card, approver, "reject", reason="Over budget this quarter")

        assert told.taken
        state = waiting.result(timeout=20).json()
        assert (state["status"], state["decided_by"], state["decided_by_name"], state["reason"]) == (
            "rejected",
            approver.decided_by,
            approver.name,
            "Over budget this quarter",
        )
        responses = ApproverResponse.objects.filter(confirmation_id=confirmation_id)
        assert list(responses.values_list("approver", "decision", "reason")) == [
            (approver.decided_by, "reject", "Over budget this quarter")
        ]
        driver.expect_decided(card, status="rejected", by=approver, reason="Over budget this quarter")

    # --- clicks that change nothing -------------------------------------------------------------

    def test_a_click_by_someone_who_is_not_an_approver_changes_nothing_and_says_why(self, driver):
        agent = driver.deploy()
        confirmation_id = pending(agent)
        card = driver.card(confirmation_id)
        before = request_state(confirmation_id)

        told = driver.click(card, driver.outsider, "approve")

        assert told.text == "You are not one of the approvers of this request."
        assert request_state(confirmation_id) == before
        refused = ConfirmationEvent.objects.filter(confirmation_id=confirmation_id, kind="refused_click")
        assert list(refused.values_list("actor", flat=True)) == [driver.outsider.decided_by]  # audited
        driver.expect_open(card)
        # The approvers can still decide.
        assert driver.click(card, driver.approvers[0], "approve").taken
        assert ConfirmationRequest.objects.get(pk=confirmation_id).status == "approved"

    def test_a_second_click_after_the_decision_changes_nothing_and_says_who_decided(self, driver):
        agent = driver.deploy()
        first, second = driver.approvers
        confirmation_id = pending(agent)
        card = driver.card(confirmation_id)
        assert driver.click(card, first, "approve").taken
        driver.expect_decided(card, status="approved", by=first)
        before = request_state(confirmation_id)

        late_reject = driver.click(card, second, "reject", reason="too late")
        double_click = driver.click(card, first, "approve")

        assert late_reject.text == double_click.text == f"Already approved by {first.label}."
        assert request_state(confirmation_id) == before
        assert ConfirmationEvent.objects.filter(confirmation_id=confirmation_id, kind="late_click").count() == 2

    def test_the_same_click_delivered_twice_decides_once(self, driver):
        agent = driver.deploy()
        approver = driver.approvers[0]
        confirmation_id = pending(agent)
        card = driver.card(confirmation_id)

        first, again = driver.click_twice(card, approver, "approve")

        assert first.taken and again.taken
        assert again.text == driver.duplicate_told.format(by=approver.label)
        assert ApproverResponse.objects.filter(confirmation_id=confirmation_id).count() == 1
        assert ConfirmationEvent.objects.filter(confirmation_id=confirmation_id, kind="approved").count() == 1

    def test_two_approvers_clicking_at_once_make_exactly_one_decision(self, driver, background):
        agent = driver.deploy()
        confirmation_id = pending(agent)
        card = driver.card(confirmation_id)

        clicks = [background(driver.click, card, person, "approve") for person in driver.approvers]
        told = [c.result(timeout=20) for c in clicks]

        assert all(t.taken for t in told)
        confirmation = ConfirmationRequest.objects.get()
        winner = next(p for p in driver.approvers if p.decided_by == confirmation.decided_by)
        loser = next(p for p in driver.approvers if p is not winner)
        assert ApproverResponse.objects.get().approver == winner.decided_by
        assert told[driver.approvers.index(loser)].text == f"Already approved by {winner.label}."
        kinds = ConfirmationEvent.objects.filter(confirmation_id=confirmation_id).values_list("kind", flat=True)
        assert sorted(k for k in kinds if k not in ("card_posted", "card_updated")) == ["approved", "created", "late_click"]
        driver.expect_decided(card, status="approved", by=winner)

    def test_a_forged_click_is_refused_and_changes_nothing(self, driver):
        agent = driver.deploy()
        confirmation_id = pending(agent)
        card = driver.card(confirmation_id)
        # The vendor has the card a moment before the worker commits its delivery (and its event).
        in_flight = Outbox.objects.filter(confirmation_id=confirmation_id, status="pending", locked_until__isnull=False)
        wait_until(lambda: not in_flight.exists(), what="the card's delivery to be recorded")
        before = request_state(confirmation_id)
        events = ConfirmationEvent.objects.filter(confirmation_id=confirmation_id).count()

        status = driver.forged_click(card, driver.approvers[0], "approve")

        assert status in (401, 403)
        assert request_state(confirmation_id) == before
        assert ConfirmationEvent.objects.filter(confirmation_id=confirmation_id).count() == events

    # --- the request ends without the approvers ---------------------------------------------------

    def test_an_agent_waiting_past_the_deadline_is_denied_and_the_card_shows_it_expired(self, driver, background):
        agent = driver.deploy(timeout_seconds=1)

        answer = agent.pre_tool_use(TOOL, {"amount": 80000}, wait_seconds=20).json()

        assert (answer["decision"], answer["reason"]) == ("deny", "no decision before the deadline (on_timeout: deny)")
        confirmation = ConfirmationRequest.objects.get()
        assert (confirmation.status, confirmation.decided_by) == ("expired", "gateway")
        driver.expect_decided(driver.card(str(confirmation.pk)), status="expired", by=None)

    def test_a_click_after_the_sweep_expired_the_request_changes_nothing_and_says_so(self, driver):
        agent = driver.deploy()
        confirmation_id = pending(agent)
        card = driver.card(confirmation_id)
        rewrite_request(confirmation_id, expires_at=timezone.now())
        assert expire_due.apply().get() == 1  # what beat runs every two seconds
        driver.expect_decided(card, status="expired", by=None)
        before = request_state(confirmation_id)

        told = driver.click(card, driver.approvers[0], "approve")

        assert told.text == "This request expired without a decision."
        assert request_state(confirmation_id) == before

    def test_a_click_after_the_deadline_but_before_the_sweep_expires_the_request_instead_of_deciding(self, driver):
        agent = driver.deploy()
        confirmation_id = pending(agent)
        card = driver.card(confirmation_id)
        rewrite_request(confirmation_id, expires_at=timezone.now())

        told = driver.click(card, driver.approvers[0], "approve")

        assert told.text == "This request expired before you answered."
        confirmation = ConfirmationRequest.objects.get(pk=confirmation_id)
        assert (confirmation.status, confirmation.decided_by) == ("expired", "gateway")
        assert not ApproverResponse.objects.exists()
        driver.expect_decided(card, status="expired", by=None)

    def test_a_request_the_agent_cancels_loses_its_buttons(self, driver):
        agent = driver.deploy()
        confirmation_id = pending(agent)
        card = driver.card(confirmation_id)

        assert agent.http.post(f"/api/v1/confirmations/{confirmation_id}/cancel").status_code == 200

        driver.expect_decided(card, status="cancelled", by=None)
        assert ConfirmationRequest.objects.get(pk=confirmation_id).decided_by == "agent:purchasing-bot"

    # --- approve for a scope ------------------------------------------------------------------

    def test_approving_for_the_session_allows_the_same_call_at_once_and_nothing_outside_until_revoked(self, driver):
        agent = driver.deploy(gate={"grants": [{"scope": "session", "args": "same"}]})
        approver = driver.approvers[1]
        confirmation_id = pending(agent)
        card = driver.card(confirmation_id)
        assert driver.scope_buttons(card) == ["Approve for this session (same arguments)"]

        assert driver.approve_for(card, approver, 0).taken

        grant = Grant.objects.get()
        assert (grant.granted_by, grant.granted_by_name, grant.scope, str(grant.confirmation_id)) == (
            approver.decided_by, approver.name, "session", confirmation_id,
        )  # fmt: skip
        again = agent.pre_tool_use(TOOL, {"amount": 80000}, user_id="u-42").json()
        assert (again["decision"], again["confirmation_id"]) == ("allow", None)
        assert again["reason"].startswith(f"allowed by grant {str(grant.pk)[:8]}: approved for this session")
        assert f"by {approver.label} at " in again["reason"]
        assert ToolCall.objects.get(grant=grant).decision == "allow"  # recorded as allowed by that grant
        # Outside the scope: other arguments, another session.
        assert agent.pre_tool_use(TOOL, {"amount": 90000}, user_id="u-42").json()["decision"] == "pending"
        assert agent.pre_tool_use(TOOL, {"amount": 80000}, session_id="s-2").json()["decision"] == "pending"
        assert services.grant_revoke(grant_id=grant.pk, actor="admin:olga")
        assert agent.pre_tool_use(TOOL, {"amount": 80000}, user_id="u-42").json()["decision"] == "pending"
        driver.expect_decided(card, status="approved", by=approver)


def in_directory(who: Person, *, name: str, email: str) -> DirectoryPerson:
    """A person of the directory (docs/approving.md, "People") whose identity on this channel is `who`'s:
    a linked chat identity, or on the web page their Django user."""
    kind, _, native = who.decided_by.partition(":")
    person = DirectoryPerson.objects.create(display_name=name, email=email)
    if kind == "web":
        user, _ = get_user_model().objects.get_or_create(username=native)
        DirectoryPerson.objects.filter(pk=person.pk).update(user=user)
    else:
        PersonIdentity.objects.create(person=person, identity=who.decided_by)
    return person


class PeopleContract:
    """People on every channel (docs/approving.md, "People"): the person a call is made for cannot approve
    it under an identity linked to them, and a stand-in decides for the person they stand in for."""

    def test_the_person_a_call_is_made_for_cannot_approve_it_under_an_identity_linked_to_them(self, driver):
        agent = driver.deploy()
        other, owner = driver.approvers  # (the web page is looked at as the first approver)
        in_directory(owner, name="Olga Owner", email="olga.owner@example.com")
        # The agent names its user by e-mail: no channel id equals it, the directory says who it is.
        answer = agent.pre_tool_use(TOOL, {"amount": 80000}, user_id="olga.owner@example.com").json()
        confirmation_id = answer["confirmation_id"]
        card = driver.card(confirmation_id)
        before = request_state(confirmation_id)

        told = driver.click(card, owner, "approve")

        assert told.text == "You cannot approve a call made on your own behalf."
        assert request_state(confirmation_id) == before
        refused = ConfirmationEvent.objects.filter(confirmation_id=confirmation_id, kind="refused_click")
        assert list(refused.values_list("actor", flat=True)) == [owner.decided_by]
        driver.expect_open(card)
        assert driver.click(card, other, "approve").taken  # anyone else may
        assert ConfirmationRequest.objects.get(pk=confirmation_id).status == "approved"

    def test_a_stand_in_decides_for_the_person_they_stand_in_for_and_the_record_names_both(self, driver, background):
        away, stand_in = driver.approvers[0], driver.outsider
        ada = in_directory(away, name="Ada Away", email="ada.away@example.com")
        sam = in_directory(stand_in, name="Sam Standin", email="sam.standin@example.com")
        now = timezone.now()
        StandIn.objects.create(person=ada, delegate=sam, starts_at=now - dt.timedelta(hours=1), ends_at=now + dt.timedelta(days=1))
        agent = driver.deploy()
        waiting, confirmation_id, card = waiting_for(driver, background, agent, {"amount": 80000})

        told = driver.click(card, stand_in, "approve")

        assert told.taken
        # Named as the directory names them, on whose behalf beside it.
        by = dataclasses.replace(stand_in, name="Sam Standin on behalf of Ada Away")
        answer = waiting.result(timeout=20).json()
        assert (answer["decision"], answer["reason"]) == ("allow", f"approved by {by.label}")
        response = ApproverResponse.objects.get(confirmation_id=confirmation_id)
        assert (response.approver, response.approver_name, response.on_behalf_of, response.on_behalf_of_name) == (
            stand_in.decided_by, "Sam Standin", ada.key, "Ada Away"
        )  # fmt: skip
        event = ConfirmationEvent.objects.get(confirmation_id=confirmation_id, kind="approved")
        assert (event.actor, event.data["on_behalf_of_name"], event.data["name"]) == (stand_in.decided_by, "Ada Away", by.name)
        driver.expect_decided(card, status="approved", by=by)

    def test_the_stand_in_of_the_person_a_call_is_made_for_cannot_approve_it_either(self, driver):
        other, away = driver.approvers  # (the web page is looked at as the first approver)
        stand_in = driver.outsider
        ada = in_directory(away, name="Ada Away", email="ada.away@example.com")
        sam = in_directory(stand_in, name="Sam Standin", email="sam.standin@example.com")
        now = timezone.now()
        StandIn.objects.create(person=ada, delegate=sam, starts_at=now - dt.timedelta(hours=1), ends_at=now + dt.timedelta(days=1))
        agent = driver.deploy()
        # The agent acts for Ada: separation of duties forbids her approval, and so her stand-in's.
        confirmation_id = agent.pre_tool_use(TOOL, {"amount": 80000}, user_id="ada.away@example.com").json()["confirmation_id"]
        card = driver.card(confirmation_id)
        before = request_state(confirmation_id)

        told = driver.click(card, stand_in, "approve")

        assert told.text == "You stand in for Ada Away, for whom this call was made: a stand-in cannot approve it either."
        assert request_state(confirmation_id) == before
        refused = ConfirmationEvent.objects.filter(confirmation_id=confirmation_id, kind="refused_click")
        assert list(refused.values_list("actor", flat=True)) == [stand_in.decided_by]
        driver.expect_open(card)
        assert driver.click(card, other, "approve").taken  # anyone else may
        assert ConfirmationRequest.objects.get(pk=confirmation_id).status == "approved"


class EditContract(ChannelContract):
    """The contract with its edit scenarios, for channels whose cards take an approver's edits (a form on
    the card, or a modal). A channel whose medium has no inputs (DingTalk's general card) keeps the
    plain contract, says so in its docs page, and proves instead that its card sends the approver to
    the approval page to edit."""

    # --- edit, then approve ------------------------------------------------------------------

    def test_an_approver_who_edits_the_arguments_approves_what_the_agent_then_runs(self, driver, background):
        agent = driver.deploy(gate={"allow_edit": ["amount"]})
        approver = driver.approvers[0]
        proposed = {"amount": 80000, "vendor": "ACME"}
        waiting = background(agent.pre_tool_use, TOOL, proposed, user_id="u-42", tool_call_id="call-1", wait_seconds=30)
        confirmation_id = wait_until(lambda: ConfirmationRequest.objects.values_list("pk", flat=True).first())
        card = driver.card(str(confirmation_id))

        told = driver.edit(card, approver, {"amount": "8000"})

        assert told.taken
        answer = waiting.result(timeout=20).json()
        approved = {"amount": 8000, "vendor": "ACME"}
        assert (answer["decision"], answer["tool_args"]) == ("allow", approved)
        assert answer["reason"] == f"approved by {approver.label} with edited arguments: amount"
        # What ran, as post-tool-use reports it: the third record beside the proposed and the approved.
        ran = agent.http.post(
            "/api/v1/hooks/post-tool-use",
            json={"session_id": "s-1", "tool_call_id": "call-1", "tool_args": answer["tool_args"], "result": "paid"},
        )
        assert ran.status_code == 200, ran.text
        audit = selectors.tool_call_audit(tool_call_id="call-1")["approval"]
        assert (audit["proposed_args"], audit["approved_args"], audit["ran_args"]) == (proposed, approved, approved)
        assert (audit["edited"], audit["edited_paths"], audit["decided_by"]) == (True, ["amount"], approver.decided_by)
        state = agent.wait(str(confirmation_id), timeout=5).json()
        assert (state["edited"], state["approved_args"], state["tool_args"]) == (True, approved, proposed)
        event = ConfirmationEvent.objects.get(confirmation_id=confirmation_id, kind="approved")
        assert (event.actor, event.data["edited"], event.data["approved_args"]) == (approver.decided_by, True, approved)
        driver.expect_decided(card, status="approved", by=approver, edited=True)

    def test_an_edit_outside_the_editable_arguments_is_refused_and_changes_nothing(self, driver):
        agent = driver.deploy(gate={"allow_edit": ["amount"]})
        confirmation_id = pending(agent, {"amount": 80000, "vendor": "ACME"})
        card = driver.card(confirmation_id)
        before = request_state(confirmation_id)

        told = driver.edit(card, driver.approvers[0], {"vendor": "Evil Corp"})  # not editable

        assert told.text == "You may not change vendor; the editable arguments are amount."
        assert request_state(confirmation_id) == before
        driver.expect_open(card)

    # --- an edited call is judged again, and keeps its types ------------------------------------

    def test_an_edit_the_agents_policy_denies_is_refused_with_its_reason_and_one_it_allows_runs(self, driver, background):
        agent = driver.deploy(gate={"allow_edit": ["amount"]}, hooks=[SPENDING_CAP])
        approver = driver.approvers[0]
        waiting, confirmation_id, card = waiting_for(driver, background, agent, {"amount": 1000, "vendor": "ACME"})
        before = request_state(confirmation_id)

        refused = driver.edit(card, approver, {"amount": "9000"})

        assert refused.text == (
            "The edited call is refused by spending-cap: payments over 5000 need the CFO. Nothing was decided."
        )
        assert request_state(confirmation_id) == before  # nothing decided, no response recorded
        assert not waiting.done()  # the agent still waits
        event = ConfirmationEvent.objects.get(confirmation_id=confirmation_id, kind="refused_click")
        assert (event.actor, event.message) == (approver.decided_by, refused.text)
        judged = [(d["hook"], d["decision"]) for d in event.data["judged_again"]]
        assert judged == [("finance-gate", "ask"), ("spending-cap", "deny")]  # the agent's chain, on the edited call
        driver.expect_open(card)

        assert driver.edit(card, approver, {"amount": "4000"}).taken

        answer = waiting.result(timeout=20).json()
        assert (answer["decision"], answer["tool_args"]) == ("allow", {"amount": 4000, "vendor": "ACME"})
        driver.expect_decided(card, status="approved", by=approver, edited=True)

    def test_an_edited_value_keeps_the_json_type_of_the_value_it_replaces(self, driver, background):
        agent = driver.deploy(gate={"allow_edit": ["amount", "memo"]})
        approver = driver.approvers[0]
        waiting, confirmation_id, card = waiting_for(driver, background, agent, {"amount": 1000, "memo": "Q3"})
        before = request_state(confirmation_id)

        decimal = driver.edit(card, approver, {"amount": "12.5"})

        assert decimal.text == "The value for amount must be a whole number, like 1200; 12.5 is not."
        assert request_state(confirmation_id) == before

        assert driver.edit(card, approver, {"amount": "9000", "memo": "12345"}).taken

        answer = waiting.result(timeout=20).json()
        assert answer["tool_args"] == {"amount": 9000, "memo": "12345"}  # a number stays a number, text stays text

