"""Block Kit for a Slack digest (docs/slack.md, "Digests"): the low-risk calls of one channel in one message.

Pure functions from a `DigestView` to Slack JSON, escaped and cut as the approval card is
(channels_ext/slack/cards.py). Each pending call has its own Approve <n> / Reject <n> — the approval
card's own buttons (`approve`, `reject`: the same click handling, the same reject-reason modal) — and
"Approve these N" carries exactly the pending calls the message lists, signed with the digest's id
(`sign_digest_ids`): a call gathered later is not among them. 20 calls make 43 blocks (Slack allows 50).
"""

from __future__ import annotations

from typing import Any

from channels_ext.slack.cards import (
    APPROVE_ACTION_ID,
    FALLBACK_TEXT_LIMIT,
    HEADER_TEXT_LIMIT,
    REJECT_ACTION_ID,
    SECTION_TEXT_LIMIT,
    SHORT_LIMIT,
    cut,
    escape,
    format_args,
    slack_relative,
    user_label,
)
from gateway_contract import DigestItem, DigestView, sign_confirmation_id, sign_digest_ids

APPROVE_DIGEST_ACTION_ID = "approve_digest"  # the pending calls the digest lists (their ids signed in the value)
DIGEST_ACTIONS_BLOCK_ID = "digest_actions"
DIGEST_ITEM_BLOCK_PREFIX = "digest_item_"  # + the call's position: its own Approve / Reject
ARGS_PREVIEW_LIMIT = 300

_RISK_ICONS = {"low": "🟢", "medium": "🟠", "high": "🔴"}
_OUTCOME_ICONS = {"approved": "✅", "rejected": "❌", "expired": "⌛", "cancelled": "🚫"}


def _plain(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text, "emoji": True}


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": cut(text, SECTION_TEXT_LIMIT)}}


def item_line(number: int, item: DigestItem) -> str:
    """"*3.* `send_email` · mailer-bot · 🟢 low — to = a@b.c · subject = Hi", then how it ended if decided."""
    args, _ = format_args(item.tool_args, limit=ARGS_PREVIEW_LIMIT)
    preview = " · ".join(args.splitlines())
    risk = f"{_RISK_ICONS.get(item.risk, '•')} {escape(item.risk)}"
    line = (
        f"*{number}.* `{escape(cut(item.tool_name, SHORT_LIMIT))}` · {escape(cut(item.agent, SHORT_LIMIT))} · {risk}"
        f" — {preview} · <{item.url}|details>"
    )
    if item.is_pending and item.expires_at is not None:
        line += f"\n_expires {slack_relative(item.expires_at)}_"
    if not item.is_pending:
        line += f"\n{_OUTCOME_ICONS.get(item.status, '•')} {escape(item.status.capitalize())}"
        if item.decided_by and item.status != "expired":
            line += f" by {user_label(item.decided_by, item.decided_by_name)}"
        if item.decision_reason:
            line += f" — {escape(cut(item.decision_reason, 300))}"
    return cut(line, SECTION_TEXT_LIMIT)


def title(digest: DigestView) -> str:
    pending = len(digest.pending_items)
    if not pending:
        return f"Digest: {len(digest.items)} calls, all decided"
    return f"Digest: {pending} of {len(digest.items)} calls waiting for approval"


def digest_blocks(digest: DigestView) -> list[dict[str, Any]]:
    """The message: a header, each call (with its own buttons while pending), and "Approve these N"."""
    blocks: list[dict[str, Any]] = [{"type": "header", "text": _plain(cut(title(digest), HEADER_TEXT_LIMIT))}]
    for number, item in enumerate(digest.items, start=1):
        blocks.append(_section(item_line(number, item)))
        if item.is_pending:
            value = sign_confirmation_id(item.confirmation_id)
            blocks.append(
                {
                    "type": "actions",
                    "block_id": f"{DIGEST_ITEM_BLOCK_PREFIX}{number}",
                    "elements": [
                        {"type": "button", "action_id": APPROVE_ACTION_ID, "text": _plain(f"Approve {number}"), "value": value},
                        {"type": "button", "action_id": REJECT_ACTION_ID, "text": _plain(f"Reject {number}"), "value": value},
                    ],
                }
            )
    offered = digest.offered_ids()
    if offered:
        blocks.append(
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": "Calls gathered into one digest; each agent is waiting for its answer."}],
            }
        )
        blocks.append(
            {
                "type": "actions",
                "block_id": DIGEST_ACTIONS_BLOCK_ID,
                "elements": [
                    {
                        "type": "button",
                        "action_id": APPROVE_DIGEST_ACTION_ID,
                        "style": "primary",
                        "text": _plain(f"Approve these {len(offered)}"),
                        "value": sign_digest_ids(digest.digest_id, offered),
                        "confirm": {
                            "title": _plain(f"Approve {len(offered)} calls?"),
                            "text": {"type": "mrkdwn", "text": f"The {len(offered)} pending calls listed here will run."},
                            "confirm": _plain("Approve"),
                            "deny": _plain("Cancel"),
                        },
                    }
                ],
            }
        )
    return blocks


def digest_fallback(digest: DigestView) -> str:
    """The plain `text` of the notification."""
    return cut(title(digest), FALLBACK_TEXT_LIMIT)
