"""The links in an approval e-mail: signed, bound to one request, one recipient and one action.

A link is `/channels/<name>/callback?link=<token>` under `GATEWAY_PUBLIC_URL`.
The token is Django's `signing.dumps` of `[confirmation id, recipient, action,
deadline]` (HMAC-SHA256 with `SECRET_KEY`, salted with the channel's name, so a
link of one channel is worthless on another). Opening it (GET, HEAD) only
shows a page; the page's form POSTs the token back, and only that decides
(docs/email.md §4).

- **Bound to one request and recipient**: both are inside the signed token, and
  the answer is recorded as `email:<recipient>`; changing either breaks the
  signature.
- **Expires with the request**: the deadline is the request's `expires_at` when
  the mail was sent; after it the link decides nothing: opened, it is answered
  410 with the request read-only (and its outcome); POSTed, 410 before anything
  is looked up.
- **Single-use**: a recipient answers a request once. The first POST records
  their answer (one `ApproverResponse` per approver, a unique row); any later
  POST of that link, or of another of their links for the request, changes
  nothing and says why ("Already approved by …", "You have already answered
  this request.").
"""

from __future__ import annotations

import dataclasses
import re
import time
from typing import Any

from django.core import signing

SALT = "channels_ext.email.link"
APPROVE = "approve"
REJECT = "reject"
EDIT = "edit"
GRANT_PREFIX = "grant-"  # + the index of the offered scope
_ACTION = re.compile(r"approve|reject|edit|grant-\d{1,2}")


class BadLink(Exception):
    """A link this channel did not make (or one cut short by a mail program)."""


@dataclasses.dataclass(frozen=True)
class Link:
    """What a link's token says."""

    confirmation_id: str
    recipient: str  # the address it was mailed to: who answers with it
    action: str  # approve | reject | edit | grant-<n>
    expires_at: int | None  # unix seconds; None: the request has no deadline

    @property
    def grant(self) -> int | None:
        return int(self.action.removeprefix(GRANT_PREFIX)) if self.action.startswith(GRANT_PREFIX) else None

    def expired(self, now: float | None = None) -> bool:
        return self.expires_at is not None and (time.time() if now is None else now) >= self.expires_at


def link_token(channel: str, link: Link) -> str:
    """The signed token of `link` on channel `channel` (URL-safe)."""
    data: list[Any] = [link.confirmation_id, link.recipient, link.action, link.expires_at]
    return signing.dumps(data, salt=f"{SALT}:{channel}", compress=True)


def read_link(channel: str, token: str) -> Link:
    """The link a token names; BadLink if it was not signed for `channel` or does not hold a link."""
    try:
        data = signing.loads(token, salt=f"{SALT}:{channel}")
    except signing.BadSignature:
        raise BadLink("the link is not one this gateway made for this channel") from None
    if not (
        isinstance(data, list)
        and len(data) == 4
        and all(isinstance(part, str) for part in data[:3])
        and (data[3] is None or isinstance(data[3], int))
        and _ACTION.fullmatch(data[2])
    ):
        raise BadLink("the link's token does not hold a link")
    return Link(*data)
