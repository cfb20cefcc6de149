"""The pages' session engine (SESSION_ENGINE): Django's database sessions, the read of a session by its key a prepared statement.

Every page an approver opens, and every click they make on one, first reads their session. Django
composes that read with the ORM on each request (`Session.objects.get(session_key=…,
expire_date__gt=now)`): in the side-by-side run's click that was about a fifth of the CPU the page's
thread spent, more than the decision's own statements (docs/benchmarks.md). Here it is composed once
per process and prepared on each connection (`approvals.prepared.PreparedRead`, as a click's locked
read is), by the key alone; an expired session is then refused in Python exactly as Django's
`expire_date > now` refuses it. Everything else — saving, cycling the key on sign-in, deleting on
sign-out, clearing expired rows (`manage.py clearsessions`) — is Django's `db` engine unchanged.
"""

from __future__ import annotations

from django.contrib.sessions.backends import db
from django.contrib.sessions.models import Session
from django.utils import timezone

from approvals.prepared import PreparedRead

_SESSION_READ = PreparedRead(lambda key: Session.objects.filter(pk=key))


class SessionStore(db.SessionStore):
    def _get_session_from_db(self) -> Session | None:
        session = _SESSION_READ.first(self.session_key)
        if session is None or session.expire_date <= timezone.now():
            self._session_key = None  # as Django's: no such live session, a new one if anything is stored
            return None
        return session
