"""The approval e-mail: a subject, a plain-text part and an HTML part, from a `CardView`.

Pure functions: no I/O, no settings. The links are handed in (`Links`: one URL
per action, minted for one recipient by the adapter). Everything that comes
from an agent or a user is escaped in the HTML part (`format_html`), and header
values are kept on one line so an argument cannot add a header.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import Any

from django.utils.html import format_html, format_html_join

from gateway_contract import CardView
from channels_ext.cardkit import RISK_ICONS, is_high, risk_label, risk_word, waiting_line

SUBJECT_LIMIT = 150
SHORT_LIMIT = 200  # agent, tool, user and session names
ARG_VALUE_LIMIT = 1000  # one argument's value (the page shows them all)
REASON_LIMIT = 1000
MAX_APPROVERS_SHOWN = 20

_OUTCOME_ICONS = {"approved": "✅", "rejected": "❌", "expired": "⌛", "cancelled": "🚫"}
_COLOURS = {"approve": "#1f883d", "reject": "#cf222e", "other": "#2457b3"}
# The risk's badge: (background, text colour); high is the red of a rejection.
_RISK_COLOURS = {"low": ("#d1f2d9", "#0f5c27"), "medium": ("#fff3cd", "#7a5a00"), "high": ("#cf222e", "#ffffff")}


@dataclasses.dataclass(frozen=True)
class Links:
    """The action links of one recipient's message, as (label, URL, style) in the order shown."""

    recipient: str
    actions: tuple[tuple[str, str, str], ...]  # style: approve | reject | other


@dataclasses.dataclass(frozen=True)
class Mail:
    subject: str
    text: str
    html: str


def cut(text: str, limit: int) -> str:
    """Shorten `text` to at most `limit` characters, ending with "…" when cut."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def one_line(text: str, limit: int) -> str:
    """Whitespace (newlines included) folded to single spaces, then cut: safe in a header."""
    return cut(" ".join(text.split()), limit)


def date_text(moment: dt.datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _value(value: Any) -> str:
    rendered = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return cut(rendered, ARG_VALUE_LIMIT)


def subject(card: CardView) -> str:
    """ "Approval needed: purchasing-bot wants to run oa__purchase_pay", "[High risk] " first for a high one."""
    high = "[High risk] " if is_high(card.risk) else ""
    return one_line(f"{high}Approval needed: {card.agent} wants to run {card.tool_name}", SUBJECT_LIMIT)


def outcome_line(card: CardView) -> str:
    """How a decided request ended: "✅ Approved by alice@example.com (email:…) at 2026-05-01 12:00 UTC — why"."""
    line = f"{_OUTCOME_ICONS.get(card.status, '•')} {card.status.capitalize()}"
    if card.edited:
        line += " (edited)"
    if card.decided_by and card.status != "expired":
        line += f" by {one_line(card.decider, SHORT_LIMIT)}"
    if card.decided_at is not None:
        line += f" at {date_text(card.decided_at)}"
    if card.decision_reason:
        line += f" — {one_line(card.decision_reason, REASON_LIMIT)}"
    return line


def facts(card: CardView, *, now: dt.datetime | None = None) -> list[tuple[str, str]]:
    """The card's facts as (label, text) rows, in the order both parts show them."""
    rows = [
        ("Agent", one_line(card.agent, SHORT_LIMIT)),
        ("Tool", one_line(card.tool_name, SHORT_LIMIT)),
        ("End user", one_line(card.user_id, SHORT_LIMIT) or "—"),
    ]
    if card.session_id:
        rows.append(("Session", one_line(card.session_id, SHORT_LIMIT)))
    why = one_line(card.reason, REASON_LIMIT) if card.reason else "(no reason given)"
    rows.append(("Why", why + (f" (hook {one_line(card.hook, SHORT_LIMIT)})" if card.hook else "")))
    if card.expires_at is not None:
        left = ""
        if card.is_pending:
            minutes = max(0, int((card.expires_at - (now or dt.datetime.now(dt.UTC))).total_seconds() // 60))
            left = f" (in {minutes} minute{'s' if minutes != 1 else ''})" if minutes else " (in less than a minute)"
        rows.append(("Expires", date_text(card.expires_at) + left))
    if card.approvals_required > 1:
        rows.append(("Approvals", f"{len(card.approved_by)} of {card.approvals_required}"))
    if waiting := waiting_line(card, person=lambda who, _name: who, limit=MAX_APPROVERS_SHOWN):
        rows.append(("Waiting for", waiting))
    if card.approvers:
        shown = ", ".join(card.approvers[:MAX_APPROVERS_SHOWN])
        more = len(card.approvers) - MAX_APPROVERS_SHOWN
        rows.append(("Approvers", shown + (f" and {more} more" if more > 0 else "")))
    return rows


def arguments(args: dict[str, Any]) -> list[tuple[str, str]]:
    return [(str(key), _value(value)) for key, value in args.items()]


def _text_block(card: CardView, now: dt.datetime | None) -> list[str]:
    word = risk_word(card.risk)
    warning = " (read the arguments before approving)" if is_high(word) and card.is_pending else ""
    lines = [f"{risk_label(word)}{warning}"]
    lines += [f"{label}: {text}" for label, text in facts(card, now=now)]
    lines.append("Arguments:")
    lines += [f"  {key} = {value}" for key, value in arguments(card.tool_args)] or ["  (no arguments)"]
    if card.edited:
        lines.append("Approved arguments (edited by the approver):")
        lines += [f"  {key} = {value}" for key, value in arguments(card.approved_args or {})]
    return lines


def risk_badge(risk: str) -> str:
    """The risk as the HTML part shows it above the facts: a coloured badge, "🔴 Risk: high" on red."""
    word = risk_word(risk)
    background, colour = _RISK_COLOURS[word]
    return format_html(
        '<p style="margin:0 0 10px"><span style="display:inline-block;padding:3px 10px;border-radius:99px;'
        'background:{};color:{};font-weight:{}">{} Risk: {}</span></p>',
        background, colour, "700" if is_high(word) else "600", RISK_ICONS[word], word,
    )  # fmt: skip


def _html_block(card: CardView, now: dt.datetime | None) -> str:
    rows = format_html_join(
        "",
        '<tr><th align="left" style="padding:2px 12px 2px 0;color:#5d6677">{}</th><td>{}</td></tr>',
        facts(card, now=now),
    )
    args = format_html_join(
        "", '<tr><th align="left" style="padding:2px 12px 2px 0">{}</th><td><code>{}</code></td></tr>',
        arguments(card.tool_args),
    ) or format_html("<tr><td>(no arguments)</td></tr>")  # fmt: skip
    html = format_html(
        '{}<table style="border-collapse:collapse">{}</table><h3 style="margin:14px 0 4px">Arguments</h3>'
        '<table style="border-collapse:collapse">{}</table>',
        risk_badge(card.risk),
        rows,
        args,
    )
    if card.edited:
        edited = format_html_join(
            "", "<tr><th align='left' style='padding:2px 12px 2px 0'>{}</th><td><code>{}</code></td></tr>",
            arguments(card.approved_args or {}),
        )  # fmt: skip
        html += format_html(
            '<h3 style="margin:14px 0 4px">Approved arguments (edited by the approver)</h3><table>{}</table>', edited
        )
    return html


def _page(title: str, body: str) -> str:
    return format_html(
        '<!doctype html><html><body style="font:15px/1.5 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;'
        'color:#1d2330"><h2 style="margin:0 0 10px">{}</h2>{}</body></html>',
        title,
        body,
    )


def card_mail(card: CardView, links: Links, *, note: str = "", now: dt.datetime | None = None) -> Mail:
    """The approval request as mailed to one recipient, with their own action links."""
    intro = f"{one_line(card.agent, SHORT_LIMIT)} wants to run {one_line(card.tool_name, SHORT_LIMIT)}."
    footer = (
        "Each link opens a page where you confirm; opening a link decides nothing. "
        f"The links are yours alone: they answer as {links.recipient}, once, until the request's deadline."
    )
    text_lines = [note, ""] if note else []
    text_lines += [intro, "", *_text_block(card, now), ""]
    text_lines += [f"{label}: {url}" for label, url, _ in links.actions]
    text_lines += ["", footer, f"The request on the gateway's web page (sign-in needed): {card.url}"]
    buttons = format_html_join(
        " ",
        '<a href="{}" style="display:inline-block;margin:4px 6px 4px 0;padding:9px 18px;border-radius:6px;'
        'background:{};color:#ffffff;font-weight:600;text-decoration:none">{}</a>',
        ((url, _COLOURS.get(style, _COLOURS["other"]), label) for label, url, style in links.actions),
    )
    body = format_html(
        '{}<p>{}</p>{}<p style="margin:18px 0">{}</p><p style="color:#5d6677;font-size:13px">{} '
        '<a href="{}">The request on the gateway\'s web page</a> (sign-in needed).</p>',
        format_html('<p style="background:#fff3cd;padding:8px 12px;border-radius:6px">{}</p>', note) if note else "",
        intro,
        _html_block(card, now),
        buttons,
        footer,
        card.url,
    )
    title = subject(card)
    return Mail(
        subject=f"Reminder: {title}" if note else title, text="\n".join(text_lines) + "\n", html=_page(title, body)
    )


def decided_mail(card: CardView) -> Mail:
    """The follow-up sent in the same thread once a request is decided (its links no longer decide anything)."""
    line = outcome_line(card)
    after = "The links in the earlier message no longer decide anything."
    text = "\n".join([line, "", *_text_block(card, None), "", after, f"The request: {card.url}"]) + "\n"
    body = format_html(
        '<p style="font-weight:600">{}</p>{}'
        '<p style="color:#5d6677;font-size:13px">{} <a href="{}">The request</a>.</p>',
        line,
        _html_block(card, None),
        after,
        card.url,
    )
    title = f"Re: {subject(card)}"
    return Mail(subject=one_line(title, SUBJECT_LIMIT + 4), text=text, html=_page(line, body))
