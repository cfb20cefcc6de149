"""What an approver's decision on the web page costs the database: the statements one click makes
(docs/architecture.md, "What a decision costs"). Timings stay in bench/; the count is checked here,
so a change that adds a read or a write to every decision is seen in review."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals import selectors
from approvals.audit import audit_verify
from approvals.models import ApproverResponse, AuditEntry, ConfirmationRequest, Person, PersonIdentity
from approvals.services import audit as audit_service
from tests.channels_ext.web.test_page import page_url, pending, signed_in

pytestmark = pytest.mark.django_db(transaction=True)

# A single approval on the page, as statements (in order):
#   the session with its user (with who they are: their person, the person their `web:` / `admin:`
#   identity is linked to) — one statement once this process has read that session before (the page
#   the approver clicked on; the first read of a session is two: gateway/sessions.py);
#   BEGIN; the request under its row lock, with its agent's team (whether this user sees it: a team
#   everyone belongs to needs no read of the user's teams), its channels;
#   whom the call was made for (self-approval: is `u-42` a user? user, person, link) — who clicked is
#   known from the sign-in's read;
#   the response, the conditional UPDATE, its event and its NOTIFY, one statement;
#   the chain's three entries (response, request, event) in one statement; COMMIT.
DECISION_STATEMENTS = 7


def kinds(captured) -> list[str]:
    """Each statement by what it does to which table (`SELECT approvals_confirmationrequest`)."""
    out = []
    for query in captured:
        sql = query["sql"].strip()
        verb = sql.split()[0].upper()
        table = re.search(r'(?:FROM|INTO|UPDATE)\s+"?(\w+)"?', sql)
        out.append(f"{verb} {table.group(1) if table else ''}".strip())
    return out


def test_a_web_approval_makes_seven_statements_and_its_record_verifies(agent, people):
    confirmation = pending(agent)
    alice = signed_in("alice")
    alice.get(page_url(confirmation))  # the page as drawn before the click
    entries_before = AuditEntry.objects.filter(agent_id=confirmation.agent_id).count()

    with CaptureQueriesContext(connection) as captured:
        response = alice.post(page_url(confirmation), {"decision": "approve", "reason": ""})

    assert response.status_code == 302
    confirmation.refresh_from_db()
    assert (confirmation.status, confirmation.decided_by) == ("approved", "web:alice")
    done = kinds(captured.captured_queries)
    assert len(done) == DECISION_STATEMENTS, "\n".join(done)
    # read once, under its lock
    assert done.count("SELECT approvals_confirmationrequest") == 1
    # the user behind the call's owner, once (the clicker's came with their sign-in)
    assert user_reads(captured) == 1
    # the chain's entries of the click (response, transition, event), in one statement
    assert done.count("WITH approvals_audithead") == 1
    assert AuditEntry.objects.filter(agent_id=confirmation.agent_id).count() == entries_before + 3
    assert audit_verify().ok


def user_reads(captured) -> int:
    """The statements that read who a Django user is (user, person, link), besides the sign-in's read
    of the signed-in user (which brings their own)."""
    return sum(
        "approvals_personidentity" in query["sql"]
        and not query["sql"].startswith(('SELECT "auth_user"', 'SELECT * FROM (SELECT "django_session"'))
        for query in captured.captured_queries
    )


def test_a_web_approval_of_a_call_made_for_nobody_reads_no_user_of_its_own(agent, people):
    """Who clicked is known from the sign-in's read (the session's user, with their person and links):
    a call made for nobody in particular is decided with no read of who is whom — six statements."""
    confirmation = ConfirmationRequest.objects.get(
        pk=agent.pre_tool_use("oa__purchase_pay", {"amount": 5}).json()["confirmation_id"]
    )
    assert confirmation.user_id == ""
    alice = signed_in("alice")
    alice.get(page_url(confirmation))  # the page as drawn before the click

    with CaptureQueriesContext(connection) as captured:
        response = alice.post(page_url(confirmation), {"decision": "approve", "reason": ""})

    assert response.status_code == 302
    assert len(captured.captured_queries) == DECISION_STATEMENTS - 1, "\n".join(kinds(captured.captured_queries))
    assert user_reads(captured) == 0
    recorded = ApproverResponse.objects.get(confirmation_id=confirmation.pk)
    assert (recorded.approver, recorded.person) == ("web:alice", f"user:{people['alice'].pk}")
    assert ConfirmationRequest.objects.get(pk=confirmation.pk).status == "approved"


def test_the_clicker_and_the_user_the_call_is_for_are_read_apart_and_kept_apart(agent, people):
    """Who clicked comes with the sign-in, whom the call was made for from one read, and each answer
    stays with its own question: the response is alice's, not bob's (for whom the call was made), and
    she may approve it."""
    body = agent.pre_tool_use("oa__purchase_pay", {"amount": 5}, user_id="bob").json()
    alice = signed_in("alice")

    with CaptureQueriesContext(connection) as captured:
        response = alice.post(reverse_page(body["confirmation_id"]), {"decision": "approve", "reason": ""})

    assert response.status_code == 302
    assert user_reads(captured) == 1
    recorded = ApproverResponse.objects.get(confirmation_id=body["confirmation_id"])
    assert (recorded.approver, recorded.person) == ("web:alice", selectors.person_of("web:alice"))
    assert recorded.person == f"user:{people['alice'].pk}" != selectors.person_of("web:bob")
    assert ConfirmationRequest.objects.get(pk=body["confirmation_id"]).status == "approved"


def test_a_click_for_a_user_whose_person_the_clicker_is_linked_to_is_refused(agent, people):
    """bob's person is also alice's (her page identity is linked to it, as her sign-in's read brings):
    a call made for `bob` is hers."""
    bobs = Person.objects.create(display_name="Bob", user=people["bob"])
    PersonIdentity.objects.create(person=bobs, identity="web:alice")
    body = agent.pre_tool_use("oa__purchase_pay", {"amount": 5}, user_id="bob").json()
    alice = signed_in("alice")

    with CaptureQueriesContext(connection) as captured:
        alice.post(reverse_page(body["confirmation_id"]), {"decision": "approve", "reason": ""})

    assert user_reads(captured) == 1
    assert not ApproverResponse.objects.exists()
    confirmation = ConfirmationRequest.objects.get(pk=body["confirmation_id"])
    assert confirmation.status == "pending"
    refused = confirmation.events.get(kind="refused_click")
    assert refused.message == "You cannot approve a call made on your own behalf."


def reverse_page(confirmation_id: str) -> str:
    return page_url(ConfirmationRequest(pk=confirmation_id))


def test_a_decision_whose_guessed_head_moved_is_chained_under_the_lock(agent, people):
    """Another process appended for this agent since this one last did: the one-statement append finds
    the head moved, writes nothing, and the entries follow the head as it is now."""
    confirmation = pending(agent)
    alice = signed_in("alice")
    stale = audit_service._heads.get(confirmation.agent_id)
    assert stale is not None  # (this process made the request, so it knows the head)
    audit_service._heads[confirmation.agent_id] = (stale[0] - 1, "0" * 64)  # as if another process wrote since

    response = alice.post(page_url(confirmation), {"decision": "approve", "reason": ""})

    assert response.status_code == 302
    assert ConfirmationRequest.objects.get(pk=confirmation.pk).status == "approved"
    verification = audit_verify()
    assert verification.ok, verification.first()
    seqs = list(AuditEntry.objects.filter(agent_id=confirmation.agent_id).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))  # no gap, no fork
