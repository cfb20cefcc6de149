"""Local passwords (AUTHENTICATION_BACKENDS): Django's ModelBackend, with the signed-in user read by a
prepared statement and a wrong password refused once.

Every page an approver opens and every click they make reads the user their session holds (Django's
`get_user`). ModelBackend composes that read with the ORM on each request; here it is prepared once per
database connection (`selectors.user_by_id`, as the session itself is: gateway/sessions.py) — or, once the
process knows whose a session is, read with the session in one statement (`sessions.prefetched_user`).

Django's own ModelBackend stays listed after this one, for the sessions signed in through it before this
backend existed (a session names the backend that signed it in): they stay signed in and read their
user as before until they sign out or expire. So that a wrong password is not checked twice (once here,
once by ModelBackend: twice the hashing for every failed attempt), this backend ends the attempt itself
(`PermissionDenied`, Django's "stop here": the attempt fails and `user_login_failed` is sent as usual).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import PermissionDenied

from approvals import selectors
from gateway.sessions import prefetched_user


class PasswordBackend(ModelBackend):
    def authenticate(self, request: Any, username: str | None = None, password: str | None = None, **kwargs: Any) -> Any:
        user = super().authenticate(request, username=username, password=password, **kwargs)
        name = username if username is not None else kwargs.get(get_user_model().USERNAME_FIELD)
        if user is None and name is not None and password is not None:
            raise PermissionDenied  # checked here; ModelBackend, listed after, would only check it again
        return user

    def get_user(self, user_id: Any) -> Any | None:
        # (read in one statement with the request's session when the process knew whose it was)
        user = prefetched_user(user_id) or selectors.user_by_id(user_id)
        return user if user is not None and self.user_can_authenticate(user) else None
