"""Compact signed button data: what a Telegram button carries back, in at most 64 bytes.

Telegram limits `callback_data` to 64 bytes (https://core.telegram.org/bots/api#inlinekeyboardbutton),
so the signed confirmation id other channels put on a button (`sign_confirmation_id`, ~80
characters) does not fit. A button's data is instead 39 ASCII characters:

    <action: 1> <confirmation id: 22> <MAC: 16>

- action: `a` approve, `r` reject, `e` edit, `A` approve all of a turn, `R` reject all,
  `0`…`9` approve for the scope of that index;
- the request's UUID, its 16 bytes in URL-safe base64 without padding;
- the first 12 bytes (96 bits) of an HMAC-SHA256 keyed with `SECRET_KEY`, salted with the
  channel's name, over the action, the id and — for `A`/`R` — the ids of the calls the turn's
  card showed with buttons (`shown`). A forged or altered button fails the MAC; 96 bits leave
  a guess at 2^-96, and each guess is a tap through Telegram.

Nothing is stored: for `A`/`R` the shown ids are read back from the tapped message's own
keyboard (each call's button carries its id under its own MAC), and the MAC says they are
the ones the card was drawn with. Taps on an inaccessible message (deleted, or too old for
Telegram to send back) cannot approve a whole turn; each call's own button still works.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hmac
import re
import uuid
from collections.abc import Iterable

from django.utils.crypto import salted_hmac

SALT = "channels_ext.telegram.button"
MAC_BYTES = 12
APPROVE, REJECT, EDIT, APPROVE_ALL, REJECT_ALL = "a", "r", "e", "A", "R"
WHOLE_TURN = frozenset({APPROVE_ALL, REJECT_ALL})
ACTIONS = "arAR0123456789e"
_DATA = re.compile(r"([arAR0-9e])([A-Za-z0-9_-]{22})([A-Za-z0-9_-]{16})")


class BadButton(Exception):
    """Button data this gateway did not make for this channel."""


@dataclasses.dataclass(frozen=True)
class Button:
    action: str  # one of the codes above
    confirmation_id: str

    @property
    def grant(self) -> int | None:
        return int(self.action) if self.action.isdigit() else None

    @property
    def whole_turn(self) -> bool:
        return self.action in WHOLE_TURN

    @property
    def decision(self) -> str:
        return "reject" if self.action in (REJECT, REJECT_ALL) else "approve"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _mac(channel: str, action: str, confirmation_id: str, shown: Iterable[str]) -> str:
    message = "|".join([action, confirmation_id, ",".join(sorted(shown))])
    return _b64(salted_hmac(f"{SALT}:{channel}", message, algorithm="sha256").digest()[:MAC_BYTES])


def button_data(channel: str, action: str, confirmation_id: str, shown: Iterable[str] = ()) -> str:
    """The callback_data of one button (39 bytes); `shown` only for a whole turn's buttons."""
    if len(action) != 1 or action not in ACTIONS:
        raise ValueError(f"unknown button action {action!r}")
    return action + _b64(uuid.UUID(confirmation_id).bytes) + _mac(channel, action, confirmation_id, shown)


def peek(data: str) -> tuple[str, str] | None:
    """(action, confirmation id) of data shaped like a button's, unverified; None if it is not shaped so."""
    found = _DATA.fullmatch(data)
    if found is None:
        return None
    try:
        return found.group(1), str(uuid.UUID(bytes=base64.urlsafe_b64decode(found.group(2) + "==")))
    except (binascii.Error, ValueError):
        return None


def read_button(channel: str, data: str, shown: Iterable[str] = ()) -> Button:
    """The button `data` names, if this gateway made it for `channel` (with these `shown` ids for a whole turn)."""
    peeked = peek(data)
    if peeked is None:
        raise BadButton("the button's data is not one this gateway made")
    action, confirmation_id = peeked
    expected = _mac(channel, action, confirmation_id, shown if action in WHOLE_TURN else ())
    if not hmac.compare_digest(expected, data[-16:]):
        raise BadButton("the button's data is not one this gateway made")
    return Button(action, confirmation_id)
