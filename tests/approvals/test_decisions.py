"""Who may decide: rules that hold on every path, the admin's included."""

from __future__ import annotations

import pytest

from approvals import services
from approvals.models import Agent, ConfirmationRequest
from gateway_contract import Callback
from tests.approvals.test_races import CONFIG
from tests.conftest import apply_config

pytestmark = pytest.mark.django_db(transaction=True)


def test_staff_deciding_from_the_admin_cannot_approve_their_own_call():
    apply_config(CONFIG)
    agent = Agent.objects.get(name="racer")
    answer = services.tool_call_pre(agent=agent, session_id="s", tool_name="pay", tool_args={}, user_id="carol")

    outcome = services.confirmation_respond(
        channel_name="admin",
        callback=Callback(confirmation_id=answer.confirmation_id, decision="approve", actor="carol"),
        as_admin=True,
    )

    assert (outcome.applied, outcome.code) == (False, "self_approval")
    assert ConfirmationRequest.objects.get().status == "pending"
