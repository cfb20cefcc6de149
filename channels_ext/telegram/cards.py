"""The Telegram approval message: HTML text and an inline keyboard, from a `CardView`.

Pure functions: no I/O, no SDK. The text uses Telegram's HTML parse mode
(https://core.telegram.org/bots/api#html-style); everything from an agent or a
user is escaped, so an argument cannot open a tag or dress up a link, and each
part is cut so the whole stays under Telegram's 4096 characters. The keyboard
is rows of (label, callback_data) with compact signed data (buttons.py).
"""

from __future__ import annotations

import datetime as dt
import html
import json
from typing import Any

from channels_ext.base import CardItem, CardView, actor_label, split_actor
from channels_ext.telegram import buttons

Keyboard = list[list[tuple[str, str]]]

SHORT_LIMIT = 200  # agent, tool, user and session names
ARG_VALUE_LIMIT = 300
ARGS_LIMIT = 1500  # all the arguments of one call
REASON_LIMIT = 600
MAX_TURN_ITEMS = 10  # two buttons per call, and the rest of the card
MAX_APPROVERS_SHOWN = 20

_OUTCOME_ICONS = {"approved": "✅", "rejected": "❌", "expired": "⌛", "cancelled": "🚫"}


def cut(text: str, limit: int) -> str:
    """Shorten `text` to at most `limit` characters, ending with "…" when cut."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def esc(text: str, limit: int) -> str:
    """Cut (what the reader sees counts), then escape for Telegram's HTML."""
    return html.escape(cut(text, limit), quote=False)


def date_text(moment: dt.datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def is_user_id(native: str) -> bool:
    """Telegram users are numbers; a gate may list nothing else for a Telegram channel."""
    return native.isdigit() and len(native) <= 20


def person(actor_id: str, name: str = "") -> str:
    """Who, as HTML: a Telegram user as a mention ("alice (telegram:111)", linked to the user), anyone else as text."""
    kind, native = split_actor(actor_id)
    label = esc(actor_label(actor_id, name), SHORT_LIMIT)
    if kind in ("telegram", "") and is_user_id(native):
        return f'<a href="tg://user?id={native}">{label}</a>'
    return label


def _args(args: dict[str, Any]) -> str:
    if not args:
        return "(no arguments)"
    lines = []
    for key, value in args.items():
        rendered = value if isinstance(value, str) and "\n" not in value else json.dumps(value, ensure_ascii=False, default=str)
        lines.append(f"{key} = {cut(str(rendered), ARG_VALUE_LIMIT)}")
    return html.escape(cut("\n".join(lines), ARGS_LIMIT), quote=False)


def outcome_line(card: CardView | CardItem) -> str:
    """How a decided request ended, as HTML: "✅ <b>Approved</b> by alice (telegram:111) at … — why"."""
    line = f"{_OUTCOME_ICONS.get(card.status, '•')} <b>{card.status.capitalize()}</b>"
    if card.edited:
        line += " (edited)"
    if card.decided_by and card.status != "expired":
        line += f" by {person(card.decided_by, card.decided_by_name)}"
    decided_at = getattr(card, "decided_at", None)
    if decided_at is not None:
        line += f" at {date_text(decided_at)}"
    if card.decision_reason:
        line += f" — {esc(card.decision_reason, REASON_LIMIT)}"
    return line


def _details(card: CardView, now: dt.datetime | None) -> list[str]:
    why = esc(card.reason, REASON_LIMIT) if card.reason else "(no reason given)"
    lines = [f"<b>Why:</b> {why}" + (f" <i>(hook {esc(card.hook, SHORT_LIMIT)})</i>" if card.hook else "")]
    if card.expires_at is not None:
        left = ""
        if card.is_pending or card.pending_items:
            minutes = int((card.expires_at - (now or dt.datetime.now(dt.UTC))).total_seconds() // 60)
            left = f" (in {minutes} minute{'s' if minutes != 1 else ''})" if minutes > 0 else " (in less than a minute)"
        lines.append(f"<b>Expires:</b> {date_text(card.expires_at)}{left}")
    if card.approvals_required > 1:
        progress = f"<b>Approvals:</b> {len(card.approved_by)} of {card.approvals_required}"
        if card.approved_by:
            progress += " (" + ", ".join(person(who) for who in card.approved_by[:MAX_APPROVERS_SHOWN]) + ")"
        lines.append(progress)
    if card.approvers:
        shown = ", ".join(person(who) for who in card.approvers[:MAX_APPROVERS_SHOWN])
        more = len(card.approvers) - MAX_APPROVERS_SHOWN
        lines.append(f"<b>Approvers:</b> {shown}" + (f" and {more} more" if more > 0 else ""))
    return lines


def card_text(card: CardView, *, now: dt.datetime | None = None) -> str:
    """The message's HTML: who wants to run what, why, until when; the outcome once decided."""
    if card.items:
        return turn_text(card, now=now)
    head = "<b>Approval needed</b>" if card.is_pending else outcome_line(card)
    lines = [head]
    if card.escalated:
        lines.append("⏫ <b>Escalated:</b> more approvers have been asked to decide.")
    if card.note:
        lines.append(f"🔔 {esc(card.note, REASON_LIMIT)}")
    lines.append(f"<b>{esc(card.agent, SHORT_LIMIT)}</b> wants to run <code>{esc(card.tool_name, SHORT_LIMIT)}</code>")
    who = f"<b>End user:</b> {esc(card.user_id, SHORT_LIMIT) or '—'}"
    if card.session_id:
        who += f" · <b>Session:</b> {esc(card.session_id, SHORT_LIMIT)}"
    lines += [who, f"<pre>{_args(card.tool_args)}</pre>"]
    if card.edited:
        lines.append(f"<b>Approved arguments</b> (edited by the approver):\n<pre>{_args(card.approved_args or {})}</pre>")
    lines += _details(card, now)
    lines.append(f'<a href="{html.escape(card.url)}">Open in browser</a>')
    return "\n".join(lines)


def turn_text(card: CardView, *, now: dt.datetime | None = None) -> str:
    """A turn's card: the calls one agent turn made, numbered, each with its outcome once decided."""
    pending = card.pending_items
    title = f"Approval needed: {len(pending)} of {len(card.items)} calls of one turn" if pending else "Calls of one turn"
    lines = [f"<b>{title}</b>"]
    if card.escalated:
        lines.append("⏫ <b>Escalated:</b> more approvers have been asked to decide.")
    if card.note:
        lines.append(f"🔔 {esc(card.note, REASON_LIMIT)}")
    lines.append(f"<b>Agent:</b> {esc(card.agent, SHORT_LIMIT)} · <b>End user:</b> {esc(card.user_id, SHORT_LIMIT) or '—'}")
    for number, item in enumerate(card.items[:MAX_TURN_ITEMS], start=1):
        args = _args(item.tool_args).replace("\n", " · ")
        line = f"{number}. <code>{esc(item.tool_name, SHORT_LIMIT)}</code> {cut(args, 400)}"
        if not item.is_pending:
            line += f"\n    {outcome_line(item)}"
        lines.append(line)
    if len(card.items) > MAX_TURN_ITEMS:
        lines.append(f"… {len(card.items) - MAX_TURN_ITEMS} more calls: see them in the browser")
    lines += _details(card, now)
    lines.append(f'<a href="{html.escape(card.url)}">Open in browser</a>')
    return "\n".join(lines)


def shown_with_buttons(card: CardView) -> tuple[str, ...]:
    """The calls of a turn's card that get buttons (pending, within the cap): what its "all" buttons decide."""
    return tuple(item.confirmation_id for item in card.items[:MAX_TURN_ITEMS] if item.is_pending)


def keyboard(card: CardView, channel: str) -> Keyboard:
    """The buttons while something is pending; none once decided."""
    if card.items:
        return _turn_keyboard(card, channel)
    if not card.is_pending:
        return []

    def data(action: str) -> str:
        return buttons.button_data(channel, action, card.confirmation_id)

    rows: Keyboard = [[("✅ Approve", data(buttons.APPROVE)), ("❌ Reject…", data(buttons.REJECT))]]
    rows += [[(cut(f"Approve {label}", 60), data(str(n)))] for n, label in enumerate(card.grant_options[:10])]
    if card.editable_paths:
        rows.append([("✏️ Edit, then approve…", data(buttons.EDIT))])
    return rows


def _turn_keyboard(card: CardView, channel: str) -> Keyboard:
    rows: Keyboard = []
    for number, item in enumerate(card.items[:MAX_TURN_ITEMS], start=1):
        if item.is_pending:
            rows.append(
                [
                    (f"Approve {number}", buttons.button_data(channel, buttons.APPROVE, item.confirmation_id)),
                    (f"Reject {number}…", buttons.button_data(channel, buttons.REJECT, item.confirmation_id)),
                ]
            )
    shown = shown_with_buttons(card)
    if len(shown) > 1:
        rows.append(
            [
                (f"✅ Approve all {len(shown)}", buttons.button_data(channel, buttons.APPROVE_ALL, card.confirmation_id, shown)),
                (f"❌ Reject all {len(shown)}…", buttons.button_data(channel, buttons.REJECT_ALL, card.confirmation_id, shown)),
            ]
        )
    return rows


def reminder_text(card: CardView, note: str) -> str:
    """The reply under the card that pings the approvers still to answer (Telegram notifies on mentions)."""
    answered = {split_actor(who)[1] for who in card.approved_by}
    waiting = [who for who in card.approvers if who not in answered and is_user_id(who)]
    mentions = " ".join(person(who) for who in waiting[:MAX_APPROVERS_SHOWN])
    return f"🔔 {esc(note, REASON_LIMIT)}" + (f"\n{mentions}" if mentions else "")
