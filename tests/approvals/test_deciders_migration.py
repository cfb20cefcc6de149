"""The data migration that makes `decided_by` and the responses channel-qualified
(approvals/migrations/0004_channel_qualified_deciders.py), run on rows as the gateway wrote them before."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps

from approvals.models import Agent, ApproverResponse, Channel, ConfirmationRequest

pytestmark = pytest.mark.django_db(transaction=True)

migration = importlib.import_module("approvals.migrations.0004_channel_qualified_deciders")


def old_request(status: str, decided_by: str, *responses: tuple[str, str, str]) -> ConfirmationRequest:
    """A request decided before the change: `decided_by` as it was stored, responses as (approver, decision, channel)."""
    request = ConfirmationRequest.objects.create(
        agent=Agent.objects.get(), channel=Channel.objects.get(name="ops-slack"), tool_name="pay",
        status=status, decided_by=decided_by,
    )  # fmt: skip
    for approver, decision, channel in responses:
        ApproverResponse.objects.create(
            confirmation=request, approver=approver, person=approver, decision=decision, channel=channel
        )
    return request


def test_it_rebuilds_each_id_it_can_and_leaves_the_rest(transactional_db):
    Agent.objects.create(name="bot")
    Channel.objects.create(name="ops-slack", kind="slack")
    Channel.objects.create(name="web", kind="web")
    slack = old_request("approved", "alice", ("U0BOB", "approve", "ops-slack"), ("U0ALICE", "approve", "ops-slack"))
    web = old_request("rejected", "bob", ("bob", "reject", "web"))
    admin = old_request("approved", "olga", ("olga", "approve", "admin"))
    staff_cancel = old_request("cancelled", "olga")
    untouched = {
        "expired": old_request("expired", "gateway"),
        "agent": old_request("cancelled", "agent:bot"),
        "lost": old_request("approved", "mystery"),  # its deciding response is gone: nothing to rebuild it from
    }

    migration.forwards(apps, None)
    migration.forwards(apps, None)  # twice changes nothing more

    def decided(request):
        request.refresh_from_db()
        return request.decided_by, request.decided_by_name

    assert decided(slack) == ("slack:U0ALICE", "alice")  # the last approval decided; the old name kept beside it
    assert decided(web) == ("web:bob", "bob")
    assert decided(admin) == ("admin:olga", "olga")
    assert decided(staff_cancel) == ("admin:olga", "olga")
    assert [decided(r)[0] for r in untouched.values()] == ["gateway", "agent:bot", "mystery"]
    assert sorted(ApproverResponse.objects.values_list("approver", "approver_name")) == [
        ("admin:olga", "olga"), ("slack:U0ALICE", "alice"), ("slack:U0BOB", "U0BOB"), ("web:bob", "bob"),
    ]  # fmt: skip
