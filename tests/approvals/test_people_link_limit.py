"""/people/link/ is rate-limited per signed-in user (docs/approving.md, "People"): each one-time link is a
message the gateway posts to an account the user names, so a user may ask for a few per window; past them
the page says so (429, Retry-After) and nothing is sent. Another user is not affected."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from approvals.models import LinkToken
from approvals.services.people import LINK_OFFER_WINDOW_SECONDS, LINK_OFFERS_PER_WINDOW
from tests.conftest import apply_config
from tests.fakes.slack_api import FakeSlack
from tests.support import InThread, SignedIn

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "correct horse battery staple"


def slack_channel(fake_slack: FakeSlack) -> None:
    apply_config(
        f"""
channels:
  - {{name: ops-slack, kind: slack, bot_token: xoxb-1-2-limit, signing_secret: limit-secret, channel_id: C0LIMIT,
     api_base_url: "{fake_slack.base_url}"}}
agents: []
"""
    )


def direct_messages(fake_slack: FakeSlack) -> list[str]:
    return [c.json["channel"] for c in fake_slack.calls("chat.postMessage")]


def test_a_user_asking_for_too_many_links_is_refused_saying_so_and_another_user_is_not(fake_slack, live_gateway):
    slack_channel(fake_slack)
    for name in ("alice", "bob"):
        User.objects.create_user(name, password=PASSWORD)
    alice, bob = SignedIn(live_gateway.url, "alice", PASSWORD), SignedIn(live_gateway.url, "bob", PASSWORD)
    accounts = [f"U0ALICE{n}" for n in range(LINK_OFFERS_PER_WINDOW + 3)]

    # All at once: the count is exact under concurrency (one conditional statement), not read-then-written.
    asks = [InThread(alice.post, "/people/link/", {"channel": "ops-slack", "account": a}) for a in accounts]
    answers = [ask.result() for ask in asks]

    assert sorted(r.status_code for r in answers) == [200] * LINK_OFFERS_PER_WINDOW + [429] * 3
    refused = next(r for r in answers if r.status_code == 429)
    minutes = LINK_OFFER_WINDOW_SECONDS // 60
    assert SignedIn.messages(refused) == [
        f"Too many links asked for: at most {LINK_OFFERS_PER_WINDOW} every {minutes} minutes. "
        f"Try again in {minutes} minutes."
    ]
    assert 0 < int(refused.headers["Retry-After"]) <= LINK_OFFER_WINDOW_SECONDS
    assert len(direct_messages(fake_slack)) == LINK_OFFERS_PER_WINDOW == LinkToken.objects.count()

    # Bob's asks are his own; Alice's next one is refused like the last ones, sending nothing.
    assert bob.post("/people/link/", {"channel": "ops-slack", "account": "U0BOB"}).status_code == 200
    assert alice.post("/people/link/", {"channel": "ops-slack", "account": "U0ALICE9"}).status_code == 429
    assert direct_messages(fake_slack).count("U0BOB") == 1
    assert "U0ALICE9" not in direct_messages(fake_slack)
    alice.close()
    bob.close()
