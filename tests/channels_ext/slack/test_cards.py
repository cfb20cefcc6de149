"""The Slack card's Block Kit, checked as data (no network)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import Any

from gateway_contract import CardItem, CardView, unsign_confirmation_id, unsign_shown_ids
from channels_ext.slack import cards

URL = "http://127.0.0.1:8000/approvals/6f1c2e1a-0000-4000-8000-000000000001"


def make_card(**overrides: Any) -> CardView:
    defaults: dict[str, Any] = dict(
        confirmation_id="6f1c2e1a-0000-4000-8000-000000000001",
        agent="purchasing-bot",
        tool_name="oa__purchase_pay",
        tool_args={"amount": 80000, "currency": "EUR"},
        user_id="u-42",
        session_id="s-1",
        reason="Payments need a human",
        hook="approval_gate-1",
        status="pending",
        url=URL,
        expires_at=dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
    )
    return CardView(**{**defaults, **overrides})


def all_text(blocks: list[dict[str, Any]]) -> str:
    return json.dumps(blocks, ensure_ascii=False)


def texts(blocks: list[dict[str, Any]]) -> list[str]:
    """Every mrkdwn/plain text string in the blocks, in order."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") in ("mrkdwn", "plain_text") and isinstance(node.get("text"), str):
                found.append(node["text"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(blocks)
    return found


def test_a_pending_card_names_the_agent_tool_arguments_user_and_reason() -> None:
    blocks = cards.card_blocks(make_card())
    text = "\n".join(texts(blocks))
    assert blocks[0] == {"type": "header", "text": {"type": "plain_text", "text": "Approval needed", "emoji": True}}
    for expected in (
        "purchasing-bot",
        "`oa__purchase_pay`",
        "amount = 80000",
        "currency = EUR",
        "u-42",
        "Payments need a human",
        "approval_gate-1",
        f"<{URL}|Open in browser>",
    ):
        assert expected in text


def test_the_expiry_is_a_slack_date_with_an_iso_fallback() -> None:
    text = "\n".join(texts(cards.card_blocks(make_card())))
    stamp = int(dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt.UTC).timestamp())
    assert f"<!date^{stamp}^{{date_short_pretty}} at {{time}}|2030-01-02 03:04 UTC>" in text


def test_the_buttons_carry_the_contract_ids_and_a_signed_confirmation_id() -> None:
    card = make_card()
    actions = cards.card_blocks(card)[-1]
    assert actions["type"] == "actions"
    assert actions["block_id"] == "approval_actions"
    approve, reject = actions["elements"]
    assert (approve["action_id"], approve["style"]) == ("approve", "primary")
    assert (reject["action_id"], reject["style"]) == ("reject", "danger")
    assert reject["confirm"]["confirm"]["text"] == "Reject"
    for button in (approve, reject):
        assert button["value"] != card.confirmation_id
        assert unsign_confirmation_id(button["value"]) == card.confirmation_id
        assert len(button["value"]) <= 2000


def test_the_fallback_text_says_who_wants_to_run_what() -> None:
    assert cards.fallback_text(make_card()) == "Approval needed: purchasing-bot wants to run oa__purchase_pay"


def test_agent_supplied_text_cannot_ping_the_channel_or_forge_links() -> None:
    card = make_card(tool_args={"to": "<!channel> <https://evil.example|Approve safely>"}, reason="a & b")
    text = all_text(cards.card_blocks(card))
    assert "<!channel>" not in text
    assert "<https://evil.example" not in text
    assert "&lt;!channel&gt;" in text
    assert "a &amp; b" in text


def test_a_long_value_is_cut_with_an_ellipsis_and_a_link_to_the_full_request() -> None:
    card = make_card(tool_args={"body": "x" * 5000, "amount": 1})
    section = next(t for t in texts(cards.card_blocks(card)) if t.startswith("*Arguments*"))
    assert "x" * 299 + "…" in section
    assert "amount = 1" in section
    assert f"<{URL}|see them all>" in section


def test_huge_argument_lists_stay_within_slacks_section_limit() -> None:
    card = make_card(tool_args={f"key{i}": "<&>" * 90 for i in range(200)})
    blocks = cards.card_blocks(card)
    for text in texts(blocks):
        assert len(text) <= 3000
    section = next(t for t in texts(blocks) if t.startswith("*Arguments*"))
    assert section.endswith(f"…```\n_Arguments shortened — <{URL}|see them all>_")


def test_cutting_never_leaves_half_an_html_entity() -> None:
    assert cards.cut("ab&amp;cd", 6) == "ab…"
    assert cards.cut("short", 10) == "short"


def test_a_card_with_no_arguments_says_so() -> None:
    assert "(no arguments)" in all_text(cards.card_blocks(make_card(tool_args={})))


def test_a_quorum_card_shows_progress() -> None:
    card = make_card(approvals_required=2, approved_by=("U0APPROVER",), approvers=("U0APPROVER", "U0OTHER"))
    text = all_text(cards.card_blocks(card))
    assert "1 of 2 approvals (<@U0APPROVER>)" in text
    assert "*Approvers:* <@U0APPROVER>, <@U0OTHER>" in text


def test_a_single_approval_card_shows_no_progress_line() -> None:
    assert "*Approvals:*" not in all_text(cards.card_blocks(make_card()))


def test_an_escalated_card_with_a_note_shows_both() -> None:
    text = all_text(cards.card_blocks(make_card(escalated=True, note="Reminder: still waiting")))
    assert "Escalated" in text
    assert "🔔 Reminder: still waiting" in text


def test_a_decided_card_has_no_buttons_and_says_who_decided() -> None:
    decided_at = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)
    card = make_card(status="approved", decided_by="U0APPROVER", decided_at=decided_at)
    blocks = cards.card_blocks(card)
    assert all(block["type"] != "actions" for block in blocks)
    assert blocks[1]["text"]["text"].startswith("✅ Approved by <@U0APPROVER> at <!date^")
    assert cards.fallback_text(card).startswith("✅ Approved by <@U0APPROVER>")


def test_outcome_lines_cover_every_final_state() -> None:
    base = make_card(decided_at=None)
    assert (
        cards.outcome_line(dataclasses.replace(base, status="rejected", decided_by="U0X", decision_reason="too much"))
        == "❌ Rejected by <@U0X> — too much"
    )
    assert cards.outcome_line(dataclasses.replace(base, status="expired", decided_by="system")) == "⌛ Expired"
    assert cards.outcome_line(dataclasses.replace(base, status="cancelled")) == "🚫 Cancelled"
    assert (
        cards.outcome_line(dataclasses.replace(base, status="approved", decided_by="alice")) == "✅ Approved by alice"
    )


def test_the_reject_modal_asks_for_a_required_reason() -> None:
    view = cards.reject_modal(make_card(), private_metadata='{"confirmation": "x"}')
    assert view["callback_id"] == "reject_reason"
    assert view["private_metadata"] == '{"confirmation": "x"}'
    assert len(view["title"]["text"]) <= 24
    reason = view["blocks"][-1]
    assert reason["type"] == "input"
    assert reason["block_id"] == cards.REASON_BLOCK_ID
    assert reason["element"]["action_id"] == cards.REASON_ACTION_ID
    assert "optional" not in reason


def test_a_turns_approve_all_carries_the_listed_pending_calls_signed_within_slacks_button_limit() -> None:
    items = tuple(
        CardItem(
            confirmation_id=f"6f1c2e1a-0000-4000-8000-{n:012d}",
            tool_name="oa__purchase_pay",
            tool_args={"amount": n},
            status="approved" if n == 1 else "pending",
        )
        for n in range(1, 41)  # more calls than a card lists
    )
    card = make_card(confirmation_id=items[0].confirmation_id, items=items)

    blocks = cards.card_blocks(card)

    (turn,) = [b for b in blocks if b.get("block_id") == cards.TURN_ACTIONS_BLOCK_ID]
    assert [e["text"]["text"] for e in turn["elements"]] == ["Approve the 14 listed", "Reject the 14 listed"]
    value = turn["elements"][0]["value"]
    assert len(value) <= cards.BUTTON_VALUE_LIMIT
    listed_pending = tuple(item.confirmation_id for item in items[1 : cards.MAX_TURN_ITEMS])
    assert unsign_shown_ids(value) == (items[0].confirmation_id, listed_pending)  # not the 25 it does not list


def test_the_risk_has_a_line_of_its_own_high_in_bold_with_a_warning_only_while_pending() -> None:
    assert "🟡 Risk: medium" in texts(cards.card_blocks(make_card()))
    high = make_card(risk="high")
    assert "🔴 *Risk: high* — read the arguments before approving" in texts(cards.card_blocks(high))
    assert cards.fallback_text(high).startswith("🔴 High risk. Approval needed:")
    decided = dataclasses.replace(high, status="approved", decided_by="slack:U0APPROVER")
    shown = texts(cards.card_blocks(decided))
    assert "🔴 *Risk: high*" in shown and not any("read the arguments" in text for text in shown)


def test_a_turns_card_heads_with_its_riskiest_call_and_marks_each_call() -> None:
    items = (
        CardItem("11111111-0000-4000-8000-000000000001", "pay", {"amount": 5}, "pending", risk="low"),
        CardItem("11111111-0000-4000-8000-000000000002", "pay", {"amount": 20000}, "approved", "slack:U0A", risk="high"),
    )
    shown = texts(cards.card_blocks(make_card(risk="low", items=items)))

    assert "🔴 *Risk: high* — read the arguments before approving" in shown  # one call is still pending
    assert any(text.startswith("*1.* 🟢 `pay` amount = 5 _(low risk)_") for text in shown)
    assert any(text.startswith("*2.* 🔴 `pay` amount = 20000 *(high risk)*") for text in shown)
