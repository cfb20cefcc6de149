"""Feishu/Lark card JSON 2.0 for a digest (docs/feishu.md, "Digests"): the low-risk calls of one chat in one card.

Pure functions from a `DigestView` to card JSON, escaped as the approval card is
(channels_ext/feishu/cards.py). Each pending call has its own Approve <n>, and Reject <n> in the one reject
form (with its reason input); "Approve these N" carries exactly the pending calls the card lists, signed
with the digest's id (`sign_digest_ids`), so a call gathered later is not among them.
"""

from __future__ import annotations

from typing import Any

from channels_ext.cardkit import OUTCOME_ICONS, cut
from channels_ext.cardkit import utc_text as format_time
from channels_ext.feishu.cards import (
    REASON_INPUT_NAME,
    REASON_MAX_LENGTH,
    REJECT_FORM_NAME,
    SHORT_LIMIT,
    argument_lines,
    card_frame,
    mention,
    safe_text,
)
from gateway_contract import DigestItem, DigestView, sign_confirmation_id, sign_digest_ids

APPROVE_DIGEST_BUTTON_NAME = "approve_digest"
_RISK_ICONS = {"low": "🟢", "medium": "🟠", "high": "🔴"}


def _plain(text: str) -> dict[str, str]:
    return {"tag": "plain_text", "content": text}


def _callback(decision: str, confirmation_id: str, **more: Any) -> list[dict[str, Any]]:
    # `in_digest`: the click is answered with a toast alone, so the digest stays on the clicker's screen.
    value = {"decision": decision, "confirmation_id": sign_confirmation_id(confirmation_id), "in_digest": True, **more}
    return [{"type": "callback", "value": value}]


def item_line(number: int, item: DigestItem) -> str:
    """"**3.** send_email · mailer-bot · 🟢 low — to: a@b.c; subject: Hi", then how it ended if decided."""
    args = "; ".join(line.removeprefix("- ") for line in argument_lines(item.tool_args))
    line = (
        f"**{number}.** {safe_text(item.tool_name, SHORT_LIMIT)} · {safe_text(item.agent, SHORT_LIMIT)} · "
        f"{_RISK_ICONS.get(item.risk, '•')} {safe_text(item.risk, 10)} — {cut(args, 600)} · [details]({item.url})"
    )
    if item.is_pending and item.expires_at is not None:
        line += f" (expires {format_time(item.expires_at)})"
    if not item.is_pending:
        line += f" → {OUTCOME_ICONS.get(item.status, 'ℹ️')} {safe_text(item.status, SHORT_LIMIT)}"
        if item.decided_by and item.status != "expired":
            line += " by " + mention(item.decided_by, item.decided_by_name)
    return line


def render_digest(digest: DigestView) -> dict[str, Any]:
    """The whole card: each call listed with Approve <n>; one reject form (a reason, Reject <n> for each
    pending call); "Approve these N" for the pending calls listed."""
    pending = [(n, item) for n, item in enumerate(digest.items, start=1) if item.is_pending]
    title = (
        f"Digest: {len(pending)} of {len(digest.items)} calls waiting" if pending else f"Digest: {len(digest.items)} calls, all decided"
    )
    elements: list[dict[str, Any]] = []
    for number, item in enumerate(digest.items, start=1):
        elements.append({"tag": "markdown", "content": item_line(number, item)})
        if item.is_pending:
            elements.append(
                {"tag": "button", "name": f"approve_{number}", "type": "default", "text": _plain(f"Approve {number}"),
                 "behaviors": _callback("approve", item.confirmation_id)}
            )  # fmt: skip
    if pending:
        offered = digest.offered_ids()
        elements.append(
            {"tag": "button", "name": APPROVE_DIGEST_BUTTON_NAME, "type": "primary",
             "text": _plain(f"Approve these {len(offered)}"),
             "behaviors": _callback("approve", offered[0], digest=sign_digest_ids(digest.digest_id, offered))}
        )  # fmt: skip
        reason = {"tag": "input", "name": REASON_INPUT_NAME, "placeholder": _plain("Reason for rejecting"),
                  "max_length": REASON_MAX_LENGTH, "width": "fill"}  # fmt: skip
        rejects = [
            {"tag": "button", "name": f"reject_{n}", "type": "danger", "text": _plain(f"Reject {n}"),
             "form_action_type": "submit", "behaviors": _callback("reject", item.confirmation_id)}
            for n, item in pending
        ]  # fmt: skip
        elements.append({"tag": "form", "name": REJECT_FORM_NAME, "elements": [reason, *rejects]})
    subject = cut(f"{digest.channel} · calls gathered into one digest", SHORT_LIMIT)
    return card_frame(title, subject, "orange" if pending else "grey", elements)
