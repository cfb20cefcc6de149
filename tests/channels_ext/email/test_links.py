"""The e-mail channel beyond the contract: what the message holds, links that previewers and scanners
cannot trigger, links bound to one request and recipient that expire with the request and answer once,
SMTP failures, reminders, escalation and a turn's calls.

A real SMTP server (aiosmtpd) receives the mail; the links are followed over real HTTP on the live gateway.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import time
import zlib

import httpx
import pytest
from django.core import signing
from django.utils import timezone

from approvals.models import Channel, ConfirmationEvent, ConfirmationRequest, Outbox
from approvals.tasks import expire_due, run_timers
from channels_ext.email.links import Link, link_token, read_link
from tests.channels_ext.contract import TOOL, request_state
from tests.channels_ext.email.support import (
    ALICE,
    BOB,
    CHANNEL,
    SMTP_PASSWORD,
    anchors,
    card_mails,
    channel_yaml,
    configure,
    on_gateway,
    open_link,
    post_link,
    token_of,
)
from tests.conftest import apply_config, make_agent_client
from tests.fakes.smtp_server import SmtpServer
from tests.hooks.policy_support import deliver_outbox
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def ask(agent, args=None, **extra) -> str:
    answer = agent.pre_tool_use(TOOL, args or {"amount": 80000}, user_id="u-42", **extra).json()
    assert answer["decision"] == "pending", answer
    return answer["confirmation_id"]


@pytest.fixture
def agent(live_gateway, smtp_server):
    configure(smtp_server)
    client = make_agent_client(live_gateway, "purchasing-bot")
    yield client
    client.http.close()


def events(confirmation_id: str) -> list[str]:
    return list(ConfirmationEvent.objects.filter(confirmation_id=confirmation_id).values_list("kind", flat=True))


def test_each_approver_gets_a_text_and_html_message_whose_links_are_their_own(agent, smtp_server):
    confirmation_id = ask(agent, {"amount": 80000, "memo": "<script>alert(1)</script>"})
    deliver_outbox()

    mails = card_mails(smtp_server, (ALICE, BOB))

    for recipient, mail in mails.items():
        assert mail.message["From"] == "Approval Gateway <approvals@gateway.example>"
        assert mail.to == recipient and mail.rcpt_tos == (recipient,)
        assert mail.subject == f"Approval needed: purchasing-bot wants to run {TOOL}"
        assert mail.message.get_content_type() == "multipart/alternative"
        assert mail.header("Message-ID").endswith("@gateway.example>")
        assert mail.header("Auto-Submitted") == "auto-generated"  # no out-of-office replies
        assert "amount = 80000" in mail.text and "End user: u-42" in mail.text
        assert "<script>" not in mail.html and "&lt;script&gt;" in mail.html  # an argument cannot inject markup
        links = anchors(mail)
        assert list(links) == ["Approve", "Reject", "The request on the gateway's web page"]
        for label in ("Approve", "Reject"):
            assert f"{label}: {links[label]}" in mail.text  # the same links in the text part
            link = read_link(CHANNEL, token_of(links[label]))
            assert (link.confirmation_id, link.recipient, link.action) == (confirmation_id, recipient, label.lower())
    assert anchors(mails[ALICE])["Approve"] != anchors(mails[BOB])["Approve"]
    row = Outbox.objects.get(kind="card")
    assert set(row.message_ref["message_ids"]) == {ALICE, BOB}


def test_a_link_previewer_fetching_every_link_with_get_and_head_decides_nothing(agent, smtp_server, live_gateway):
    confirmation_id = ask(agent)
    deliver_outbox()
    mails = card_mails(smtp_server, (ALICE, BOB))
    before, kinds = request_state(confirmation_id), events(confirmation_id)

    for mail in mails.values():
        for url in anchors(mail).values():
            if "/channels/" not in url:
                continue
            for method in ("HEAD", "GET", "GET"):
                page = open_link(on_gateway(live_gateway, url), method=method)
                assert page.status == 200

    assert request_state(confirmation_id) == before
    assert events(confirmation_id) == kinds  # not even a refused click is recorded
    assert ConfirmationRequest.objects.get(pk=confirmation_id).status == "pending"


def test_the_link_shows_a_page_whose_post_decides_once_and_the_same_link_again_is_refused(
    agent, smtp_server, live_gateway
):
    confirmation_id = ask(agent)
    deliver_outbox()
    url = on_gateway(live_gateway, anchors(card_mails(smtp_server, (ALICE, BOB))[ALICE])["Approve"])

    page = open_link(url)
    assert page.has_form and f'id="recipient">{ALICE}<' in page.body
    assert page.body.count('name="link"') == 1  # the token goes back in the form's body
    assert ConfirmationRequest.objects.get(pk=confirmation_id).status == "pending"

    confirmed = post_link(live_gateway, page.token)

    assert (confirmed.status, confirmed.told) == (200, "Approved.")
    assert not confirmed.has_form
    confirmation = ConfirmationRequest.objects.get(pk=confirmation_id)
    assert (confirmation.status, confirmation.decided_by) == ("approved", f"email:{ALICE}")
    before = request_state(confirmation_id)
    again = post_link(live_gateway, page.token)
    assert again.told == f"Already approved by email:{ALICE}."
    assert request_state(confirmation_id) == before
    assert not open_link(url).has_form  # the page shows the outcome, without the form


def test_a_confirmation_without_a_reason_or_with_a_value_not_of_its_type_shows_the_form_again(
    live_gateway, smtp_server
):
    configure(smtp_server, gate_keys="        allow_edit: [amount]\n")
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = ask(agent)
    deliver_outbox()
    links = anchors(card_mails(smtp_server, (ALICE, BOB))[ALICE])
    assert list(links)[:3] == ["Approve", "Edit, then approve", "Reject"]
    before = request_state(confirmation_id)

    no_reason = post_link(live_gateway, token_of(links["Reject"]), reason="  ")
    edit_page = open_link(on_gateway(live_gateway, links["Edit, then approve"]))
    assert edit_page.edit_fields() == {"edit.amount": "80000"}
    not_a_number = post_link(live_gateway, edit_page.token, **{"edit.amount": "eighty"})

    assert (no_reason.status, no_reason.problem) == (400, "Please say why you are rejecting this call.")
    assert no_reason.has_form and 'name="reason"' in no_reason.body
    assert not_a_number.status == 400
    assert not_a_number.problem == "The value for amount must be a whole number, like 1200; eighty is not."
    assert not_a_number.edit_fields() == {"edit.amount": "eighty"}  # what was typed, to correct
    assert request_state(confirmation_id) == before
    assert post_link(live_gateway, edit_page.token, **{"edit.amount": "8000"}).told == "Approved with your edits."
    assert ConfirmationRequest.objects.get(pk=confirmation_id).approved_args == {"amount": 8000}
    agent.http.close()


def test_with_a_quorum_each_recipients_links_answer_once(live_gateway, smtp_server):
    configure(smtp_server, gate_keys="        approvals_required: 2\n")
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = ask(agent)
    deliver_outbox()
    mails = card_mails(smtp_server, (ALICE, BOB))
    alice = {label: token_of(url) for label, url in anchors(mails[ALICE]).items() if "/channels/" in url}

    assert post_link(live_gateway, alice["Approve"]).told == "Approval recorded (1 of 2)."
    before = request_state(confirmation_id)
    assert post_link(live_gateway, alice["Approve"]).told == "You have already answered this request."
    assert (
        post_link(live_gateway, alice["Reject"], reason="changed my mind").told
        == "You have already answered this request."
    )
    assert request_state(confirmation_id) == before

    assert post_link(live_gateway, token_of(anchors(mails[BOB])["Approve"])).told == "Approved."
    confirmation = ConfirmationRequest.objects.get(pk=confirmation_id)
    assert (confirmation.status, confirmation.decided_by) == ("approved", f"email:{BOB}")
    agent.http.close()


def _tampered(token: str, change) -> str:
    """The token's signed payload decoded, changed by `change`, encoded again, with the old signature."""
    payload, _, signature = token.partition(":")
    compressed = payload.startswith(".")
    raw = base64.urlsafe_b64decode(payload.lstrip(".") + "=" * (-len(payload.lstrip(".")) % 4))
    data = signing.JSONSerializer().loads(zlib.decompress(raw) if compressed else raw)
    changed = zlib.compress(signing.JSONSerializer().dumps(change(data)))
    return "." + base64.urlsafe_b64encode(changed).decode().rstrip("=") + ":" + signature


def test_a_link_changed_to_name_another_recipient_or_request_is_refused_and_changes_nothing(
    agent, smtp_server, live_gateway
):
    first = ask(agent)
    second = ask(agent, {"amount": 5})
    deliver_outbox()
    token = token_of(anchors(card_mails(smtp_server, (ALICE, BOB))[ALICE])["Approve"])
    assert read_link(CHANNEL, token).confirmation_id in (first, second)
    target = read_link(CHANNEL, token).confirmation_id
    other = second if target == first else first
    before = {pk: request_state(pk) for pk in (first, second)}

    as_bob = _tampered(token, lambda d: [d[0], BOB, *d[2:]])
    for_other = _tampered(token, lambda d: [other, *d[1:]])
    for forged in (as_bob, for_other):
        page = post_link(live_gateway, forged)
        assert page.status == 403
        assert page.problem.startswith("This link is not valid.")
        assert open_link(f"{live_gateway.url}/channels/{CHANNEL}/callback?link={forged}").status == 403
    # A link signed for another channel is worthless here too.
    elsewhere = link_token("other-email", Link(target, ALICE, "approve", None))
    assert post_link(live_gateway, elsewhere).status == 403

    assert {pk: request_state(pk) for pk in (first, second)} == before


def test_a_link_after_its_request_expired_is_refused_before_anything_is_looked_up(live_gateway, smtp_server):
    configure(smtp_server, timeout_seconds=1)
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = ask(agent)
    deliver_outbox()
    token = token_of(anchors(card_mails(smtp_server, (ALICE, BOB))[ALICE])["Approve"])
    deadline = read_link(CHANNEL, token).expires_at
    assert deadline == int(ConfirmationRequest.objects.get(pk=confirmation_id).expires_at.timestamp())
    wait_until(lambda: time.time() >= deadline + 0.1, what="the request's deadline")
    before, kinds = request_state(confirmation_id), events(confirmation_id)

    page = post_link(live_gateway, token)

    assert (page.status, page.problem) == (
        410,
        "This link has expired with its request; nothing can be decided with it.",
    )
    assert request_state(confirmation_id) == before and events(confirmation_id) == kinds
    opened = open_link(f"{live_gateway.url}/channels/{CHANNEL}/callback?link={token}")
    assert opened.status == 410 and not opened.has_form
    agent.http.close()


def test_a_link_opened_after_its_deadline_is_refused_and_shows_how_the_request_ended(live_gateway, smtp_server):
    """One rule past the deadline, whatever became of the request since: 410, the link has expired, the request
    read-only with its outcome — decided before the deadline, or expired (the sweep) after it."""
    configure(smtp_server, timeout_seconds=1)
    agent = make_agent_client(live_gateway, "purchasing-bot")
    expired_id = ask(agent)
    deliver_outbox()
    alices_link = anchors(card_mails(smtp_server, (ALICE, BOB))[ALICE])["Approve"]
    expires_at = ConfirmationRequest.objects.get(pk=expired_id).expires_at.timestamp()
    wait_until(lambda: time.time() > expires_at, what="the request's deadline")
    assert expire_due() == 1  # beat's sweep
    assert ConfirmationRequest.objects.get(pk=expired_id).status == "expired"
    # A request Bob approved before its deadline: Alice's link (the same deadline, signed) opened after it.
    configure(smtp_server)
    decided_id = ask(agent)
    assert post_link(live_gateway, link_token(CHANNEL, Link(decided_id, BOB, "approve", None))).status == 200
    late = link_token(CHANNEL, Link(decided_id, ALICE, "approve", int(time.time()) - 1))

    for url, outcome in (
        (on_gateway(live_gateway, alices_link), "⌛ Expired"),
        (f"{live_gateway.url}/channels/{CHANNEL}/callback?link={late}", f"✅ Approved by email:{BOB}"),
    ):
        opened = open_link(url)
        assert (opened.status, opened.problem) == (
            410,
            "This link has expired with its request; nothing can be decided with it.",
        )
        assert not opened.has_form
        assert f'<p id="decision-text">{outcome}' in opened.body, opened.body
    agent.http.close()


def test_a_get_of_the_callback_url_is_refused_by_kinds_whose_messages_carry_no_links(live_gateway, fake_slack):
    apply_config(
        f"""
channels:
  - {{name: ops, kind: slack, bot_token: xoxb-1-2-get, signing_secret: get-secret, channel_id: C0GET,
     api_base_url: "{fake_slack.base_url}"}}
"""
    )
    assert httpx.get(f"{live_gateway.url}/channels/ops/callback").status_code == 405


def test_a_temporary_smtp_refusal_is_retried_and_a_permanent_one_fails_the_request_closed(live_gateway, smtp_server):
    configure(smtp_server)
    agent = make_agent_client(live_gateway, "purchasing-bot")
    smtp_server.fail_next("451 4.7.1 Too many messages, slow down")
    first = ask(agent)

    deliver_outbox()

    row = Outbox.objects.get(confirmation_id=first, kind="card")
    assert (row.status, row.attempts) == ("pending", 1)
    assert row.last_error == "smtp send failed: 451 4.7.1 Too many messages, slow down"
    Outbox.objects.filter(pk=row.pk).update(next_attempt_at=timezone.now())
    deliver_outbox()
    row.refresh_from_db()
    assert (row.status, row.attempts) == ("sent", 2)
    assert len(card_mails(smtp_server, (ALICE, BOB))) == 2

    smtp_server.fail_next("550 5.1.1 Mailbox unavailable", stage="RCPT")
    second = ask(agent, {"amount": 7})
    deliver_outbox()

    confirmation = ConfirmationRequest.objects.get(pk=second)
    assert confirmation.status == "rejected"
    assert "smtp send failed: every recipient refused (550)" in confirmation.decision_reason
    assert Channel.objects.get(name=CHANNEL).last_error == "smtp send failed: every recipient refused (550)"
    agent.http.close()


def test_a_gate_whose_approvers_are_not_addresses_fails_closed_saying_so(live_gateway, smtp_server):
    configure(smtp_server, approvers=("U0ALICE",))  # a Slack member id, by mistake
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = ask(agent)

    deliver_outbox()

    confirmation = ConfirmationRequest.objects.get(pk=confirmation_id)
    assert confirmation.status == "rejected"
    assert confirmation.decision_reason.endswith(
        "the approvers of an email channel are e-mail addresses; 'U0ALICE' is not one"
    )
    assert smtp_server.mails() == []
    agent.http.close()


def test_the_smtp_login_is_used_and_its_password_kept_out_of_the_logs_and_the_admin(live_gateway, admin_client, caplog):
    caplog.set_level(logging.DEBUG)
    with SmtpServer(accounts={"gateway": SMTP_PASSWORD}) as smtp:
        configure(smtp, channel_keys={"smtp_username": "gateway", "smtp_password": SMTP_PASSWORD})
        agent = make_agent_client(live_gateway, "purchasing-bot")
        ask(agent)
        deliver_outbox()
        assert len(card_mails(smtp, (ALICE, BOB))) == 2  # logged in, then sent

        configure(smtp, channel_keys={"smtp_username": "gateway", "smtp_password": "not-the-password"})
        refused = ask(agent, {"amount": 3})
        deliver_outbox()

    assert Outbox.objects.get(confirmation_id=refused, kind="card").last_error.startswith("smtp send failed: 535 ")
    assert ConfirmationRequest.objects.get(pk=refused).status == "rejected"  # no card reached anyone
    gateway_logs = [r.getMessage() for r in caplog.records if not r.name.startswith("mail.log")]
    assert any("535" in line for line in gateway_logs)
    assert not any(SMTP_PASSWORD in line or "not-the-password" in line for line in gateway_logs)
    channel = Channel.objects.get(name=CHANNEL)
    page = admin_client.get(f"/admin/approvals/channel/{channel.pk}/change/").content.decode()
    assert "gateway" in page and "not-the-password" not in page and "••••••" in page
    agent.http.close()


def test_a_reminder_mails_the_approvers_who_have_not_answered_in_the_thread(live_gateway, smtp_server):
    configure(
        smtp_server,
        timeout_seconds=600,
        gate_keys="        approvals_required: 2\n        remind_after_seconds: 60\n",
    )
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = ask(agent)
    deliver_outbox()
    mails = card_mails(smtp_server, (ALICE, BOB))
    assert post_link(live_gateway, token_of(anchors(mails[ALICE])["Approve"])).told == "Approval recorded (1 of 2)."
    deliver_outbox()
    ConfirmationRequest.objects.filter(pk=confirmation_id).update(remind_at=timezone.now() - dt.timedelta(seconds=1))

    assert run_timers.apply().get()["reminded"] == 1
    deliver_outbox()

    assert [m.subject for m in smtp_server.mails(ALICE)] == [mails[ALICE].subject]  # alice answered: nothing more
    reminder = smtp_server.mails(BOB)[-1]
    assert reminder.subject == f"Reminder: {mails[BOB].subject}"
    assert reminder.header("In-Reply-To") == mails[BOB].header("Message-ID")
    assert reminder.text.startswith("Reminder")
    assert post_link(live_gateway, token_of(anchors(reminder)["Approve"])).told == "Approved."
    agent.http.close()


def test_a_request_escalated_to_an_email_channel_is_mailed_to_the_escalation_approvers(live_gateway, smtp_server):
    apply_config(
        f"""
channels:
  - {{name: web, kind: web}}{channel_yaml(smtp_server)}
agents:
  - name: purchasing-bot
    hooks:
      - kind: approval_gate
        tools: ["{TOOL}"]
        channel: web
        approvers: [alice]
        escalate_after_seconds: 60
        escalate_to: {{channel: {CHANNEL}, approvers: ["{BOB}"]}}
"""
    )
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = ask(agent)
    ConfirmationRequest.objects.filter(pk=confirmation_id).update(escalate_at=timezone.now() - dt.timedelta(seconds=1))
    assert run_timers.apply().get()["escalated"] == 1
    deliver_outbox()

    mail = card_mails(smtp_server, (BOB,))[BOB]
    assert smtp_server.mails(ALICE) == []

    assert post_link(live_gateway, token_of(anchors(mail)["Approve"])).told == "Approved."
    confirmation = ConfirmationRequest.objects.get(pk=confirmation_id)
    assert (confirmation.status, confirmation.decided_by) == ("approved", f"email:{BOB}")
    agent.http.close()


def test_each_call_of_a_turn_gets_its_own_message(live_gateway, smtp_server):
    configure(smtp_server)
    agent = make_agent_client(live_gateway, "purchasing-bot")
    turn = {"turn_id": "t-1"}
    first, second = ask(agent, {"amount": 1}, **turn), ask(agent, {"amount": 2}, **turn)
    deliver_outbox()

    mails = wait_until(lambda: len(smtp_server.mails(ALICE)) == 2 and smtp_server.mails(ALICE))
    assert {read_link(CHANNEL, token_of(anchors(m)["Approve"])).confirmation_id for m in mails} == {first, second}
    agent.http.close()


def test_the_message_shows_the_risk_rated_over_the_call_high_in_its_subject_and_in_the_decided_reply(
    live_gateway, smtp_server
):
    configure(smtp_server, gate_keys="        risk: 'args.amount > 10000 ? \"high\" : \"low\"'\n")
    agent = make_agent_client(live_gateway, "purchasing-bot")
    ask(agent, {"amount": 20000})
    deliver_outbox()
    mail = card_mails(smtp_server, (ALICE,))[ALICE]

    assert mail.subject == f"[High risk] Approval needed: purchasing-bot wants to run {TOOL}"
    assert "🔴 Risk: high (read the arguments before approving)" in mail.text
    assert "🔴 Risk: high</span>" in mail.html and "background:#cf222e" in mail.html  # the red badge

    assert post_link(live_gateway, token_of(anchors(mail)["Reject"]), reason="too much").told == "Rejected."
    deliver_outbox()
    reply = wait_until(lambda: [m for m in smtp_server.mails(ALICE) if m.header("In-Reply-To")], what="the reply")[0]
    assert reply.subject == f"Re: {mail.subject}"
    assert "🔴 Risk: high\r\n" in reply.text and "🔴 Risk: high</span>" in reply.html

    ask(agent, {"amount": 5})
    deliver_outbox()
    low = wait_until(lambda: [m for m in smtp_server.mails(ALICE) if m.subject.startswith("Approval needed")])[0]
    assert "🟢 Risk: low" in low.text and "(read the arguments" not in low.text
    agent.http.close()
