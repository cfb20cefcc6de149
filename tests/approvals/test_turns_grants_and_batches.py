"""The calls of one turn, grants and batch decisions, against the real PostgreSQL (docs/approving.md):
a call of a turn joins its pending first rather than slipping past it, a grant covers only its
scope, a deny rule beats a grant, each request of a batch is decided exactly once — with real
threads where a race is possible."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test import Client
from django.urls import reverse

from approvals import selectors, services
from approvals.models import (
    Agent,
    ApproverResponse,
    ConfirmationEvent,
    ConfirmationRequest,
    EventKind,
    Grant,
    Outbox,
    ToolCall,
)
from gateway_contract import Callback
from tests.channels_ext.web.conftest import PASSWORD, inbox_shown, shown_as_now
from tests.conftest import apply_config
from tests.support import rewrite_grant, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

CONFIG = """
channels: [{name: web, kind: web}]
agents:
  - name: bot
    hooks:
      - kind: policy
        rules: [{effect: deny, tools: ["fs__write"], when: "args.path.startsWith('/etc')", reason: "never /etc"}]
      - kind: approval_gate
        name: gate
        tools: ["fs__write", "oa__pay"]
        channel: web
        approvers: [alice, bob]
        grants: [{scope: session, args: any}, {scope: minutes, minutes: 30, args: same}]
"""


@pytest.fixture
def bot(transactional_db) -> Agent:
    apply_config(CONFIG)
    return Agent.objects.get(name="bot")


def ask(agent: Agent, tool: str, args: dict, *, turn: str = "", session: str = "s-1"):
    return services.tool_call_pre(agent=agent, session_id=session, tool_name=tool, tool_args=args, turn_id=turn)


def click(confirmation_id, decision: str = "approve", actor: str = "alice", **more):
    return services.confirmation_respond(
        channel_name="web",
        callback=Callback(confirmation_id=str(confirmation_id), decision=decision, actor=actor, **more),
    )


def shown_on_card(confirmation_id) -> tuple[str, ...]:
    """The calls a whole-turn button drawn now would decide (`Callback.shown_ids`)."""
    owner = selectors.card_owner(ConfirmationRequest.objects.get(pk=confirmation_id))
    return selectors.card_view(owner).offered_ids()


def terminal_events(confirmation_id) -> list[str]:
    kinds = ConfirmationEvent.objects.filter(confirmation_id=confirmation_id).values_list("kind", flat=True)
    return [k for k in kinds if k in ("approved", "rejected", "expired", "cancelled")]


def test_a_later_call_of_a_turn_joins_its_pending_first_and_no_grant_lets_it_past(bot):
    granted = ask(bot, "oa__pay", {"amount": 1}, turn="t-0")
    assert click(granted.confirmation_id, grant=0).message == "Approved for this session (any arguments)."
    assert ask(bot, "oa__pay", {"amount": 2}, turn="t-0").decision == "allow"  # the grant, nothing pending

    first = ask(bot, "fs__write", {"path": "/tmp/a"}, turn="t-1")
    second = ask(bot, "oa__pay", {"amount": 3}, turn="t-1")  # the grant would allow it alone

    assert (first.decision, second.decision) == ("pending", "pending")
    joined = ConfirmationRequest.objects.get(pk=second.confirmation_id)
    assert str(joined.batch_lead_id) == first.confirmation_id
    assert not Outbox.objects.filter(confirmation=joined, kind="card").exists()  # shown on the first one's card
    assert ConfirmationEvent.objects.filter(confirmation=joined, kind=EventKind.JOINED_TURN).exists()
    assert ask(bot, "oa__pay", {"amount": 4}, turn="t-2").decision == "allow"  # another turn: the grant applies
    # A deny rule beats the grant, and is never asked about.
    denied = ask(bot, "fs__write", {"path": "/etc/passwd"}, turn="t-3")
    assert (denied.decision, denied.reason) == ("deny", "never /etc")

    outcome = click(first.confirmation_id, whole_turn=True, shown_ids=shown_on_card(first.confirmation_id))

    assert outcome.message == "Approved 2 call(s) of this turn."
    for pk in (first.confirmation_id, second.confirmation_id):
        assert terminal_events(pk) == ["approved"]
        assert ApproverResponse.objects.get(confirmation_id=pk).approver == "web:alice"
    assert ask(bot, "oa__pay", {"amount": 5}, turn="t-1").decision == "allow"  # nothing of t-1 pending now


def test_a_grant_covers_only_its_tool_arguments_session_and_time(bot):
    same = ask(bot, "oa__pay", {"amount": 1})
    click(same.confirmation_id, grant=1)  # 30 minutes, the same arguments
    grant = Grant.objects.get()
    assert (grant.scope, grant.minutes, grant.expires_at is not None, bool(grant.args_fingerprint)) == (
        "minutes", 30, True, True
    )  # fmt: skip

    assert ask(bot, "oa__pay", {"amount": 1}).decision == "allow"
    assert ask(bot, "oa__pay", {"amount": 2}).decision == "pending"  # other arguments
    assert ask(bot, "fs__write", {"path": "/tmp/x", "amount": 1}).decision == "pending"  # another tool
    assert ask(bot, "oa__pay", {"amount": 1}, session="s-2").decision == "pending"  # another session
    rewrite_grant(grant.pk, expires_at=grant.created_at)  # its 30 minutes are over
    assert ask(bot, "oa__pay", {"amount": 1}).decision == "pending"
    assert ToolCall.objects.filter(grant=grant).count() == 1
    assert Grant.objects.get().uses == 1


def test_a_gate_that_stops_offering_scopes_stops_honouring_its_grants(bot):
    click(ask(bot, "oa__pay", {"amount": 1}).confirmation_id, grant=0)  # this session, any arguments
    assert ask(bot, "oa__pay", {"amount": 2}).decision == "allow"

    apply_config(CONFIG.replace("        grants: [{scope: session, args: any}, {scope: minutes, minutes: 30, args: same}]\n", ""))
    # Read afresh, as every caller of the service does: an Agent read before the change carries the old
    # generation, under which a process whose listener has not yet heard the change still holds the old hooks.
    bot.refresh_from_db()

    assert ask(bot, "oa__pay", {"amount": 3}).decision == "pending"
    assert Grant.objects.get().uses == 1
    apply_config(CONFIG)  # offered again: the grant, still live, applies again
    bot.refresh_from_db()  # (read afresh again, as above)
    assert ask(bot, "oa__pay", {"amount": 4}).decision == "allow"


def test_a_scope_the_gate_does_not_offer_and_an_edit_it_does_not_allow_are_refused(bot):
    pending = ask(bot, "oa__pay", {"amount": 1}).confirmation_id

    no_scope = click(pending, grant=7)
    no_edit = click(pending, edits={"amount": 2})

    assert (no_scope.code, no_scope.message) == ("grant_refused", "This request offers no such scope to approve for.")
    assert (no_edit.code, no_edit.message) == ("edit_refused", "This request's gate does not allow editing its arguments.")
    assert ConfirmationRequest.objects.get(pk=pending).status == "pending"
    assert not ApproverResponse.objects.exists() and not Grant.objects.exists()


def test_an_edit_never_touches_a_masked_value_and_is_applied_over_the_agents_own_arguments(transactional_db):
    apply_config(
        """
channels: [{name: web, kind: web}]
agents:
  - name: payer
    hooks:
      - {kind: redact, keys: [card], patterns: ["\\\\d{16}"]}
      - {kind: approval_gate, channel: web, approvers: [alice], allow_edit: true}
"""
    )
    payer = Agent.objects.get(name="payer")
    real = {"amount": 5, "card": "4111111111111111", "note": "lunch"}
    asked = services.tool_call_pre(agent=payer, session_id="s", tool_name="pay", tool_args=real, idempotency_key="k")
    confirmation = ConfirmationRequest.objects.get(pk=asked.confirmation_id)
    assert (confirmation.tool_args["card"], confirmation.editable_paths) == ("[redacted]", ["amount", "note"])

    secret = click(confirmation.pk, edits={"note": "card 5500000000000004"})
    masked = click(confirmation.pk, edits={"card": "5500000000000004"})
    assert (secret.code, masked.code) == ("edit_refused", "edit_refused")
    assert secret.message.startswith("The new value of note would be redacted")
    assert masked.message == "You may not change card; the editable arguments are amount, note."
    assert click(confirmation.pk, edits={"amount": 6}).message == "Approved with your edits."

    # The agent asks again with its key (as gateway_client does after waiting): its real card, the edited amount.
    again = services.tool_call_pre(agent=payer, session_id="s", tool_name="pay", tool_args=real, idempotency_key="k")
    assert (again.decision, again.tool_args) == ("allow", {"amount": 6, "card": "4111111111111111", "note": "lunch"})
    assert ConfirmationRequest.objects.get(pk=confirmation.pk).approved_args["card"] == "[redacted]"


def test_the_session_ending_ends_its_grants(bot):
    click(ask(bot, "oa__pay", {"amount": 1}).confirmation_id, grant=0)

    services.hook_event_run(agent=bot, event="session_end", session_id="s-1")

    assert Grant.objects.get().revoked_by == "gateway: the session ended"
    assert ask(bot, "oa__pay", {"amount": 1}).decision == "pending"


def statuses(*confirmation_ids) -> list[str]:
    return [ConfirmationRequest.objects.get(pk=pk).status for pk in confirmation_ids]


def test_a_whole_turn_click_decides_only_the_calls_it_names_and_a_call_that_joined_later_stays_pending(bot):
    first = ask(bot, "oa__pay", {"n": 1}, turn="t-1").confirmation_id
    second = ask(bot, "oa__pay", {"n": 2}, turn="t-1").confirmation_id
    drawn = shown_on_card(first)  # the card as the approver saw it
    later = ask(bot, "oa__pay", {"n": 3}, turn="t-1").confirmation_id  # joins the card after it was drawn

    outcome = click(second, whole_turn=True, shown_ids=drawn)

    assert (outcome.code, outcome.message) == (
        "decided",
        "Approved 2 call(s) of this turn. 1 other call(s) of this turn, not shown on this card when it was drawn, "
        "are left pending.",
    )
    assert statuses(first, second, later) == ["approved", "approved", "pending"]
    assert [(item.confirmation_id, item.status) for item in outcome.card.items][-1] == (later, "pending")
    assert not ApproverResponse.objects.filter(confirmation_id=later).exists()
    again = click(first, whole_turn=True, shown_ids=drawn)  # the same click once more
    assert (again.applied, again.code) == (False, "already_decided")
    assert again.message.startswith(
        "Nothing was changed. The calls this card showed are decided already. 1 other call(s)"
    )
    assert statuses(first, second, later) == ["approved", "approved", "pending"]


def test_a_whole_turn_click_naming_calls_not_on_its_turns_card_decides_nothing(bot):
    apply_config(CONFIG + "  - name: other\n    hooks: [{kind: approval_gate, channel: web, approvers: [alice]}]\n")
    first = ask(bot, "oa__pay", {"n": 1}, turn="t-1").confirmation_id
    second = ask(bot, "oa__pay", {"n": 2}, turn="t-1").confirmation_id
    other_turn = ask(bot, "oa__pay", {"n": 3}, turn="t-2").confirmation_id
    alone = ask(bot, "oa__pay", {"n": 4}).confirmation_id
    other_agent = ask(Agent.objects.get(name="other"), "deploy", {}, turn="t-1").confirmation_id

    for foreign in (other_turn, alone, other_agent, "00000000-0000-0000-0000-000000000000"):
        outcome = click(first, whole_turn=True, shown_ids=(first, second, foreign))
        assert (outcome.applied, outcome.code) == (False, "not_on_card")
        assert outcome.message == "This click names calls that this turn's card does not show, so nothing was changed."

    assert statuses(first, second, other_turn, alone, other_agent) == ["pending"] * 5
    assert not ApproverResponse.objects.exists()
    refused = ConfirmationEvent.objects.filter(confirmation_id=first, kind=EventKind.REFUSED_CLICK)
    assert [e.data["shown_ids"] for e in refused] == [
        [other_turn], [alone], [other_agent], ["00000000-0000-0000-0000-000000000000"]
    ]


def test_a_whole_turn_click_naming_no_calls_decides_nothing_and_says_the_card_is_out_of_date(bot):
    first = ask(bot, "oa__pay", {"n": 1}, turn="t-1").confirmation_id
    second = ask(bot, "oa__pay", {"n": 2}, turn="t-1").confirmation_id

    for shown_ids in (None, ()):
        outcome = click(second, whole_turn=True, shown_ids=shown_ids)
        assert (outcome.applied, outcome.code) == (False, "stale_card")
        assert outcome.message.startswith("This card is out of date, so nothing was changed")
        assert outcome.card.offered_ids() == (first, second)  # what a redrawn card offers
        dry = click(second, "reject", reason="no", whole_turn=True, shown_ids=shown_ids, dry_run=True)
        assert (dry.applied, dry.code) == (False, "stale_card")  # Slack's Reject all opens no modal

    assert statuses(first, second) == ["pending", "pending"]
    assert not ApproverResponse.objects.exists()


# --------------------------------------------------------------------------- races


def run_together(*functions) -> list:
    barrier = threading.Barrier(len(functions))
    results: list = [None] * len(functions)

    def run(index, fn):
        try:
            barrier.wait()
            results[index] = fn()
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(functions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def test_a_grant_revoked_while_calls_use_it_allows_nothing_after_the_revocation(bot):
    click(ask(bot, "oa__pay", {"amount": 1}).confirmation_id, grant=0)
    grant = Grant.objects.get()

    for _ in range(5):
        rewrite_grant(grant.pk, revoked_at=None, revoked_by="")
        run_together(
            lambda: ask(bot, "oa__pay", {"amount": 1}),
            lambda: ask(bot, "oa__pay", {"amount": 1}),
            lambda: services.grant_revoke(grant_id=grant.pk, actor="web:bob"),
        )
        grant.refresh_from_db()
        # Every use committed before the revocation was stamped; after it, calls ask again.
        assert all(call.created_at < grant.revoked_at for call in ToolCall.objects.filter(grant=grant))
        assert ask(bot, "oa__pay", {"amount": 1}).decision == "pending"
    assert grant.uses == ToolCall.objects.filter(grant=grant, decision="allow").count()


def test_a_call_using_a_grant_the_moment_it_is_revoked_waits_for_the_revocation_and_asks(bot):
    click(ask(bot, "oa__pay", {"amount": 1}).confirmation_id, grant=0)
    grant = Grant.objects.get()
    with ThreadPoolExecutor(max_workers=1) as pool, transaction.atomic():
        Grant.objects.select_for_update().get(pk=grant.pk)  # a revocation under way holds the row
        call = pool.submit(lambda: (ask(bot, "oa__pay", {"amount": 1}), connection.close())[0])
        wait_until(lambda: blocked_by_me() == 1, what="the call to wait on the grant's row")
        services.grant_revoke(grant_id=grant.pk, actor="web:bob")
    # The call read the grant as live, then its conditional UPDATE saw the revocation: it asks.
    assert call.result(timeout=10).decision == "pending"
    assert Grant.objects.get().uses == 0


def blocked_by_me() -> int:
    """How many database sessions are waiting on a lock this connection holds."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))")
        return cursor.fetchone()[0]


def test_two_approvers_editing_at_once_make_exactly_one_decision_with_the_winners_edit(transactional_db):
    apply_config(CONFIG.replace("grants: [", "allow_edit: [amount]\n        grants: ["))
    bot = Agent.objects.get(name="bot")
    for _ in range(10):
        pending = ask(bot, "oa__pay", {"amount": 1}).confirmation_id

        outcomes = run_together(
            lambda: click(pending, actor="alice", edits={"amount": 100}),
            lambda: click(pending, actor="bob", edits={"amount": 200}),
        )

        confirmation = ConfirmationRequest.objects.get(pk=pending)
        winner = {"web:alice": 100, "web:bob": 200}[confirmation.decided_by]
        assert (confirmation.arg_edits, confirmation.approved_args) == ({"amount": winner}, {"amount": winner})
        assert terminal_events(pending) == ["approved"]
        assert sorted(o.code for o in outcomes) == ["already_decided", "decided"]


def test_a_whole_turn_decision_racing_single_clicks_decides_each_call_exactly_once(bot):
    for round_ in range(8):
        turn = f"t-{round_}"
        ids = [ask(bot, "oa__pay", {"n": n}, turn=turn).confirmation_id for n in range(3)]

        shown = shown_on_card(ids[0])
        run_together(
            lambda: click(ids[0], actor="alice", whole_turn=True, shown_ids=shown),
            lambda: click(ids[1], "reject", actor="bob", reason="not this one"),
            lambda: click(ids[2], "reject", actor="bob", reason="nor this", whole_turn=True, shown_ids=shown),
        )

        for pk in ids:
            assert len(terminal_events(pk)) == 1
            assert ApproverResponse.objects.filter(confirmation_id=pk).count() == 1
            assert ConfirmationRequest.objects.get(pk=pk).status in ("approved", "rejected")


# --------------------------------------------------------------------------- the inbox


def test_the_inbox_decides_the_selected_requests_each_once_with_each_approver_check(bot):
    User.objects.create_user("alice", password=PASSWORD)
    apply_config(CONFIG + "  - name: other\n    hooks: [{kind: approval_gate, channel: web, approvers: [bob]}]\n")
    mine = [ask(bot, "oa__pay", {"n": n}).confirmation_id for n in range(2)]
    decided = ask(bot, "oa__pay", {"n": 9}).confirmation_id
    click(decided, "reject", actor="bob", reason="no")
    not_mine = ask(Agent.objects.get(name="other"), "deploy", {}).confirmation_id
    alice = Client()
    assert alice.login(username="alice", password=PASSWORD)

    drawn = inbox_shown(alice.get(reverse("approval-inbox")).content.decode())
    assert set(drawn) == set(mine)  # the rows waiting for her, each with what it showed
    forged = [shown_as_now(decided), shown_as_now(not_mine)]  # not in her inbox: a hand-made form

    response = alice.post(
        reverse("approval-inbox-decide"), {"ids": [*drawn.values(), *forged], "decision": "approve"}, follow=True
    )

    page = response.content.decode()
    assert "Approved 2 request(s)" in page
    assert "Left unchanged (2)" in page and "Already rejected by web:bob: no" in page
    assert "You are not one of the approvers of this request." in page
    for pk in mine:
        assert (ConfirmationRequest.objects.get(pk=pk).decided_by, terminal_events(pk)) == ("web:alice", ["approved"])
    assert ConfirmationRequest.objects.get(pk=not_mine).status == "pending"
    assert ConfirmationEvent.objects.get(confirmation_id=not_mine, kind="refused_click").actor == "web:alice"
    # Rejecting needs a reason; junk ids are a clear 4xx-style refusal that changes nothing.
    no_reason = alice.post(reverse("approval-inbox-decide"), {"ids": [shown_as_now(not_mine)], "decision": "reject"})
    assert (no_reason.status_code, "Say why you reject" in no_reason.content.decode()) == (400, True)
    junk = alice.post(reverse("approval-inbox-decide"), {"ids": ["nope"], "decision": "approve"})
    assert (junk.status_code, "Not a request id." in junk.content.decode()) == (400, True)
    someone_elses = alice.post(reverse("approval-grant-revoke", args=["00000000-0000-0000-0000-000000000000"]))
    assert someone_elses.status_code == 404
    assert ConfirmationRequest.objects.get(pk=not_mine).status == "pending"
