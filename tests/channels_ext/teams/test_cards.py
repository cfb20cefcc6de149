"""The Teams Adaptive Card drawn from a CardView: what an agent or user wrote is never read as markdown, every
button is an Action.Execute carrying a signed id, and a decided card keeps no button."""

from __future__ import annotations

import dataclasses
import datetime as dt

from gateway_contract import CardItem, CardView, unsign_confirmation_id, unsign_shown_ids
from channels_ext.teams.cards import fallback_text, render_card
from tests.channels_ext.teams.support import executes, find_all, inputs

PENDING = CardView(
    confirmation_id="3f2b1c9e-0d4a-4c8e-9b7a-6e5f4d3c2b1a",
    agent="purchasing-bot",
    tool_name="oa__purchase_pay",
    tool_args={"amount": 80000, "memo": "**urgent** [pay here](https://evil.example.com) <at>everyone</at>"},
    user_id="u-42",
    session_id="s-1",
    reason="payments need a human",
    hook="finance-gate",
    status="pending",
    url="https://gateway.example.com/approvals/3f2b1c9e",
    expires_at=dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC),
    approvers=("0b1c2d3e-4f5a-4b6c-8d7e-9f0a1b2c3d4e",),
    editable_paths=("amount",),
    grant_options=("for this session (same arguments)",),
)


def test_text_from_agents_and_users_is_only_ever_in_text_runs_which_teams_never_reads_as_markdown():
    card = render_card(PENDING)

    blocks_with_the_memo = find_all(card, lambda node: "pay here" in str(node.get("text", "")))
    assert blocks_with_the_memo and all(node["type"] == "TextRun" for node in blocks_with_the_memo)
    assert all(block["text"] in ("Approval needed",) for block in find_all(card, lambda n: n.get("type") == "TextBlock"))


def test_a_pending_card_offers_approve_a_scope_edit_and_reject_each_carrying_the_signed_id():
    card = render_card(PENDING)

    buttons = {button["verb"]: button for button in executes(card)}
    assert list(buttons) == ["approve", "approve_grant_0", "approve_edited", "reject"]
    assert {unsign_confirmation_id(b["data"]["confirmation_id"]) for b in buttons.values()} == {PENDING.confirmation_id}
    assert buttons["approve_edited"]["data"]["edit"] == ["amount"]
    assert inputs(card)["arg_0"]["value"] == "80000"
    assert inputs(card)["reason"]["maxLength"] == 1000
    assert card["version"] == "1.4"  # Universal Actions


def test_a_decided_card_has_no_button_but_the_link_to_the_page():
    decided = dataclasses.replace(
        PENDING,
        status="approved",
        decided_by="teams:0b1c2d3e-4f5a-4b6c-8d7e-9f0a1b2c3d4e",
        decided_by_name="Alice Example",
        approved_by=("teams:0b1c2d3e-4f5a-4b6c-8d7e-9f0a1b2c3d4e",),
        decided_at=dt.datetime(2026, 11, 26, 11, 0, tzinfo=dt.UTC),
    )

    card = render_card(decided)

    assert executes(card) == []
    assert [action["type"] for action in card["actions"]] == ["Action.OpenUrl"]
    outcome = next(node for node in card["body"] if node.get("id") == "outcome")
    assert outcome["inlines"][0]["text"] == (
        "✅ Approved by Alice Example (teams:0b1c2d3e-4f5a-4b6c-8d7e-9f0a1b2c3d4e) at 2026-11-26 11:00 UTC"
    )


def test_approve_all_on_a_turns_card_carries_the_signed_ids_of_the_calls_it_shows():
    items = tuple(
        CardItem(confirmation_id=f"00000000-0000-4000-8000-00000000000{n}", tool_name="fs__write", tool_args={"n": n}, status="pending")
        for n in (1, 2)
    )
    card = render_card(dataclasses.replace(PENDING, confirmation_id=items[0].confirmation_id, items=items))

    buttons = [button["verb"] for button in executes(card)]
    assert buttons == ["approve", "reject", "approve", "reject", "approve_all", "reject_all"]
    approve_all = next(button for button in executes(card) if button["verb"] == "approve_all")
    assert unsign_shown_ids(approve_all["data"]["shown"]) == (
        items[0].confirmation_id, tuple(item.confirmation_id for item in items)
    )


def _risk_runs(card: dict) -> list[dict]:
    (block,) = find_all(card, lambda node: node.get("id") == "risk")
    return block["inlines"]


def test_the_card_shows_its_risk_high_in_red_and_bold_also_once_decided():
    high = dataclasses.replace(PENDING, risk="high")
    marker, label = _risk_runs(render_card(high))
    assert (marker["text"], label["text"], label["color"], label["weight"]) == ("🔴 ", "Risk: high", "Attention", "Bolder")
    assert fallback_text(high).startswith("🔴 High risk. Approval needed: purchasing-bot wants to run")

    decided = dataclasses.replace(high, status="rejected", decided_by="teams:x", decided_at=PENDING.expires_at)
    assert [run["text"] for run in _risk_runs(render_card(decided))] == ["🔴 ", "Risk: high"]
    low = _risk_runs(render_card(dataclasses.replace(PENDING, risk="low")))[1]
    assert (low["text"], low["color"], "weight" in low) == ("Risk: low", "Good", False)
    assert fallback_text(dataclasses.replace(PENDING, risk="low")).startswith("Approval needed:")


def test_a_turns_card_shows_each_calls_risk_and_its_riskiest_at_the_top():
    items = (
        CardItem("11111111-0000-4000-8000-000000000001", "pay", {"amount": 5}, "pending", risk="low"),
        CardItem("11111111-0000-4000-8000-000000000002", "pay", {"amount": 20000}, "pending", risk="high"),
    )
    card = render_card(dataclasses.replace(PENDING, risk="low", items=items))

    assert _risk_runs(card)[1]["text"] == "Risk: high"
    shown = find_all(card, lambda node: node.get("type") == "TextRun" and str(node.get("text", "")).endswith(" risk)"))
    assert [(run["text"], run["color"]) for run in shown] == [("(low risk)", "Good"), ("(high risk)", "Attention")]
