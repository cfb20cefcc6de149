"""The e-mail channel on the live gateway: configuring it, reading the mails, following their links."""

from __future__ import annotations

import dataclasses
import html
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
from django.conf import settings

from tests.channels_ext.contract import purchasing_gate
from tests.conftest import apply_config
from tests.fakes.smtp_server import ReceivedMail, SmtpServer
from tests.support import wait_until

CHANNEL = "ops-email"
ALICE = "alice@example.com"
BOB = "bob@example.com"
MALLORY = "mallory@example.com"  # not an approver
SENDER = "Approval Gateway <approvals@gateway.example>"
SMTP_PASSWORD = "smtp-pa55word-never-shown"

_ANCHOR = re.compile(r'<a href="([^"]+)"[^>]*>([^<]+)</a>')
_TOLD = re.compile(r'<p id="told"[^>]*>(.*?)</p>', re.S)
_PROBLEM = re.compile(r'<p id="problem"[^>]*>(.*?)</p>', re.S)
_HIDDEN_LINK = re.compile(r'<input type="hidden" name="link" value="([^"]+)">')
_TEXTAREA = re.compile(r'<textarea class="json" id="[^"]+" name="([^"]+)"[^>]*>(.*?)</textarea>', re.S)


def channel_yaml(smtp: SmtpServer, **more: Any) -> str:
    extra = "".join(f"    {key}: {value}\n" for key, value in more.items())
    return f"""
  - name: {CHANNEL}
    kind: email
    from_address: "{SENDER}"
    smtp_host: 127.0.0.1
    smtp_port: {smtp.port}
    smtp_security: none
{extra}"""


def configure(
    smtp: SmtpServer,
    *,
    timeout_seconds: int | None = 1800,
    approvers: tuple[str, ...] = (ALICE, BOB),
    gate_keys: str = "",
    channel_keys: dict[str, Any] | None = None,
) -> None:
    """The e-mail channel and purchasing-bot's gate on TOOL, whose approvers are `approvers`."""
    channels = "channels:" + channel_yaml(smtp, **(channel_keys or {}))
    apply_config(channels + purchasing_gate(CHANNEL, list(approvers), timeout_seconds=timeout_seconds, more=gate_keys))


def on_gateway(live_gateway: Any, url: str) -> str:
    """A link as mailed (under GATEWAY_PUBLIC_URL), pointed at the live gateway (as a reverse proxy would)."""
    assert url.startswith(settings.GATEWAY_PUBLIC_URL + "/"), url
    return live_gateway.url + url.removeprefix(settings.GATEWAY_PUBLIC_URL)


def token_of(url: str) -> str:
    return parse_qs(urlsplit(url).query)["link"][0]


def anchors(mail: ReceivedMail) -> dict[str, str]:
    """The HTML part's links by their text: "Approve", "Reject", "Edit, then approve", "Approve for …"."""
    return {html.unescape(text).strip(): html.unescape(href) for href, text in _ANCHOR.findall(mail.html)}


def card_mails(smtp: SmtpServer, recipients: tuple[str, ...]) -> dict[str, ReceivedMail]:
    """Wait until each recipient has the request's message; each one's message."""

    def delivered() -> dict[str, ReceivedMail] | None:
        found = {}
        for to in recipients:
            mails = [m for m in smtp.mails(to) if m.header("In-Reply-To") is None]
            if not mails:
                return None
            found[to] = mails[0]
        return found

    return wait_until(delivered, what=f"the approval mail to {', '.join(recipients)}")


@dataclasses.dataclass(frozen=True)
class Page:
    """A page the gateway answered a link with."""

    status: int
    body: str

    @property
    def told(self) -> str | None:
        found = _TOLD.search(self.body)
        return html.unescape(found.group(1)).strip() if found else None

    @property
    def problem(self) -> str | None:
        found = _PROBLEM.search(self.body)
        return html.unescape(found.group(1)).strip() if found else None

    @property
    def has_form(self) -> bool:
        return 'id="confirm"' in self.body

    @property
    def token(self) -> str:
        (token,) = _HIDDEN_LINK.findall(self.body)
        return html.unescape(token)

    def edit_fields(self) -> dict[str, str]:
        return {name: html.unescape(text) for name, text in _TEXTAREA.findall(self.body)}

    def form_action(self, live_gateway: Any) -> str:
        return live_gateway.url + re.search(
            r'<form method="post" id="confirm" class="decide" action="([^"]+)"', self.body
        ).group(1)


def open_link(url: str, *, method: str = "GET") -> Page:
    response = httpx.request(method, url, timeout=20)
    return Page(response.status_code, response.text)


def post_link(live_gateway: Any, token: str, **fields: str) -> Page:
    response = httpx.post(f"{live_gateway.url}/channels/{CHANNEL}/callback", data={"link": token, **fields}, timeout=20)
    return Page(response.status_code, response.text)
