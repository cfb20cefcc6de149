"""The `email` channel's config keys (docs/email.md, docs/reference/config.md).

Cards go out through Django's mail framework to an SMTP server of yours; the
approvers answer with signed links to the gateway (no mailbox is read). The
config model stays light: it is imported to validate config files.
"""

from __future__ import annotations

from email.utils import parseaddr
from typing import Literal

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from pydantic import Field, field_validator

from gateway_contract import ChannelConfigBase, secret

DEFAULT_PORTS = {"starttls": 587, "tls": 465, "none": 25}


def checked_address(value: str) -> str:
    """An e-mail address, trimmed; ValueError (naming no more than the problem) if it is not one."""
    address = value.strip()
    try:
        validate_email(address)
    except ValidationError:
        raise ValueError(f"{value!r} is not an e-mail address") from None
    return address


class EmailChannelConfig(ChannelConfigBase):
    kind: Literal["email"]
    from_address: str = Field(
        min_length=3,
        description='The sender of every message: "approvals@example.com" or "Approvals <approvals@example.com>".',
    )
    recipients: list[str] = Field(
        default=[],
        max_length=100,
        description="Who is mailed when the gate lists no approvers (any of them may then decide); "
        "when the gate lists approvers (e-mail addresses), they are mailed instead.",
    )
    smtp_host: str = Field("localhost", min_length=1)
    smtp_port: int | None = Field(None, ge=1, le=65535, description="Default: 587 (starttls), 465 (tls), 25 (none).")
    smtp_security: Literal["starttls", "tls", "none"] = Field(
        "starttls", description="starttls: upgrade a plain connection; tls: TLS from the start (SMTPS); none: plain"
    )
    smtp_username: str = ""
    smtp_password: str = secret("")
    timeout_seconds: float = Field(10.0, gt=0, le=120)

    @field_validator("from_address")
    @classmethod
    def _an_address(cls, value: str) -> str:
        checked_address(parseaddr(value)[1] or value)
        return value.strip()

    @field_validator("recipients")
    @classmethod
    def _addresses(cls, value: list[str]) -> list[str]:
        return [checked_address(address) for address in value]

    @property
    def port(self) -> int:
        return self.smtp_port or DEFAULT_PORTS[self.smtp_security]

    @property
    def sender_domain(self) -> str:
        """The domain of `from_address`: the right-hand side of the Message-IDs the channel makes."""
        return (parseaddr(self.from_address)[1] or self.from_address).rpartition("@")[2]
