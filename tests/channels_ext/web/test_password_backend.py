"""Local passwords (gateway/auth_backends.py): the signed-in user read by a prepared statement, the sessions
Django's own backend signed in before still signed in, a wrong password checked once, and a session's
user refused exactly as Django refuses it (gone, deactivated, password changed, an id that is not one)."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, user_login_failed
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.contrib.auth.models import User
from django.contrib.sessions.backends.db import SessionStore
from django.db import connection
from django.test import Client
from django.urls import reverse

from tests.channels_ext.web.conftest import PASSWORD
from tests.channels_ext.web.test_page import page_url, pending

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD_BACKEND = "gateway.auth_backends.PasswordBackend"
DJANGOS_BACKEND = "django.contrib.auth.backends.ModelBackend"


def sign_in_on_the_page(username: str, password: str) -> tuple[Client, int]:
    client = Client()
    answer = client.post(reverse("approval-login"), {"username": username, "password": password})
    return client, answer.status_code


def decides(client: Client, confirmation) -> bool:
    answer = client.post(page_url(confirmation), {"decision": "approve", "reason": ""})
    confirmation.refresh_from_db()
    return answer.status_code == 302 and confirmation.status == "approved"


def signed_out(client: Client) -> bool:
    answer = client.get(reverse("approval-inbox"))
    return answer.status_code == 302 and answer["Location"].startswith(reverse("approval-login"))


def test_a_password_sign_in_is_the_password_backends_and_its_user_is_read_prepared(agent, people):
    alice, status = sign_in_on_the_page("alice", PASSWORD)
    assert status == 302
    session = SessionStore(alice.cookies[settings.SESSION_COOKIE_NAME].value)
    assert session[BACKEND_SESSION_KEY] == PASSWORD_BACKEND

    assert decides(alice, pending(agent))
    with connection.cursor() as cursor:  # (the test client's requests share this connection)
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    assert any('FROM "auth_user"' in statement for statement in prepared), prepared


def test_a_session_djangos_own_backend_signed_in_before_stays_signed_in(agent, people):
    alice = Client()
    alice.force_login(people["alice"], backend=DJANGOS_BACKEND)  # as sessions were signed in before
    assert SessionStore(alice.cookies[settings.SESSION_COOKIE_NAME].value)[BACKEND_SESSION_KEY] == DJANGOS_BACKEND

    assert decides(alice, pending(agent))


class CountingHasher(PBKDF2PasswordHasher):
    """Django's default hasher (few iterations: a test), counting the hashes it computes."""

    iterations = 1000
    computed = 0

    def encode(self, password, salt, iterations=None):
        CountingHasher.computed += 1
        return super().encode(password, salt, iterations)


@pytest.mark.parametrize("username", ["alice", "nobody-of-that-name"])
def test_a_wrong_password_is_checked_once_and_fails_as_django_fails_it(settings, people, username):
    settings.PASSWORD_HASHERS = ["tests.channels_ext.web.test_password_backend.CountingHasher"]
    people["alice"].set_password(PASSWORD)
    people["alice"].save()
    failed = []

    def on_failure(**kwargs):
        failed.append(kwargs["credentials"]["username"])

    user_login_failed.connect(on_failure)
    try:
        CountingHasher.computed = 0
        client, status = sign_in_on_the_page(username, "not the password")
        # one hash: the password checked (or, for no such user, the same work done to hide that) — not
        # again by ModelBackend, listed after for older sessions
        assert CountingHasher.computed == 1
    finally:
        user_login_failed.disconnect(on_failure)
    assert status == 200  # the sign-in page again, with its error
    assert failed == [username]
    assert signed_out(client)

    alice, status = sign_in_on_the_page("alice", PASSWORD)
    assert status == 302 and not signed_out(alice)


def test_a_deactivated_user_is_signed_out_and_cannot_sign_in(agent, people):
    alice, _ = sign_in_on_the_page("alice", PASSWORD)
    User.objects.filter(username="alice").update(is_active=False)

    assert signed_out(alice)
    confirmation = pending(agent)
    assert not decides(alice, confirmation)
    _, status = sign_in_on_the_page("alice", PASSWORD)
    assert status == 200


def test_a_password_changed_elsewhere_signs_the_session_out(agent, people):
    alice, _ = sign_in_on_the_page("alice", PASSWORD)
    people["alice"].set_password("a new password entirely")
    people["alice"].save()

    assert signed_out(alice)
    assert not decides(alice, pending(agent))


def test_a_deleted_user_is_signed_out(agent, people):
    carol, _ = sign_in_on_the_page("carol", PASSWORD)
    User.objects.filter(username="carol").delete()

    assert signed_out(carol)


@pytest.mark.parametrize("user_id", ["999999999", "-1", "0"])
def test_a_session_holding_an_id_that_is_no_user_is_no_user(agent, people, user_id):
    """A session naming a user that does not exist (written with the gateway's own session store, as only
    someone holding its secret could): no user, signed out, nothing decided. (An id that is not a number
    at all Django refuses before any backend is asked.)"""
    session = SessionStore()
    session[SESSION_KEY] = user_id
    session[BACKEND_SESSION_KEY] = PASSWORD_BACKEND
    session[HASH_SESSION_KEY] = people["alice"].get_session_auth_hash()
    session.create()
    forger = Client()
    forger.cookies[settings.SESSION_COOKIE_NAME] = session.session_key

    assert signed_out(forger)
    confirmation = pending(agent)
    assert not decides(forger, confirmation)
