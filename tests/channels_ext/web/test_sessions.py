"""The pages' sessions (gateway.sessions.py): Django's database sessions, read by a prepared
statement — signed in, signed out, expired and forged exactly as Django's own engine has them — and, once
the process knows whose a session is, read with its user in one statement that is as fresh as two."""

from __future__ import annotations

import datetime as dt

import pytest
from django.conf import settings
from django.contrib.sessions.models import Session
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from gateway import sessions
from tests.channels_ext.web.test_page import page_url, pending, signed_in

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_gateway_reads_sessions_with_its_prepared_read(agent, people):
    assert settings.SESSION_ENGINE == "gateway.sessions"
    alice = signed_in("alice")

    assert alice.get(reverse("approval-inbox")).status_code == 200
    with connection.cursor() as cursor:  # (the test client's requests share this connection)
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    assert any('FROM "django_session"' in statement for statement in prepared), prepared


def test_a_signed_in_approver_decides_and_a_signed_out_one_is_sent_to_sign_in(agent, people):
    confirmation = pending(agent)
    alice = signed_in("alice")

    assert alice.post(page_url(confirmation), {"decision": "approve", "reason": ""}).status_code == 302
    confirmation.refresh_from_db()
    assert confirmation.status == "approved"

    other = pending(agent, amount=7)
    alice.post(reverse("approval-logout"))
    answer = alice.post(page_url(other), {"decision": "approve", "reason": ""})
    assert answer.status_code == 302 and answer["Location"].startswith(reverse("approval-login"))
    other.refresh_from_db()
    assert other.status == "pending"


def test_an_expired_session_is_no_session(agent, people):
    """Its row still there (`clearsessions` has not run), its expiry past: signed out, nothing decided."""
    confirmation = pending(agent)
    alice = signed_in("alice")
    key = alice.cookies[settings.SESSION_COOKIE_NAME].value
    Session.objects.filter(pk=key).update(expire_date=timezone.now() - dt.timedelta(seconds=1))

    answer = alice.post(page_url(confirmation), {"decision": "approve", "reason": ""})

    assert answer.status_code == 302 and answer["Location"].startswith(reverse("approval-login"))
    confirmation.refresh_from_db()
    assert confirmation.status == "pending"


@pytest.mark.parametrize("key", ["not-a-session-key-at-all", "x" * 40, "'; DROP TABLE django_session; --"])
def test_a_made_up_session_key_is_no_session(agent, people, key):
    confirmation = pending(agent)
    signed_in("alice")  # a real session exists beside the made-up one
    forger = Client()
    forger.cookies[settings.SESSION_COOKIE_NAME] = key

    answer = forger.post(page_url(confirmation), {"decision": "approve", "reason": ""})

    assert answer.status_code == 302 and answer["Location"].startswith(reverse("approval-login"))
    confirmation.refresh_from_db()
    assert confirmation.status == "pending"
    assert Session.objects.count() == 1


# --------------------------------------------------------------------------- the session and its user in one read


def reads_of_session_and_user(client: Client) -> list[str]:
    """The statements a request of `client` makes that read its session or its user (the inbox)."""
    with CaptureQueriesContext(connection) as captured:
        assert client.get(reverse("approval-inbox")).status_code == 200
    return [
        query["sql"] for query in captured.captured_queries
        if 'FROM "django_session"' in query["sql"] or query["sql"].startswith('SELECT "auth_user"')
    ]  # fmt: skip


def test_once_the_process_knows_whose_a_session_is_the_session_and_its_user_are_one_statement(agent, people):
    alice = signed_in("alice")

    first = reads_of_session_and_user(alice)
    then = reads_of_session_and_user(alice)

    assert len(first) == 2  # the session, then its user
    assert len(then) == 1 and '"auth_user"' in then[0] and '"django_session"' in then[0]


def test_a_user_deactivated_between_two_pages_is_signed_out_at_the_next(agent, people):
    confirmation = pending(agent)
    alice = signed_in("alice")
    assert alice.get(page_url(confirmation)).status_code == 200  # the process now knows whose the session is
    people["alice"].is_active = False
    people["alice"].save(update_fields=["is_active"])

    answer = alice.post(page_url(confirmation), {"decision": "approve", "reason": ""})

    assert answer.status_code == 302 and answer["Location"].startswith(reverse("approval-login"))
    confirmation.refresh_from_db()
    assert confirmation.status == "pending"


def test_a_password_changed_in_the_database_signs_the_session_out_at_the_next_page(agent, people):
    """Django's session hash is checked against the user read with the session: as fresh as ever."""
    confirmation = pending(agent)
    alice = signed_in("alice")
    assert alice.get(page_url(confirmation)).status_code == 200
    people["alice"].set_password("another-password")
    people["alice"].save(update_fields=["password"])

    answer = alice.post(page_url(confirmation), {"decision": "approve", "reason": ""})

    assert answer.status_code == 302 and answer["Location"].startswith(reverse("approval-login"))
    confirmation.refresh_from_db()
    assert confirmation.status == "pending"


def test_a_wrong_guess_of_whose_a_session_is_never_makes_its_holder_someone_else(agent, people):
    """The process's memory of whose a session is, set to bob's id (as if the key had been someone
    else's): the request is still alice's — the user read with the session is handed on only when the
    session itself names that user — and her click is recorded as hers."""
    confirmation = pending(agent)
    alice = signed_in("alice")
    key = alice.cookies[settings.SESSION_COOKIE_NAME].value
    sessions._WHOSE[key] = str(people["bob"].pk)

    answer = alice.post(page_url(confirmation), {"decision": "approve", "reason": ""})

    assert answer.status_code == 302
    confirmation.refresh_from_db()
    assert (confirmation.status, confirmation.decided_by) == ("approved", "web:alice")
    assert sessions._WHOSE[key] == str(people["alice"].pk)  # corrected from what the session says


def test_a_user_read_with_one_requests_session_is_not_handed_to_the_next_request():
    """What the sign-in backend may take (`prefetched_user`) belongs to the request whose session read
    it: a new request's session store starts empty."""
    sessions._PREFETCHED.set(("7", object()))
    sessions.SessionStore()  # the next request's

    assert sessions.prefetched_user("7") is None
