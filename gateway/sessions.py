"""The pages' session engine (SESSION_ENGINE): Django's database sessions, the read of a session by its
key a prepared statement — and, once this process knows whose session it is, the session and its user in
ONE statement.

Every page an approver opens, and every click they make, first reads their session, then the user it
holds (Django's `get_user`). Django composes the session read with the ORM on each request
(`Session.objects.get(session_key=…, expire_date__gt=now)`): in the side-by-side run's click that was
about a fifth of the CPU the page's thread spent, more than the decision's own statements
(docs/benchmarks.md). Here it is composed once per process and prepared on each connection
(`approvals.prepared.PreparedRead`, as a click's locked read is), by the key alone; an expired session is
then refused in Python exactly as Django's `expire_date > now` refuses it.

The user's id is inside the session's signed data, which only Python can read, so the user is a second
round trip — unless the process remembers whose the session was when it last read it (`_WHOSE`, a guess
and nothing more): then the session and that user, with the rows saying which person they are
(`selectors.user_by_id`), are read together (`PreparedPair`), in one snapshot, as fresh as two statements.
The user read that way is handed to the sign-in backend (`prefetched_user`) only if the session's own
data names that very user — a wrong guess (a session signed in again as someone else) costs the second
read, never the wrong user — and only within the request that read it.

Everything else — saving, cycling the key on sign-in, deleting on sign-out, clearing expired rows
(`manage.py clearsessions`) — is Django's `db` engine unchanged.
"""

from __future__ import annotations

import contextvars
import threading
from typing import Any

from django.contrib.auth import SESSION_KEY, get_user_model
from django.contrib.sessions.backends import db
from django.contrib.sessions.models import Session
from django.core.exceptions import ValidationError
from django.utils import timezone

from approvals.prepared import PreparedPair, PreparedRead
from approvals.selectors.people import USER_READ

_SESSION_READ = PreparedRead(lambda key: Session.objects.filter(pk=key))
_SESSION_AND_USER = PreparedPair(_SESSION_READ, USER_READ)

# session key -> the id of the user it held when this process last read it (a guess: checked every time).
_WHOSE: dict[str, str] = {}
_WHOSE_LOCK = threading.Lock()
WHOSE_MAX = 10_000  # sessions remembered; past it the memory starts again
# (user id, user) read with this request's session, for the sign-in backend's `get_user`.
_PREFETCHED: contextvars.ContextVar[tuple[str, Any] | None] = contextvars.ContextVar("prefetched_user", default=None)


def prefetched_user(user_id: Any) -> Any | None:
    """The user read in one statement with this request's session, if the session names that user (and it
    exists); taken once. None: read it yourself."""
    held = _PREFETCHED.get()
    if held is None or held[0] != str(user_id):
        return None
    _PREFETCHED.set(None)
    return held[1]


def _an_id(value: Any) -> bool:
    """Whether `value` is a user id (what a guess may be: it is sent as one)."""
    try:
        return get_user_model()._meta.pk.to_python(value) is not None
    except ValidationError:
        return False


class SessionStore(db.SessionStore):
    def __init__(self, session_key: str | None = None) -> None:
        super().__init__(session_key)
        _PREFETCHED.set(None)  # (a new request's store: nothing of another request's read is handed on)

    def _get_session_from_db(self) -> Session | None:
        guess = _WHOSE.get(self.session_key) if self.session_key else None
        if guess is None:
            session, user = _SESSION_READ.first(self.session_key), None
        else:
            session, user = _SESSION_AND_USER.first((self.session_key,), (guess,))
        if session is None or session.expire_date <= timezone.now():
            self._session_key = None  # as Django's: no such live session, a new one if anything is stored
            return None
        self._read_with = (guess, user)
        return session

    def load(self) -> dict[str, Any]:
        self._read_with = (None, None)
        data = super().load()
        whose = data.get(SESSION_KEY)
        if whose is not None and self.session_key and _an_id(whose):
            whose = str(whose)
            guess, user = self._read_with
            if user is not None and guess == whose:  # the session names the user read with it
                _PREFETCHED.set((whose, user))
            if guess != whose:
                with _WHOSE_LOCK:
                    if len(_WHOSE) >= WHOSE_MAX:
                        _WHOSE.clear()
                    _WHOSE[self.session_key] = whose
        return data
