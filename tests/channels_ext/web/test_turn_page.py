"""The approval page's "Approve all" of a turn, through real HTTP to the live gateway (a signed-in
session, the page's CSRF token, the form as the page drew it): it decides the calls the page listed
and no call that joined the turn since; a second submit changes nothing more; an edited list is
refused (docs/web-and-admin.md)."""

from __future__ import annotations

import html
import re
import uuid

import httpx
import pytest

from approvals.models import ApproverResponse, ConfirmationEvent
from approvals.services.clicks import NOT_ON_CARD, STALE_CARD
from gateway_contract import sign_shown_ids
from tests.channels_ext.web.conftest import PASSWORD
from tests.conftest import ask_in_turn, decisions

pytestmark = pytest.mark.django_db(transaction=True)

_HIDDEN = re.compile(r'<input type="hidden" name="(csrfmiddlewaretoken|shown)" value="([^"]*)"')
_FLASH = re.compile(r'<li class="(?:success|warning|error)" role="status">(.*?)</li>')


def signed_in(live_gateway, username: str) -> httpx.Client:
    """A browser-like session on the live gateway: signed in through the sign-in form."""
    session = httpx.Client(base_url=live_gateway.url, timeout=20)
    form = session.get("/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
    signed = session.post("/login/", data={"csrfmiddlewaretoken": token, "username": username, "password": PASSWORD})
    assert signed.status_code == 302, signed.text
    return session


def page_form(session: httpx.Client, confirmation_id: str) -> dict[str, str]:
    """The hidden fields of the decision form, as the page draws it now."""
    page = session.get(f"/approvals/{confirmation_id}/")
    assert page.status_code == 200
    return {name: html.unescape(value) for name, value in _HIDDEN.findall(page.text)}


def submit(
    session: httpx.Client, confirmation_id: str, fields: dict[str, str], **more: str
) -> tuple[int, list[str]]:
    """Press a whole-turn button of the form (`whole_turn` is set by the page's script): the status,
    and the page's messages after the redirect."""
    data = {**fields, "whole_turn": "1", "reason": "", "decision": "approve", **more}
    answer = session.post(f"/approvals/{confirmation_id}/", data=data)
    if answer.status_code == 302:
        answer = session.get(answer.headers["location"])
        return 302, [html.unescape(m) for m in _FLASH.findall(answer.text)]
    errors = re.findall(r'<ul class="errorlist[^"]*"><li>(.*?)</li>', answer.text)
    return answer.status_code, [html.unescape(m) for m in errors]



def test_approve_all_on_a_page_drawn_before_a_call_joined_decides_only_the_calls_it_listed(
    agent, people, live_gateway
):
    first, second = ask_in_turn(agent, 1), ask_in_turn(agent, 2)
    alice = signed_in(live_gateway, "alice")
    drawn = page_form(alice, second)  # alice opens the page: two calls, "Approve all 2"
    assert "Approve all 2" in alice.get(f"/approvals/{second}/").text
    later = ask_in_turn(agent, 3)  # the agent adds a call while the page is open

    status, flashed = submit(alice, second, drawn)

    assert (status, flashed) == (
        302,
        [
            "Approved 2 call(s) of this turn. 1 other call(s) of this turn, not shown on this card when it was "
            "drawn, are left pending."
        ],
    )
    assert [row[0] for row in decisions(first, second, later)] == ["approved", "approved", "pending"]
    assert set(ApproverResponse.objects.values_list("confirmation_id", "approver")) == {
        (uuid.UUID(pk), "web:alice") for pk in (first, second)
    }
    now = alice.get(f"/approvals/{later}/").text  # the page as it is now: the new call, pending, decidable
    assert "This turn: 3 calls, 1 pending" in now and 'id="approve"' in now

    # A double submit of the same form: nothing more.
    before = decisions(first, second, later)
    status, flashed = submit(alice, second, drawn)
    assert status == 302
    assert flashed[0].startswith("Nothing was changed. The calls this card showed are decided already. 1 other call(s)")
    assert decisions(first, second, later) == before

    # The form's list edited to name the new call (posted to its page) is refused: a 400 that changes nothing.
    text, signature = drawn["shown"].rsplit(":", 1)
    status, errors = submit(alice, later, {**drawn, "shown": f"{text.replace(first, later)}:{signature}"})
    assert status == 400
    assert errors == ["The list of calls to decide together was changed; reload the page and decide again."]
    assert decisions(first, second, later) == before


def test_a_whole_turn_form_without_its_list_or_with_another_turns_list_decides_nothing(
    agent, people, live_gateway
):
    first, second = ask_in_turn(agent, 1), ask_in_turn(agent, 2)
    other_turn = [ask_in_turn(agent, n, turn="t-2") for n in (3, 4)]
    alice = signed_in(live_gateway, "alice")
    drawn = page_form(alice, first)

    old_page = submit(alice, first, {"csrfmiddlewaretoken": drawn["csrfmiddlewaretoken"]})  # drawn before forms had it
    another_card = submit(alice, first, {**drawn, "shown": sign_shown_ids(other_turn[0], other_turn)})

    assert old_page == (302, [STALE_CARD])
    assert another_card == (302, [NOT_ON_CARD])
    assert decisions(first, second, *other_turn) == [("pending", None, 0)] * 4
    refused = ConfirmationEvent.objects.filter(confirmation_id=first, kind="refused_click")
    assert [e.actor for e in refused] == ["web:alice", "web:alice"]
