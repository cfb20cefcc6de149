"""What an approver's decision on the web page costs the database: the statements one click makes
(docs/architecture.md, "What a decision costs"). Timings stay in bench/; the count is checked here,
so a change that adds a read or a write to every decision is seen in review."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.audit import audit_verify
from approvals.models import AuditEntry, ConfirmationRequest
from approvals.services import audit as audit_service
from tests.channels_ext.web.test_page import page_url, pending, signed_in

pytestmark = pytest.mark.django_db(transaction=True)

# A single approval on the page, as statements (in order):
#   the session, the user;
#   BEGIN; the request under its row lock, with its agent's team (whether this user sees it: a team
#   everyone belongs to needs no read of the user's teams), its channels;
#   the call's owner (self-approval: is `u-42` a user?); the clicker's person (one read: user, person, link);
#   the response; the conditional UPDATE; the event with its NOTIFY;
#   the chain's three entries (response, request, event) in one statement; COMMIT.
DECISION_STATEMENTS = 11


def kinds(captured) -> list[str]:
    """Each statement by what it does to which table (`SELECT approvals_confirmationrequest`)."""
    out = []
    for query in captured:
        sql = query["sql"].strip()
        verb = sql.split()[0].upper()
        table = re.search(r'(?:FROM|INTO|UPDATE)\s+"?(\w+)"?', sql)
        out.append(f"{verb} {table.group(1) if table else ''}".strip())
    return out


def test_a_web_approval_makes_eleven_statements_and_its_record_verifies(agent, people):
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
    # the chain's entries of the click (response, transition, event), in one statement
    assert done.count("WITH approvals_audithead") == 1
    assert AuditEntry.objects.filter(agent_id=confirmation.agent_id).count() == entries_before + 3
    assert audit_verify().ok


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
