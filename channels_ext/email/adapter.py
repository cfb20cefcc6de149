"""The e-mail channel: approval requests sent through Django's mail framework, answered by signed links.

Each recipient gets a message of their own (text and HTML) whose links are
minted for them (channels_ext/email/links.py). Nothing reads a mailbox: a
link opens a page on the gateway (`handle_link`, which can only show), and the
page's form POSTs back (`handle_callback`, which decides). Link previewers and
mail scanners that fetch every URL (GET, HEAD) therefore never decide.

A sent message cannot be redrawn: once the request is decided (or expires, or
is cancelled) each recipient gets a short follow-up in the same thread
(`In-Reply-To`), and the links' page shows the outcome. Reminders and
warnings are new messages in the thread with the links again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import smtplib
import ssl
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.core.mail.backends.smtp import EmailBackend
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.http import urlencode

from gateway_contract import (
    Callback,
    CardView,
    ChannelAdapter,
    ChannelError,
    Decide,
    MessageRef,
    Show,
    argument_value,
    split_actor,
)
from channels_ext.email import cards
from channels_ext.email.config import EmailChannelConfig, checked_address
from channels_ext.email.links import APPROVE, EDIT, GRANT_PREFIX, REJECT, BadLink, Link, link_token, read_link

logger = logging.getLogger(__name__)

TEMPLATE = "email/link.html"
REASON_MAX_LENGTH = 1000
EDIT_VALUE_LIMIT = 3000
MAX_EDIT_FIELDS = 20
# Headers that keep auto-responders (out-of-office replies) away: RFC 3834, and Exchange's own.
AUTOMATED = {"Auto-Submitted": "auto-generated", "X-Auto-Response-Suppress": "All"}


def _smtp_failure(what: str, err: Exception) -> ChannelError:
    """Class an SMTP failure: 4xx replies and lost connections are transient, 5xx replies and a
    server that lacks what the config asks for (STARTTLS, AUTH, a valid certificate) permanent."""
    if isinstance(err, smtplib.SMTPRecipientsRefused):
        codes = sorted({code for code, _ in err.recipients.values()})
        message = f"smtp {what} failed: every recipient refused ({', '.join(map(str, codes))})"
        return ChannelError(message, permanent=all(code >= 500 for code in codes))
    if isinstance(err, smtplib.SMTPResponseException):
        reply = err.smtp_error.decode(errors="replace") if isinstance(err.smtp_error, bytes) else str(err.smtp_error)
        message = f"smtp {what} failed: {err.smtp_code} {cards.one_line(reply, 200)}"
        # 421 (closing), 450-452 (mailbox busy, local error, storage; the usual answers to sending too fast).
        return ChannelError(message, permanent=err.smtp_code >= 500)
    if isinstance(err, smtplib.SMTPNotSupportedError):
        return ChannelError(
            f"smtp {what} failed: {cards.one_line(str(err), 200)} (check smtp_security and smtp_username)",
            permanent=True,
        )
    if isinstance(err, ssl.SSLCertVerificationError):
        return ChannelError(
            f"smtp {what} failed: the server's certificate is not valid ({err.verify_message})", permanent=True
        )
    return ChannelError(f"smtp {what} failed: connection error ({type(err).__name__})")


class EmailAdapter(ChannelAdapter):
    """Mails approval requests to the approvers and takes their answers through the links."""

    kind = "email"
    config_model = EmailChannelConfig
    config: EmailChannelConfig
    opens_links = True

    # --- outbound ---------------------------------------------------------

    def post_card(self, card: CardView, *, idempotency_key: str) -> MessageRef:
        """Send each recipient their own message; the ref keeps each one's Message-ID (for the thread).

        SMTP has no idempotency key: a retried delivery sends again, with the same
        Message-ID (derived from `idempotency_key`), which mail programs show once.
        """
        recipients = self.recipients(card)
        if not recipients:
            raise ChannelError(
                f"email channel {self.name!r} has no one to mail: the gate lists no approvers and the channel "
                "no recipients",
                permanent=True,
            )
        message_ids = {to: self._message_id(idempotency_key, to) for to in recipients}
        messages = [
            self._message(cards.card_mail(card, self.links(card, to)), to, message_ids[to]) for to in recipients
        ]
        self._send(messages, "send")
        return MessageRef({"message_ids": message_ids})

    def update_card(self, card: CardView, ref: MessageRef) -> None:
        """Once the request is decided, tell each recipient in the message's thread.

        A message cannot change after it is sent, so a pending request's redraws
        (quorum progress, an escalation) send nothing: the links' page shows them.
        """
        if card.is_pending:
            return
        mail = cards.decided_mail(card)
        messages = [
            self._message(mail, to, self._message_id(first, card.status), replying_to=first)
            for to, first in self._threads(ref)
        ]
        self._send(messages, "follow-up")

    def notify_approvers(self, card: CardView, ref: MessageRef, text: str) -> None:
        """A reminder (or a warning before the deadline) to each recipient who has not answered, with the links."""
        if not card.is_pending:
            return
        answered = {native for kind, native in map(split_actor, card.approved_by) if kind == self.kind}
        messages = [
            self._message(
                cards.card_mail(card, self.links(card, to), note=text),
                to,
                self._message_id(first, "remind", text),
                replying_to=first,
            )
            for to, first in self._threads(ref)
            if to not in answered
        ]
        if messages:
            self._send(messages, "reminder")

    def recipients(self, card: CardView) -> list[str]:
        """Who is mailed: the gate's approvers (e-mail addresses), or the channel's `recipients` if it lists none."""
        recipients = list(dict.fromkeys(card.approvers or self.config.recipients))
        for address in recipients:
            try:
                checked_address(address)
            except ValueError:
                raise ChannelError(
                    f"the approvers of an email channel are e-mail addresses; {address!r} is not one", permanent=True
                ) from None
        return recipients

    def links(self, card: CardView, recipient: str) -> cards.Links:
        """`recipient`'s action links for `card`, in the order the message shows them."""
        expires = int(card.expires_at.timestamp()) if card.expires_at is not None else None

        def url(action: str) -> str:
            return self.link_url(Link(card.confirmation_id, recipient, action, expires))

        actions = [("Approve", url(APPROVE), "approve")]
        actions += [
            (f"Approve {label}", url(f"{GRANT_PREFIX}{n}"), "approve") for n, label in enumerate(card.grant_options)
        ]
        if card.editable_paths:
            actions.append(("Edit, then approve", url(EDIT), "other"))
        actions.append(("Reject", url(REJECT), "reject"))
        return cards.Links(recipient=recipient, actions=tuple(actions))

    def link_url(self, link: Link) -> str:
        """The absolute URL of a link (under GATEWAY_PUBLIC_URL)."""
        path = reverse("channel-callback", args=[self.name])
        return f"{settings.GATEWAY_PUBLIC_URL}{path}?{urlencode({'link': link_token(self.name, link)})}"

    def _message_id(self, *parts: str) -> str:
        digest = hashlib.sha256("|".join((self.name, *parts)).encode()).hexdigest()[:40]
        return f"<{digest}@{self.config.sender_domain}>"

    def _message(self, mail: cards.Mail, to: str, message_id: str, *, replying_to: str = "") -> EmailMultiAlternatives:
        headers = {"Message-ID": message_id, **AUTOMATED}
        if replying_to:
            headers.update({"In-Reply-To": replying_to, "References": replying_to})
        message = EmailMultiAlternatives(
            subject=mail.subject, body=mail.text, from_email=self.config.from_address, to=[to], headers=headers
        )
        message.attach_alternative(mail.html, "text/html")
        return message

    @staticmethod
    def _threads(ref: MessageRef) -> list[tuple[str, str]]:
        """(recipient, Message-ID of the request's message to them) for every recipient of a posted card."""
        ids = ref.data.get("message_ids")
        if not isinstance(ids, dict) or not ids:
            raise ChannelError("email message ref lacks its recipients' Message-IDs", permanent=True)
        return [(str(to), str(first)) for to, first in ids.items()]

    def _send(self, messages: Iterable[EmailMultiAlternatives], what: str) -> None:
        connection = EmailBackend(
            host=self.config.smtp_host,
            port=self.config.port,
            username=self.config.smtp_username or None,
            password=self.config.smtp_password or None,
            use_tls=self.config.smtp_security == "starttls",
            use_ssl=self.config.smtp_security == "tls",
            timeout=self.config.timeout_seconds,
            fail_silently=False,
        )
        try:
            connection.send_messages(list(messages))
        except (smtplib.SMTPException, OSError) as err:
            # (ssl.SSLError and timeouts are OSErrors.) Never the password: only the server's reply code and text.
            failure = _smtp_failure(what, err)
            logger.warning("email channel %s: %s", self.name, failure.message)
            raise failure from None

    # --- inbound: the links' page -------------------------------------------------

    def handle_link(self, request: HttpRequest, show: Show) -> HttpResponse:
        """A link opened in a browser (or fetched by a previewer): the request and a form to confirm; nothing else."""
        try:
            link = read_link(self.name, request.GET.get("link", ""))
        except BadLink:
            return self._page(request, status=403, problem=_BAD_LINK)
        card = show(link.confirmation_id)
        if card is None:
            return self._page(request, status=404, link=link, problem="This approval request no longer exists.")
        if link.expired():
            # Past the deadline the link decides nothing, whatever became of the request since (docs/email.md §4):
            # it still shows the request, read-only, with its outcome once it has one.
            return self._page(request, status=410, link=link, card=card, problem=_EXPIRED_LINK)
        return self._page(request, link=link, card=card)

    def handle_callback(self, request: HttpRequest, decide: Decide) -> HttpResponse:
        """The page's form, POSTed: decide as the link's recipient, then show what happened."""
        try:
            link = read_link(self.name, request.POST.get("link", ""))
        except BadLink:
            return self._page(request, status=403, problem=_BAD_LINK)
        if link.expired():
            # Refused before anything is looked up: the deadline is inside the signed link.
            return self._page(request, status=410, link=link, problem=_EXPIRED_LINK)
        click = Callback(
            confirmation_id=link.confirmation_id, decision="reject" if link.action == REJECT else "approve",
            actor=link.recipient, actor_name=link.recipient, grant=link.grant,
        )  # fmt: skip
        problem, more = self._form_input(link, request)
        if problem:
            # Show the form again with what was typed, if a decision could still count.
            outcome = decide(dataclasses.replace(click, dry_run=True))
            if not outcome.applied:
                return self._page(request, link=link, card=outcome.card, told=outcome.message)
            return self._page(request, status=400, link=link, card=outcome.card, problem=problem, typed=request.POST)
        outcome = decide(dataclasses.replace(click, **more))
        if outcome.code == "edit_refused":
            # Nothing was decided: the form again, what was typed kept beside why (the web page does the same).
            return self._page(
                request, status=400, link=link, card=outcome.card, problem=outcome.message, typed=request.POST
            )
        return self._page(request, link=link, card=outcome.card, told=outcome.message, taken=outcome.applied)

    def _form_input(self, link: Link, request: HttpRequest) -> tuple[str, dict[str, Any]]:
        """(a problem to show, "" if none; the reason or edits the form carries)."""
        if link.action == REJECT:
            reason = request.POST.get("reason", "").strip()
            if not reason:
                return "Please say why you are rejecting this call.", {}
            return "", {"reason": reason[:REASON_MAX_LENGTH]}
        if link.action != EDIT:
            return "", {}
        # As typed: the gateway reads each text as the JSON type of the value it replaces (a number stays
        # a number, text stays text) and says why when it cannot (Callback.typed_edits).
        typed_edits: dict[str, str] = {}
        for field, typed in request.POST.items():
            if not field.startswith("edit."):
                continue
            if len(typed_edits) >= MAX_EDIT_FIELDS or len(typed) > EDIT_VALUE_LIMIT:
                return "Too many or too long values.", {}
            typed_edits[field.removeprefix("edit.")] = typed
        return "", {"typed_edits": typed_edits}

    def _page(
        self,
        request: HttpRequest,
        *,
        status: int = 200,
        link: Link | None = None,
        card: CardView | None = None,
        problem: str = "",
        told: str = "",
        taken: bool = False,
        typed: Any = None,
    ) -> HttpResponse:
        context = {
            "card": card,
            "link": link,
            "action": _action_label(link, card),
            "problem": problem,
            "told": told,
            "taken": taken,
            "can_decide": bool(card and card.is_pending and link and not link.expired() and not told and status < 403),
            "token": request.POST.get("link") or request.GET.get("link", ""),
            "outcome": cards.outcome_line(card) if card is not None and not card.is_pending else "",
            "facts": cards.facts(card) if card is not None else [],
            "arguments": cards.arguments(card.tool_args) if card is not None else [],
            "approved_arguments": cards.arguments(card.approved_args)
            if card and card.approved_args is not None
            else [],
            "edit_fields": _edit_fields(card, typed) if link and link.action == EDIT and card else [],
            "reason": (typed or {}).get("reason", ""),
            "reason_max_length": REASON_MAX_LENGTH,
        }
        response = HttpResponse(render_to_string(TEMPLATE, context, request=request), status=status)
        # The link is a credential: keep it out of caches, Referer headers and search engines.
        response["Cache-Control"] = "no-store"
        response["Referrer-Policy"] = "no-referrer"
        response["X-Robots-Tag"] = "noindex, nofollow"
        return response


_BAD_LINK = (
    "This link is not valid. It may have been cut short by your mail program: copy the whole link into the "
    "address bar, or use the request's web page."
)
_EXPIRED_LINK = "This link has expired with its request; nothing can be decided with it."


def _action_label(link: Link | None, card: CardView | None) -> str:
    if link is None:
        return ""
    if link.grant is not None:
        options = card.grant_options if card is not None else ()
        return f"Approve {options[link.grant]}" if link.grant < len(options) else "Approve for a scope"
    return {APPROVE: "Approve", REJECT: "Reject", EDIT: "Edit, then approve"}[link.action]


def _edit_fields(card: CardView, typed: Any) -> list[dict[str, str]]:
    fields = []
    for number, path in enumerate(card.editable_paths[:MAX_EDIT_FIELDS]):
        current = json.dumps(argument_value(card.tool_args, path), ensure_ascii=False)
        text = (typed or {}).get(f"edit.{path}", current)
        fields.append({"id": f"edit-{number}", "path": path, "name": f"edit.{path}", "text": text})
    return fields
