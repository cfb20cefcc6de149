"""A Teams click counts only from the channel's own place (docs/teams.md §3): Bot Framework signs the
activities of every channel, tenant and conversation the bot is in with the same kind of token, so a
click signed by Bot Framework for this bot is still refused (403, nothing changed) when it comes from Web
Chat or Direct Line, names no tenant or another one, comes from another conversation (a forwarded card,
another chat the bot was added to) or through another Bot Connector."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from approvals.models import ConfirmationEvent, ConfirmationRequest
from tests.channels_ext.contract import request_state
from tests.channels_ext.teams.support import ALICE, CONVERSATION_ID, invoke_activity, pending_card, post_activity
from tests.fakes.teams_api import FakeTeams

pytestmark = pytest.mark.django_db(transaction=True)

OTHER_TENANT = "3c9a1f6e-0000-4000-8000-000000000bad"
OTHER_CONVERSATION = "19:9e8d7c6b5a4f3e2d@thread.tacv2"


def _from(channel_id: str | None) -> Callable[[dict[str, Any], FakeTeams], None]:
    def change(activity: dict[str, Any], fake: FakeTeams) -> None:
        if channel_id is None:
            del activity["channelId"]
        else:
            activity["channelId"] = channel_id

    return change


def _no_tenant(activity: dict[str, Any], fake: FakeTeams) -> None:
    del activity["channelData"]["tenant"], activity["conversation"]["tenantId"]


def _tenant_in_conversation(activity: dict[str, Any], fake: FakeTeams) -> None:
    activity["conversation"]["tenantId"] = OTHER_TENANT  # channelData still names the bot's own


def _conversation(conversation_id: str) -> Callable[[dict[str, Any], FakeTeams], None]:
    def change(activity: dict[str, Any], fake: FakeTeams) -> None:
        activity["conversation"]["id"] = conversation_id

    return change


def _service_url(activity: dict[str, Any], fake: FakeTeams) -> None:
    activity["serviceUrl"] = "https://smba.trafficmanager.net/emea/"  # never called: only compared


@pytest.mark.parametrize(
    "elsewhere",
    [
        pytest.param(_from("webchat"), id="Web Chat, whose client writes from and channelData"),
        pytest.param(_from("directline"), id="Direct Line"),
        pytest.param(_from(None), id="no channelId"),
        pytest.param(_no_tenant, id="no tenant"),
        pytest.param(_tenant_in_conversation, id="another tenant in the conversation"),
        pytest.param(_conversation(OTHER_CONVERSATION), id="another chat the bot was added to"),
        pytest.param(_conversation(f"{OTHER_CONVERSATION};messageid=1700000000001"), id="a forwarded card in another channel"),
        pytest.param(_conversation(f"{CONVERSATION_ID}0"), id="a conversation id that only starts like the channel's"),
        pytest.param(_service_url, id="another Bot Connector"),
    ],
)
def test_a_signed_click_from_anywhere_but_the_channels_teams_conversation_is_403_and_changes_nothing(
    live_gateway, fake_teams, celery_worker, elsewhere
):
    _, confirmation_id, buttons = pending_card(live_gateway, fake_teams)
    before = request_state(confirmation_id)
    activity = invoke_activity(fake_teams, "approve", buttons["approve"]["data"], who=ALICE)
    elsewhere(activity, fake_teams)
    # Signed by Bot Framework's key for this bot, for the serviceUrl the activity names: only its place is wrong.
    token = fake_teams.activity_token(service_url=activity["serviceUrl"])

    response = post_activity(live_gateway, activity, token)

    assert response.status_code == 403, response.text
    assert response.json()["error"]["code"] == "callback_refused"
    assert request_state(confirmation_id) == before
    assert not ConfirmationEvent.objects.filter(confirmation_id=confirmation_id, kind__in=["refused_click", "approved"]).exists()


def test_a_click_in_the_cards_own_thread_through_a_regional_connector_decides(live_gateway, fake_teams, celery_worker):
    _, confirmation_id, buttons = pending_card(live_gateway, fake_teams)
    [card] = fake_teams.posted()
    activity = invoke_activity(fake_teams, "approve", buttons["approve"]["data"], who=ALICE, reply_to=card.activity_id)
    # A click on a card posted to a channel comes from the thread the card opened, through the tenant's region.
    activity["conversation"]["id"] = f"{CONVERSATION_ID};messageid={card.activity_id}"
    activity["serviceUrl"] = fake_teams.connector_base + "/emea/"

    response = post_activity(live_gateway, activity, fake_teams.activity_token(service_url=activity["serviceUrl"]))

    assert response.status_code == 200, response.text
    assert ConfirmationRequest.objects.get(pk=confirmation_id).status == "approved"
