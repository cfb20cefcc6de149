"""A real SMTP server (aiosmtpd) on 127.0.0.1 for the e-mail channel's tests, recording what it receives.

Register with `pytest_plugins = ["tests.fakes.smtp_server"]` (tests/conftest.py does) to get
the `smtp_server` fixture. Django's SMTP backend talks to it exactly as to a relay; a test
can make it answer the next messages with an SMTP error (`fail_next`).
"""

from __future__ import annotations

import dataclasses
import email
import email.policy
import re
import socket
import threading
from collections import deque
from collections.abc import Iterator
from email.message import EmailMessage
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

_HREF = re.compile(r'href="([^"]+)"')


@dataclasses.dataclass(frozen=True)
class ReceivedMail:
    """One message as the server received it."""

    mail_from: str
    rcpt_tos: tuple[str, ...]
    message: EmailMessage

    @property
    def to(self) -> str:
        return str(self.message["To"])

    @property
    def subject(self) -> str:
        return str(self.message["Subject"])

    def header(self, name: str) -> str | None:
        value = self.message[name]
        return None if value is None else str(value)

    @property
    def text(self) -> str:
        return self.message.get_body(preferencelist=("plain",)).get_content()

    @property
    def html(self) -> str:
        return self.message.get_body(preferencelist=("html",)).get_content()

    def links(self) -> list[str]:
        """Every href of the HTML part, in order (HTML entities undone)."""
        import html

        return [html.unescape(href) for href in _HREF.findall(self.html)]


class _Handler:
    def __init__(self, server: SmtpServer) -> None:
        self.server = server

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str, options: list[str]) -> str:
        refusal = self.server._refusal("RCPT")
        if refusal:
            return refusal
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        refusal = self.server._refusal("DATA")
        if refusal:
            return refusal
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        self.server._received(ReceivedMail(envelope.mail_from, tuple(envelope.rcpt_tos), message))
        return "250 Message accepted for delivery"


class _BoundController(Controller):
    """aiosmtpd's threaded controller on a socket bound beforehand (port 0: a free port, no race)."""

    def __init__(self, handler: Any, sock: socket.socket, **smtp_options: Any) -> None:
        self._sock = sock
        super().__init__(handler, hostname="127.0.0.1", port=sock.getsockname()[1], **smtp_options)

    def _create_server(self):
        return self.loop.create_server(self._factory_invoker, sock=self._sock, ssl=self.ssl_context)


class SmtpServer:
    """aiosmtpd in a thread on 127.0.0.1:<free port>; with `accounts` ({login: password}) it offers
    AUTH (over plain text: a test server) and refuses mail from a client that has not logged in."""

    def __init__(self, accounts: dict[str, str] | None = None) -> None:
        self._lock = threading.Lock()
        self._mails: list[ReceivedMail] = []
        self._refusals: dict[str, deque[str]] = {}
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        options: dict[str, Any] = {}
        if accounts is not None:

            def authenticate(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
                known = isinstance(data, LoginPassword) and accounts.get(data.login.decode()) == data.password.decode()
                return AuthResult(success=known, handled=False)  # aiosmtpd answers 535 itself

            options = {"authenticator": authenticate, "auth_require_tls": False, "auth_required": True}
        self.controller = _BoundController(_Handler(self), sock, **options)

    def start(self) -> SmtpServer:
        self.controller.start()
        return self

    def stop(self) -> None:
        self.controller.stop()

    def __enter__(self) -> SmtpServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def fail_next(self, reply: str, *, stage: str = "DATA", times: int = 1) -> None:
        """Answer the next `times` DATA (or RCPT) commands with `reply`, e.g. "451 4.7.1 Try again later"."""
        with self._lock:
            self._refusals.setdefault(stage, deque()).extend([reply] * times)

    def mails(self, to: str | None = None) -> list[ReceivedMail]:
        """What was received (for `to` only, if given), oldest first."""
        with self._lock:
            return [m for m in self._mails if to is None or to in m.rcpt_tos]

    def _received(self, mail: ReceivedMail) -> None:
        with self._lock:
            self._mails.append(mail)

    def _refusal(self, stage: str) -> str | None:
        with self._lock:
            queue = self._refusals.get(stage)
            return queue.popleft() if queue else None


@pytest.fixture
def smtp_server() -> Iterator[SmtpServer]:
    server = SmtpServer().start()
    yield server
    server.stop()
