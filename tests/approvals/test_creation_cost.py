"""What creating a request costs the database: the statements one ask makes (docs/architecture.md,
"What a server process does to stay fast"). Timings stay in bench/; the count is checked here, so a
change that adds a round trip to every request created is seen in review."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals import services
from approvals.audit import audit_verify
from approvals.models import Agent, AuditEntry, ConfirmationEvent, Outbox
from tests.conftest import apply_config

pytestmark = pytest.mark.django_db(transaction=True)

CONFIG = """
channels: [{name: web, kind: web}]
agents:
  - name: asker
    hooks: [{kind: approval_gate, tools: ["pay"], channel: web, approvers: [alice], timeout_seconds: 600}]
"""

# An ask on the web page, as statements of its transaction (in order): BEGIN; who `alice` is; the
# request, its `created` event, its card (written as sent: the page is the card), the card's
# `card_posted` event and the call that asked in ONE statement; the chain's four entries in one
# statement; COMMIT. (Besides: the channel, read in the transaction, and before it the session's
# context and the agent's hooks — each read unless this process caches them: `approvals.caches`.)
ASK_STATEMENTS = 5
CACHED_READS = ('FROM "approvals_channel"', 'FROM "approvals_agent"')


def test_an_ask_writes_the_request_its_event_its_card_the_cards_event_and_the_call_in_one_statement():
    apply_config(CONFIG)
    agent = Agent.objects.get(name="asker")
    services.tool_call_pre(agent=agent, session_id="warm", tool_name="pay", tool_args={})  # this process's head guess

    with CaptureQueriesContext(connection) as captured:
        answer = services.tool_call_pre(agent=agent, session_id="s", tool_name="pay", tool_args={"amount": 3})

    everything = [q["sql"] for q in captured.captured_queries]
    statements = [s for s in everything[everything.index("BEGIN") :] if not any(read in s for read in CACHED_READS)]
    assert len(statements) == ASK_STATEMENTS, "\n".join(s[:120] for s in statements)
    together = [s for s in statements if "INSERT INTO \"approvals_confirmationrequest\"" in s]
    assert len(together) == 1
    assert together[0].count("INSERT INTO \"approvals_confirmationevent\"") == 2
    assert "INSERT INTO \"approvals_outbox\"" in together[0]
    assert "INSERT INTO \"approvals_toolcall\"" in together[0]
    kinds = list(ConfirmationEvent.objects.filter(confirmation_id=answer.confirmation_id).order_by("id").values_list("kind", flat=True))
    assert kinds == ["created", "card_posted"]
    card = Outbox.objects.get(confirmation_id=answer.confirmation_id)
    assert card.status == "sent" and card.message_ref["url"].endswith(f"/approvals/{answer.confirmation_id}/")
    # chained in the order they were written: the request, its two events, then the call
    chained = list(
        AuditEntry.objects.filter(agent=agent).order_by("-seq").values_list("action", flat=True)[:4]
    )[::-1]
    assert chained == ["recorded", "event", "event", "asked"]
    assert audit_verify().ok
