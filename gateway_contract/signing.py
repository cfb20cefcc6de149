"""Ids a button carries, signed by this gateway so a forged value cannot name another request."""

from __future__ import annotations

from collections.abc import Sequence

from django.core import signing

from gateway_contract.adapter import CallbackError

# Buttons carry a signed confirmation id so a forged value cannot name another request.
_SIGNER_SALT = "channels_ext.button"


def sign_confirmation_id(confirmation_id: str) -> str:
    return signing.Signer(salt=_SIGNER_SALT).sign(str(confirmation_id))


def unsign_confirmation_id(value: str) -> str:
    try:
        return signing.Signer(salt=_SIGNER_SALT).unsign(str(value))
    except signing.BadSignature:
        raise CallbackError(400, "the button value is not one this gateway signed") from None


# A turn's "Approve all" / "Reject all" carries the calls its card offered, signed together with the
# turn's lead: the click decides exactly those (`Callback.shown_ids`), a call that joined the turn
# later is not among them, and a list edited or taken from another card fails the signature or
# names calls that are not this card's (docs/approving.md).
_SHOWN_SIGNER_SALT = "channels_ext.turn_button"


def sign_shown_ids(confirmation_id: str, shown_ids: Sequence[str]) -> str:
    """`<lead id>;<id>,<id>…:<signature>`: about 37 characters per call (Slack's button value holds
    2000, so a card offers "all" for the 15 calls it lists at most)."""
    return signing.Signer(salt=_SHOWN_SIGNER_SALT).sign(f"{confirmation_id};{','.join(map(str, shown_ids))}")


def unsign_shown_ids(value: str) -> tuple[str, tuple[str, ...]]:
    """(the lead's id, the calls offered) from a value `sign_shown_ids` made; CallbackError(400) otherwise."""
    try:
        text = signing.Signer(salt=_SHOWN_SIGNER_SALT).unsign(str(value))
    except signing.BadSignature:
        raise CallbackError(400, "the list of calls this button decides is not one this gateway signed") from None
    lead, _, ids = text.partition(";")
    return lead, tuple(pk for pk in ids.split(",") if pk)


# A digest's "Approve these N" carries the calls its message offered, signed together with the digest's
# id: the click decides exactly those, and the core checks them against the digest's own record too.
_DIGEST_SIGNER_SALT = "channels_ext.digest_button"


def sign_digest_ids(digest_id: str, shown_ids: Sequence[str]) -> str:
    """`<digest id>;<id>,<id>…:<signature>` (20 calls: about 780 characters)."""
    return signing.Signer(salt=_DIGEST_SIGNER_SALT).sign(f"{digest_id};{','.join(map(str, shown_ids))}")


def unsign_digest_ids(value: str) -> tuple[str, tuple[str, ...]]:
    """(the digest's id, the calls offered) from a value `sign_digest_ids` made; CallbackError(400) otherwise."""
    try:
        text = signing.Signer(salt=_DIGEST_SIGNER_SALT).unsign(str(value))
    except signing.BadSignature:
        raise CallbackError(400, "the list of calls this digest button decides is not one this gateway signed") from None
    digest, _, ids = text.partition(";")
    return digest, tuple(pk for pk in ids.split(",") if pk)
