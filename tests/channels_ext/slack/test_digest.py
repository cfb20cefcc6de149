"""Slack digests (issue 35, point 2; docs/slack.md, "Digests"): low-risk calls kept back and sent together,
through the gateway over real HTTP, a real Celery worker, PostgreSQL and FakeSlack (slack-sdk).

The digest tick is beat's; here the test makes the held cards old and calls the tick's function itself.
"""

from __future__ import annotations

import datetime as dt
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db.models import F
from django.utils import timezone

from approvals import services
from approvals.models import ApproverResponse, ConfirmationEvent, ConfirmationRequest, Digest, Outbox
from gateway_contract import sign_digest_ids, unsign_digest_ids
from tests.channels_ext.slack.test_end_to_end import (
    ALICE,
    BOT_TOKEN,
    MALLORY,
    SIGNING_SECRET,
    SLACK_CHANNEL_ID,
    block_text,
    notes_to,
    post_interaction,
)
from tests.conftest import AgentClient, apply_config, make_agent_client
from tests.fakes.slack_api import FakeSlack, block_actions_payload
from tests.support import rewrite_request, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

LOW_TOOL = "mail__send"
HIGH_TOOL = "bank__wire"


def configure(fake_slack: FakeSlack, *, digest: str = "{risks: [low], every_minutes: 10}", timeout: int = 1800) -> None:
    """#approvals with a digest of low-risk calls; mail__send is rated low, bank__wire high."""
    apply_config(
        f"""
channels:
  - name: ops-slack
    kind: slack
    bot_token: {BOT_TOKEN}
    signing_secret: {SIGNING_SECRET}
    channel_id: {SLACK_CHANNEL_ID}
    api_base_url: {fake_slack.base_url}
    digest: {digest}
agents:
  - name: purchasing-bot
    hooks:
      - kind: approval_gate
        name: mail-gate
        tools: ["{LOW_TOOL}"]
        channel: ops-slack
        approvers: ["{ALICE.id}"]
        timeout_seconds: {timeout}
        risk: low
      - kind: approval_gate
        name: wire-gate
        tools: ["{HIGH_TOOL}"]
        channel: ops-slack
        approvers: ["{ALICE.id}"]
        timeout_seconds: {timeout}
        risk: high
"""
    )


@pytest.fixture
def slack_digest_agent(fake_slack: FakeSlack, live_gateway, celery_worker) -> Any:
    configure(fake_slack)
    client = make_agent_client(live_gateway, "purchasing-bot")
    yield client
    # Let the worker finish this test's redraws while FakeSlack still answers.
    wait_until(lambda: not Outbox.objects.filter(status="pending").exists(), what="the outbox to drain")
    client.http.close()


def ask(agent: AgentClient, tool: str, n: int) -> str:
    answer = agent.pre_tool_use(tool, {"to": f"user{n}@example.com", "n": n}, user_id="u-42").json()
    assert answer["decision"] == "pending", answer
    return answer["confirmation_id"]


def decision_as_the_agent_learns_it(agent: AgentClient, tool: str, n: int) -> dict[str, Any]:
    """An agent asking and waiting for its answer (held by the gateway, then long-polling while pending)."""
    answer = agent.pre_tool_use(tool, {"to": f"user{n}@example.com", "n": n}, user_id="u-42", wait_seconds=30).json()
    deadline = timezone.now() + dt.timedelta(seconds=120)
    while answer.get("decision") == "pending" and timezone.now() < deadline:
        state = agent.wait(answer["confirmation_id"], timeout=30).json()
        if state["status"] != "pending":
            answer = {**answer, "decision": "allow" if state["status"] == "approved" else "deny", "state": state}
    return answer


def gather_now() -> int:
    """Beat's digest tick with the held cards made older than `every_minutes`."""
    Outbox.objects.filter(status="held").update(created_at=F("created_at") - dt.timedelta(minutes=11))
    return services.digests_gather()


def digest_messages(fake_slack: FakeSlack) -> list[dict[str, Any]]:
    return [c.json for c in fake_slack.calls("chat.postMessage") if c.json["text"].startswith("Digest:")]


def digest_button(message: dict[str, Any]) -> dict[str, Any]:
    (block,) = [b for b in message["blocks"] if b.get("block_id") == "digest_actions"]
    (button,) = block["elements"]
    return button


def press_digest(live_gateway, fake_slack: FakeSlack, user, value: str, note_to: str):
    """`user` presses "Approve these N" carrying `value` on the latest digest message."""
    return post_interaction(live_gateway, digest_click(fake_slack, user, value, note_to))


def digest_click(fake_slack: FakeSlack, user, value: str, note_to: str) -> dict[str, Any]:
    """The payload Slack sends for a press of "Approve these N" carrying `value` on the latest digest."""
    ref = Digest.objects.order_by("created_at").last().message_ref
    return block_actions_payload(
        action_id="approve_digest",
        value=value,
        user_id=user.id,
        user_name=user.name,
        trigger_id=f"trigger.{note_to}",
        response_url=fake_slack.response_url(note_to),
        channel_id=ref["channel"],
        message_ts=ref["ts"],
    )


def statuses(*ids: str) -> list[str]:
    rows = dict(ConfirmationRequest.objects.filter(pk__in=ids).values_list("pk", "status"))
    return [rows[ConfirmationRequest._meta.pk.to_python(pk)] for pk in ids]


def test_twenty_low_risk_calls_go_out_as_one_digest_and_approve_these_twenty_decides_exactly_those(
    slack_digest_agent, fake_slack, live_gateway
):
    agent = slack_digest_agent
    with ThreadPoolExecutor(max_workers=20, thread_name_prefix="waiting-agent") as pool:
        waiting = [pool.submit(decision_as_the_agent_learns_it, agent, LOW_TOOL, n) for n in range(1, 21)]
        wait_until(lambda: ConfirmationRequest.objects.count() == 20, what="the 20 calls to be asked")
        ids = [str(pk) for pk in ConfirmationRequest.objects.order_by("created_at").values_list("pk", flat=True)]
        assert set(ConfirmationRequest.objects.values_list("risk", flat=True)) == {"low"}

        # Held: nothing is posted, and the tick does nothing before the oldest card is every_minutes old.
        assert services.digests_gather() == 0
        assert fake_slack.calls("chat.postMessage") == []
        assert Outbox.objects.filter(kind="card", status="held").count() == 20

        # A high-risk call on the same channel is posted at once, on its own card.
        wire = ask(agent, HIGH_TOOL, 99)
        wait_until(lambda: len(fake_slack.calls("chat.postMessage")) == 1, what="the high-risk card")
        assert fake_slack.calls("chat.postMessage")[0].json["text"].startswith("🔴 High risk. Approval needed")
        wait_until(lambda: Outbox.objects.get(confirmation_id=wire, kind="card").status == "sent", what="the card sent")

        assert gather_now() == 1
        (posted,) = wait_until(lambda: digest_messages(fake_slack), what="the digest message")
        assert posted["text"] == "Digest: 20 of 20 calls waiting for approval"
        assert len(posted["blocks"]) <= 50
        text = block_text(posted["blocks"])
        args = {str(pk): n for pk, n in ConfirmationRequest.objects.values_list("pk", "tool_args__n")}
        digest = Digest.objects.get()
        assert set(digest.shown_ids) == set(ids)  # in the order the calls came
        for number, pk in enumerate(digest.shown_ids, start=1):
            n = args[pk]
            assert f"*{number}.* `{LOW_TOOL}` · purchasing-bot · 🟢 low — n = {n} · to = user{n}@example.com" in text
        item_rows = [b for b in posted["blocks"] if b.get("block_id", "").startswith("digest_item_")]
        assert len(item_rows) == 20 and [e["text"]["text"] for e in item_rows[0]["elements"]] == ["Approve 1", "Reject 1"]
        button = digest_button(posted)
        assert button["text"]["text"] == "Approve these 20"
        assert unsign_digest_ids(button["value"]) == (str(digest.pk), tuple(digest.shown_ids))
        wait_until(lambda: Digest.objects.get().message_ref is not None, what="the digest's delivery to be recorded")
        digest.refresh_from_db()
        assert ConfirmationEvent.objects.filter(kind="card_posted", confirmation_id__in=ids).count() == 20

        # A 21st low-risk call arrives after the digest was sent: it waits for the next one.
        late = ask(agent, LOW_TOOL, 21)
        assert Outbox.objects.get(confirmation_id=late, kind="card").status == "held"

        pressed = press_digest(live_gateway, fake_slack, ALICE, button["value"], "alice-digest")
        assert pressed.status_code == 200

        answers = [w.result(timeout=120) for w in waiting]
    assert [a["decision"] for a in answers] == ["allow"] * 20  # every waiting agent is told allow
    assert statuses(*ids) == ["approved"] * 20
    assert statuses(late, wire) == ["pending", "pending"]
    assert ApproverResponse.objects.filter(approver="slack:U0ALICE").count() == 20  # once each
    (note,) = wait_until(lambda: notes_to(fake_slack, "alice-digest"), what="alice's note")
    assert note["text"] == "Approved 20 call(s) of this digest."

    # The digest is redrawn with each call's outcome and no buttons left.
    def all_decided() -> dict[str, Any] | None:
        message = fake_slack.messages[(digest.message_ref["channel"], digest.message_ref["ts"])]
        return message if message["text"] == "Digest: 20 calls, all decided" else None

    final = wait_until(all_decided, what="the digest redrawn as decided")
    assert [b for b in final["blocks"] if b["type"] == "actions"] == []
    assert block_text(final["blocks"]).count("✅ Approved by <@U0ALICE>") == 20

    # The same click again (a double click, a replay): nothing more.
    again = press_digest(live_gateway, fake_slack, ALICE, button["value"], "alice-again")
    assert again.status_code == 200
    (note,) = wait_until(lambda: notes_to(fake_slack, "alice-again"), what="the second note")
    assert note["text"].startswith("Nothing was changed.")
    assert ApproverResponse.objects.count() == 20

    # The next tick sends the 21st in a digest of its own.
    assert gather_now() == 1
    second = wait_until(lambda: digest_messages(fake_slack)[1:], what="the next digest")[0]
    assert second["text"] == "Digest: 1 of 1 calls waiting for approval"
    assert "n = 21" in block_text(second["blocks"])
    assert unsign_digest_ids(digest_button(second)["value"])[1] == (late,)


def test_a_forged_or_tampered_approve_these_changes_nothing(slack_digest_agent, fake_slack, live_gateway):
    agent = slack_digest_agent
    shown = [ask(agent, LOW_TOOL, n) for n in (1, 2)]
    assert gather_now() == 1
    (posted,) = wait_until(lambda: digest_messages(fake_slack), what="the digest message")
    value = digest_button(posted)["value"]
    wait_until(lambda: Digest.objects.get().message_ref is not None, what="the digest's delivery to be recorded")
    later = ask(agent, LOW_TOOL, 3)  # not in the digest
    digest_id = str(Digest.objects.get().pk)
    before = sorted(ConfirmationRequest.objects.values_list("pk", "status", "decided_at"))

    # The signed list edited: a shown id swapped for another call, or an extra id added.
    text, signature = value.rsplit(":", 1)
    for forged in (f"{text.replace(shown[1], later)}:{signature}", f"{text},{later}:{signature}"):
        refused = press_digest(live_gateway, fake_slack, ALICE, forged, "forged")
        assert (refused.status_code, refused.json()["error"]["code"]) == (400, "callback_refused")

    # Even a list signed with this gateway's key is checked against what the digest showed.
    wider = sign_digest_ids(digest_id, [*shown, later])
    assert press_digest(live_gateway, fake_slack, ALICE, wider, "wider").status_code == 200
    (note,) = wait_until(lambda: notes_to(fake_slack, "wider"), what="the refusal note")
    assert note["text"] == "This click names calls that this digest does not show, so nothing was changed."
    assert ConfirmationEvent.objects.filter(kind="refused_click", confirmation_id=shown[0]).exists()

    # Someone who may not approve presses the real button: each call refuses them.
    assert press_digest(live_gateway, fake_slack, MALLORY, value, "mallory").status_code == 200
    (note,) = wait_until(lambda: notes_to(fake_slack, "mallory"), what="mallory's note")
    assert note["text"].startswith("Nothing was changed. 2 left unchanged:")

    assert sorted(ConfirmationRequest.objects.values_list("pk", "status", "decided_at")) == before
    assert ApproverResponse.objects.count() == 0


def test_a_digested_call_still_expires_at_its_deadline(slack_digest_agent, fake_slack, live_gateway):
    agent = slack_digest_agent
    first, second = ask(agent, LOW_TOOL, 1), ask(agent, LOW_TOOL, 2)
    assert gather_now() == 1
    (posted,) = wait_until(lambda: digest_messages(fake_slack), what="the digest message")
    assert posted["text"] == "Digest: 2 of 2 calls waiting for approval"
    wait_until(lambda: Digest.objects.get().message_ref is not None, what="the digest's delivery to be recorded")
    held_only = ask(agent, LOW_TOOL, 3)  # after the digest: held for the next one

    # The deadlines of the first call (in the digest) and the third (still held) pass.
    rewrite_request([first, held_only], expires_at=timezone.now() - dt.timedelta(seconds=1))
    assert services.confirmation_expire_due() == 2

    assert statuses(first, second, held_only) == ["expired", "pending", "expired"]
    assert agent.wait(first, timeout=5).json()["status"] == "expired"
    digest = Digest.objects.get()

    def redrawn() -> dict[str, Any] | None:
        message = fake_slack.messages[(digest.message_ref["channel"], digest.message_ref["ts"])]
        return message if message["text"] == "Digest: 1 of 2 calls waiting for approval" else None

    message = wait_until(redrawn, what="the digest redrawn with the expiry")
    assert "⌛ Expired" in block_text(message["blocks"])
    assert unsign_digest_ids(digest_button(message)["value"])[1] == (second,)  # "Approve these 1": what is pending

    # The expired held call is left out of the next digest: there is nothing to send.
    assert gather_now() == 0
    assert len(digest_messages(fake_slack)) == 1
    assert Outbox.objects.get(confirmation_id=held_only, kind="card").status == "digested"


def test_an_individual_button_in_a_digest_decides_one_call(slack_digest_agent, fake_slack, live_gateway):
    agent = slack_digest_agent
    first, second = ask(agent, LOW_TOOL, 1), ask(agent, LOW_TOOL, 2)
    assert gather_now() == 1
    (posted,) = wait_until(lambda: digest_messages(fake_slack), what="the digest message")
    wait_until(lambda: Digest.objects.get().message_ref is not None, what="the digest's delivery to be recorded")
    (row,) = [b for b in posted["blocks"] if b.get("block_id") == "digest_item_2"]
    approve_2 = row["elements"][0]
    digest = Digest.objects.get()
    payload = block_actions_payload(
        action_id="approve", value=approve_2["value"], user_id=ALICE.id, user_name=ALICE.name,
        trigger_id="trigger.one", response_url=fake_slack.response_url("one"),
        channel_id=digest.message_ref["channel"], message_ts=digest.message_ref["ts"],
    )  # fmt: skip
    assert post_interaction(live_gateway, payload).status_code == 200

    assert statuses(first, second) == ["pending", "approved"]

    def redrawn() -> dict[str, Any] | None:
        message = fake_slack.messages[(digest.message_ref["channel"], digest.message_ref["ts"])]
        return message if message["text"] == "Digest: 1 of 2 calls waiting for approval" else None

    message = wait_until(redrawn, what="the digest redrawn")
    assert unsign_digest_ids(digest_button(message)["value"])[1] == (first,)
    assert [b["block_id"] for b in message["blocks"] if b.get("block_id", "").startswith("digest_item_")] == ["digest_item_1"]


def test_a_digest_slack_refuses_for_good_fails_its_calls_closed(slack_digest_agent, fake_slack, live_gateway):
    agent = slack_digest_agent
    first, second = ask(agent, LOW_TOOL, 1), ask(agent, LOW_TOOL, 2)
    fake_slack.fail_next("chat.postMessage", body={"ok": False, "error": "channel_not_found"})

    assert gather_now() == 1

    wait_until(lambda: statuses(first, second) == ["rejected", "rejected"], what="the calls to fail closed")
    state = agent.wait(first, timeout=5).json()
    assert state["decided_by"] == "gateway"
    assert state["reason"].startswith("the digest could not be delivered to channel ops-slack:")
    assert Outbox.objects.get(kind="digest").status == "failed"


def test_held_cards_of_a_channel_whose_digest_is_removed_are_posted_one_by_one(
    slack_digest_agent, fake_slack, live_gateway
):
    agent = slack_digest_agent
    held = ask(agent, LOW_TOOL, 1)
    assert fake_slack.calls("chat.postMessage") == []
    apply_config(  # the same channel, its digest: key taken out
        f"""
channels:
  - name: ops-slack
    kind: slack
    bot_token: {BOT_TOKEN}
    signing_secret: {SIGNING_SECRET}
    channel_id: {SLACK_CHANNEL_ID}
    api_base_url: {fake_slack.base_url}
"""
    )

    assert services.digests_gather() == 0

    wait_until(lambda: Outbox.objects.get(confirmation_id=held, kind="card").status == "sent", what="the card sent")
    (posted,) = fake_slack.calls("chat.postMessage")
    assert posted.json["text"] == f"Approval needed: purchasing-bot wants to run {LOW_TOOL}"
    assert Digest.objects.count() == 0
    # And a new low-risk call on the channel is posted at once.
    ask(agent, LOW_TOOL, 2)
    wait_until(lambda: len(fake_slack.calls("chat.postMessage")) == 2, what="the new call's own card")


def test_a_digested_call_neither_joins_its_turns_card_nor_is_joined(slack_digest_agent, fake_slack, live_gateway):
    agent = slack_digest_agent

    def in_turn(tool: str, n: int) -> str:
        answer = agent.pre_tool_use(tool, {"n": n}, turn_id="t-1", user_id="u-42").json()
        assert answer["decision"] == "pending", answer
        return answer["confirmation_id"]

    low = in_turn(LOW_TOOL, 1)
    high = in_turn(HIGH_TOOL, 2)  # the turn's first call is held: this one gets its own card, at once
    low_again = in_turn(LOW_TOOL, 3)  # and does not join the high one's card either
    rows = dict(ConfirmationRequest.objects.values_list("pk", "batch_lead_id"))
    assert set(rows.values()) == {None}
    wait_until(lambda: len(fake_slack.calls("chat.postMessage")) == 1, what="the high-risk card")
    cards = dict(Outbox.objects.filter(kind="card").values_list("confirmation_id", "status"))
    assert [cards[ConfirmationRequest._meta.pk.to_python(pk)] for pk in (low, low_again)] == ["held", "held"]
    assert cards[ConfirmationRequest._meta.pk.to_python(high)] in ("pending", "sent")


def test_two_simultaneous_approve_these_clicks_decide_each_call_once(slack_digest_agent, fake_slack, live_gateway):
    agent = slack_digest_agent
    ids = [ask(agent, LOW_TOOL, n) for n in range(1, 6)]
    assert gather_now() == 1
    (posted,) = wait_until(lambda: digest_messages(fake_slack), what="the digest message")
    wait_until(lambda: Digest.objects.get().message_ref is not None, what="the digest's delivery to be recorded")
    value = digest_button(posted)["value"]

    payloads = [digest_click(fake_slack, ALICE, value, f"click-{n}") for n in (1, 2)]
    with ThreadPoolExecutor(max_workers=2) as pool:  # (the threads only speak HTTP)
        clicks = [pool.submit(post_interaction, live_gateway, payload) for payload in payloads]
        assert [c.result().status_code for c in clicks] == [200, 200]

    assert statuses(*ids) == ["approved"] * 5
    assert ApproverResponse.objects.count() == 5
    assert ConfirmationEvent.objects.filter(kind="approved").count() == 5
    wait_until(lambda: len(notes_to(fake_slack, "click-1") + notes_to(fake_slack, "click-2")) == 2, what="both notes")
    notes = notes_to(fake_slack, "click-1") + notes_to(fake_slack, "click-2")
    approved = sum(int(n["text"].split()[1]) for n in notes if n["text"].startswith("Approved "))
    assert approved == 5  # between them, the two clicks approved each call once


def test_the_admin_shows_which_digest_showed_a_card(slack_digest_agent, fake_slack, live_gateway):
    from django.contrib.auth.models import User
    from django.test import Client

    confirmation_id = ask(slack_digest_agent, LOW_TOOL, 1)
    assert gather_now() == 1
    digest = Digest.objects.get()
    client = Client()
    client.force_login(User.objects.create_superuser("olga", "olga@example.com", "pw"))

    listing = client.get("/admin/approvals/outbox/", {"status": "digested"})
    request_page = client.get(f"/admin/approvals/confirmationrequest/{confirmation_id}/change/")

    assert listing.status_code == request_page.status_code == 200
    assert f"digest {digest.pk} → ops-slack (1 call)" in listing.content.decode()
    assert f"digest {digest.pk} → ops-slack (1 call)" in request_page.content.decode()


def test_a_high_risk_call_slipped_into_a_digest_row_is_not_approved_from_it(slack_digest_agent, fake_slack, live_gateway):
    """Someone with database access adds a high-risk call to a digest's list (the ids a digest keeps are not
    signed; a request's risk is): "Approve these" still leaves it pending."""
    agent = slack_digest_agent
    low = ask(agent, LOW_TOOL, 1)
    assert gather_now() == 1
    wait_until(lambda: Digest.objects.get().message_ref is not None, what="the digest's delivery to be recorded")
    wire = ask(agent, HIGH_TOOL, 2)
    digest = Digest.objects.get()
    Digest.objects.filter(pk=digest.pk).update(shown_ids=[low, wire])
    value = sign_digest_ids(str(digest.pk), [low, wire])  # as a message drawn from the edited row would carry

    assert press_digest(live_gateway, fake_slack, ALICE, value, "alice").status_code == 200

    assert statuses(low, wire) == ["approved", "pending"]
    (note,) = wait_until(lambda: notes_to(fake_slack, "alice"), what="alice's note")
    assert note["text"] == "Approved 1 call(s) of this digest. 1 high-risk call(s) left pending: decide each on its own."
