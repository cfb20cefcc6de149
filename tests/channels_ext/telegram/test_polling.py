"""Telegram by long polling (`mode: polling`): `channel_connections` holds getUpdates through
python-telegram-bot against the fake Bot API — a webhook left set is removed first, a dropped
connection is polled again, a refused token stops the process with a clear message, /readyz shows it."""

from __future__ import annotations

import logging

import httpx
import pytest
from django.test import Client

from approvals.models import ConfirmationRequest
from tests.channels_ext.connections_support import connection_state, running_connections
from tests.channels_ext.telegram.support import ALICE, CHANNEL, configure, posted_card
from tests.channels_ext.telegram.test_contract import PollingTelegram
from tests.channels_ext.test_channel_connections import run_command
from tests.conftest import make_agent_client
from tests.fakes.telegram_api import BOT_TOKEN
from tests.hooks.policy_support import deliver_outbox
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

FAST_POLLS = {"poll_timeout_seconds": 1}


def test_a_webhook_left_set_is_removed_then_taps_arrive_by_getupdates(live_gateway, fake_telegram):
    fake_telegram.webhook = {"url": "https://old.example/channels/ops-telegram/callback"}
    configure(fake_telegram, mode="polling", channel_keys=FAST_POLLS)
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = agent.pre_tool_use("oa__purchase_pay", {"amount": 5}).json()["confirmation_id"]
    deliver_outbox()
    card = posted_card(fake_telegram, confirmation_id)

    with running_connections():
        wait_until(lambda: connection_state(CHANNEL) == "connected", what="the long polling")
        assert fake_telegram.webhook is None
        (delete,) = fake_telegram.calls("deleteWebhook")
        assert delete.params.get("drop_pending_updates") in (None, "false", False)
        status, query_id = PollingTelegram(fake_telegram, live_gateway).tap(card, ALICE, "✅ Approve")
        assert status == 200
        assert PollingTelegram(fake_telegram, live_gateway).answer_to(query_id) == "Approved."

    assert ConfirmationRequest.objects.get(pk=confirmation_id).status == "approved"
    polls = fake_telegram.calls("getUpdates")
    assert polls[0].params.get("timeout") in ("0", 0, None) and polls[-1].params["timeout"] in ("1", 1)
    assert polls[0].params["allowed_updates"] == ["callback_query", "message"]
    agent.http.close()


def test_a_dropped_poll_is_reconnected_with_backoff_and_a_tap_after_it_still_works(live_gateway, fake_telegram, caplog):
    caplog.set_level(logging.INFO, logger="channels_ext")
    configure(fake_telegram, mode="polling", channel_keys=FAST_POLLS)
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = agent.pre_tool_use("oa__purchase_pay", {"amount": 5}).json()["confirmation_id"]
    deliver_outbox()
    card = posted_card(fake_telegram, confirmation_id)
    telegram = PollingTelegram(fake_telegram, live_gateway)

    with running_connections():
        wait_until(lambda: connection_state(CHANNEL) == "connected", what="the long polling")
        fake_telegram.fail_next("getUpdates", drop=True)
        fake_telegram.fail_next("getUpdates", status=502, description="Bad Gateway")
        wait_until(lambda: len(fake_telegram.calls("deleteWebhook")) == 3, what="two new polling sessions")
        wait_until(lambda: connection_state(CHANNEL) == "connected", what="the long polling again")
        status, query_id = telegram.tap(card, ALICE, "✅ Approve")
        assert telegram.answer_to(query_id) == "Approved."

    reconnecting = [r.getMessage() for r in caplog.records if "(polling): reconnecting" in r.getMessage()]
    assert len(reconnecting) == 2 and "getUpdates failed" in reconnecting[0] and "retrying in" in reconnecting[0]
    assert "Bad Gateway" in reconnecting[1]
    assert ConfirmationRequest.objects.get(pk=confirmation_id).status == "approved"
    agent.http.close()


def test_readyz_shows_the_polling_connection(fake_telegram):
    configure(fake_telegram, mode="polling", channel_keys=FAST_POLLS)
    assert Client().get("/readyz").json()["connections"][CHANNEL]["state"] == "down"

    with running_connections():
        wait_until(lambda: connection_state(CHANNEL) == "connected", what="the long polling")
        shown = Client().get("/readyz").json()["connections"][CHANNEL]

    assert (shown["state"], shown["mode"], shown["processes"], shown["detail"]) == (
        "connected", "polling", 1, "long polling getUpdates"
    )  # fmt: skip


def test_a_refused_bot_token_stops_channel_connections_with_a_clear_message(fake_telegram):
    fake_telegram.tokens.clear()  # the token was revoked with @BotFather's /revoke
    configure(fake_telegram, mode="polling")

    done = run_command()

    assert done.returncode == 2, done.stderr
    assert (
        f"CommandError: Telegram refused the bot token of channel '{CHANNEL}': check bot_token (ask @BotFather for "
        "the bot's token, or /revoke and use the new one) and run apply_config."
    ) in done.stderr
    assert BOT_TOKEN.split(":")[1] not in done.stdout + done.stderr
    failed = Client().get("/readyz").json()["connections"][CHANNEL]
    assert (failed["state"], failed["mode"]) == ("failed", "polling")


def test_the_callback_url_of_a_polling_channel_refuses_webhook_posts(live_gateway, fake_telegram):
    configure(fake_telegram, mode="polling")

    response = httpx.post(
        f"{live_gateway.url}/channels/{CHANNEL}/callback",
        json={"update_id": 1},
        headers={"X-Telegram-Bot-Api-Secret-Token": "anything"},
    )

    assert response.status_code == 403
    assert "long polling" in response.json()["error"]["message"]
