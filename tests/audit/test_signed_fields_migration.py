"""The migrations that add a field to what a request's MAC signs and its chain entries hash — 0016 a
question's text (`reason`), 0018 a call's `risk` (`approvals.audit_fields.resign_requests`) — run on rows as
the gateway wrote them before each, and the later ones after it (the upgrade path): everything that
verified still does, and nothing that did not is made to."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps
from django.db import connection

from approvals.audit import audit_verify, content_hash, decision_mac, resign_chains
from approvals.models import AuditEntry, ConfirmationRequest
from tests.audit.support import verify_problems
from tests.audit.test_questions_verify import CANCELLED, ask, answer, cancelled, shown
from tests.conftest import decide

pytestmark = pytest.mark.django_db(transaction=True)

MIGRATIONS = [
    importlib.import_module("approvals.migrations.0016_question_text_signed"),
    importlib.import_module("approvals.migrations.0018_request_risk"),
]


def as_written_before_the_migration(migration) -> None:
    """Every request signed, and the latest chain entry about it hashed, over the fields signed before (what
    the gateway wrote then); the chains signed again over that."""
    for row in ConfirmationRequest.objects.values(*MIGRATIONS[-1].AFTER):
        ConfirmationRequest.objects.filter(pk=row["id"]).update(
            decision_mac=decision_mac(ConfirmationRequest, row, fields=migration.BEFORE)
        )
        latest = AuditEntry.objects.filter(confirmation_id=row["id"]).order_by("-seq").first()
        AuditEntry.objects.filter(pk=latest.pk).update(content_hash=content_hash("request", row, fields=migration.BEFORE))
    resign_chains()


@pytest.mark.parametrize("first", [0, 1], ids=["from-0016", "from-0018"])
def test_every_request_that_verified_verifies_after_it_and_a_changed_one_stays_named(agent, first):
    answered, pending, changed = ask(agent), ask(agent), ask(agent)
    assert answer(answered, "Globex") and answer(changed, "Globex")
    approved = agent.pre_tool_use("oa__purchase_pay", {"amount": 5}).json()["confirmation_id"]
    decide(approved, "approve")
    waiting = agent.pre_tool_use("oa__purchase_pay", {"amount": 6}).json()["confirmation_id"]
    as_written_before_the_migration(MIGRATIONS[first])
    with connection.cursor() as cursor:  # changed behind the gateway's back before the upgrade
        cursor.execute("""UPDATE approvals_confirmationrequest SET answer = '"Acme"' WHERE id = %s""", [changed])
    before = verify_problems()  # with the new fields, and before the migration: nothing verifies
    assert f"confirmation request {answered} does not match its signature" in before

    for migration in MIGRATIONS[first:]:
        migration.forwards(apps, None)
        entries = AuditEntry.objects.count()
        migration.forwards(apps, None)  # twice changes nothing more
        assert AuditEntry.objects.count() == entries

    problems = [p.message for p in audit_verify().problems]
    assert len(problems) == 2, problems  # the changed question, named both ways; nothing else
    assert all(changed in message for message in problems)
    assert cancelled(shown(agent, changed)) == CANCELLED
    assert (shown(agent, answered)["status"], shown(agent, answered)["answer"]) == ("answered", "Globex")
    assert shown(agent, pending)["status"] == "pending"
    assert answer(pending, "Acme")  # the gateway signs its next change
    assert shown(agent, pending)["answer"] == "Acme"
    assert agent.wait(approved, timeout=0).json()["status"] == "approved"
    decide(waiting, "reject", reason="no")
    assert agent.wait(waiting, timeout=0).json()["reason"] == "no"
    assert len(audit_verify().problems) == 2
