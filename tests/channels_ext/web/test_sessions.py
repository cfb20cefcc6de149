"""The pages' sessions (gateway.sessions.py): Django's database sessions, read by a prepared
statement — signed in, signed out, expired and forged exactly as Django's own engine has them."""

from __future__ import annotations

import datetime as dt

import pytest
from django.conf import settings
from django.contrib.sessions.models import Session
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

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
