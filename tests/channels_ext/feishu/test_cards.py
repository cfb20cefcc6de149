"""The Feishu approval card (card JSON 2.0), drawn from CardView snapshots."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import Any

from gateway_contract import CardView, unsign_confirmation_id
from channels_ext.feishu.cards import ARG_VALUE_LIMIT, render_card

CONFIRMATION_ID = "7d1f0a52-3c55-4d0e-9a56-0f1f3b1d2e11"
APPROVER = "ou_3c14f3a59eaf2825dbe25359f15211a2"
SECOND_APPROVER = "ou_84aad35d084aa403a838cf73ee18467"


def card_view(**changes: Any) -> CardView:
    """A pending purchase request; keyword arguments replace any field."""
    pending = CardView(
        confirmation_id=CONFIRMATION_ID,
        agent="purchasing-bot",
        tool_name="oa__purchase_pay",
        tool_args={"amount": 80000, "vendor": "ACME Ltd", "lines": [{"sku": "A-1", "qty": 2}]},
        user_id="alice",
        session_id="sess-1",
        reason="Payments over 10,000 need a human",
        hook="approval_gate-1",
        status="pending",
        url="https://gateway.example/confirmations/7d1f0a52",
        expires_at=dt.datetime(2025, 1, 1, 12, 30, tzinfo=dt.UTC),
    )
    return dataclasses.replace(pending, **changes)


def markdown_of(card: dict[str, Any]) -> str:
    return next(element["content"] for element in card["body"]["elements"] if element["tag"] == "markdown")


def interactive_elements(card: dict[str, Any]) -> list[dict[str, Any]]:
    """Every button, form and input anywhere in the card body."""
    found = []
    stack = list(card["body"]["elements"])
    while stack:
        element = stack.pop()
        if element["tag"] in ("button", "form", "input"):
            found.append(element)
        stack.extend(element.get("elements", []))
    return found


def test_a_pending_card_is_card_json_2_with_shared_updates_and_an_orange_header() -> None:
    card = render_card(card_view())

    assert card["schema"] == "2.0"
    assert card["config"]["update_multi"] is True
    assert card["header"]["title"] == {"tag": "plain_text", "content": "Approval needed"}
    assert card["header"]["template"] == "orange"
    json.dumps(card)  # plain JSON all the way down


def test_the_markdown_names_agent_tool_arguments_user_reason_hook_expiry_and_the_page() -> None:
    text = markdown_of(render_card(card_view()))

    for expected in (
        "**Agent:** purchasing-bot",
        "**Tool:** oa\\_\\_purchase\\_pay",
        "- amount: 80000",
        "- vendor: ACME Ltd",
        '- lines: \\[{"qty": 2, "sku": "A-1"}\\]',
        "**End user:** alice",
        "**Why:** Payments over 10,000 need a human (hook: approval\\_gate-1)",
        "**Expires:** 2025-01-01 12:30 UTC",
        "[Open the approval page](https://gateway.example/confirmations/7d1f0a52)",
    ):
        assert expected in text


def test_the_approve_button_is_named_and_carries_the_decision_and_a_signed_id() -> None:
    approve = render_card(card_view())["body"]["elements"][1]

    assert approve["tag"] == "button"
    assert approve["name"] == "approve"
    assert approve["type"] == "primary"
    [behavior] = approve["behaviors"]
    assert behavior["type"] == "callback"
    assert behavior["value"]["decision"] == "approve"
    assert behavior["value"]["confirmation_id"] != CONFIRMATION_ID
    assert unsign_confirmation_id(behavior["value"]["confirmation_id"]) == CONFIRMATION_ID


def test_rejecting_goes_through_a_form_with_a_reason_input_and_a_named_submit_button() -> None:
    form = render_card(card_view())["body"]["elements"][2]

    assert form["tag"] == "form"
    assert form["name"]
    reason_input, reject = form["elements"]
    assert reason_input["tag"] == "input"
    assert reason_input["name"] == "reason"
    assert reason_input["placeholder"] == {"tag": "plain_text", "content": "Reason for rejecting"}
    assert reject["tag"] == "button"
    assert reject["name"] == "reject"
    assert reject["type"] == "danger"
    assert reject["form_action_type"] == "submit"
    [behavior] = reject["behaviors"]
    assert behavior["value"]["decision"] == "reject"
    assert unsign_confirmation_id(behavior["value"]["confirmation_id"]) == CONFIRMATION_ID


def test_every_interactive_component_has_a_unique_name() -> None:
    names = [element["name"] for element in interactive_elements(render_card(card_view()))]

    assert len(names) == 4
    assert len(set(names)) == len(names)


def test_an_approved_card_is_green_has_no_buttons_and_says_who_approved_when() -> None:
    decided = card_view(
        status="approved", decided_by=APPROVER, decided_at=dt.datetime(2025, 1, 1, 12, 5, tzinfo=dt.UTC)
    )

    card = render_card(decided)

    assert card["header"]["template"] == "green"
    assert interactive_elements(card) == []
    assert f"Approved** by <at id={APPROVER}></at> at 2025-01-01 12:05 UTC" in markdown_of(card)


def test_a_rejected_card_is_red_and_gives_the_reason() -> None:
    decided = card_view(status="rejected", decided_by=APPROVER, decision_reason="Vendor not approved")

    card = render_card(decided)

    assert card["header"]["template"] == "red"
    assert interactive_elements(card) == []
    assert f"Rejected** by <at id={APPROVER}></at> — Vendor not approved" in markdown_of(card)


def test_expired_and_cancelled_cards_are_grey_without_buttons() -> None:
    for status, word in (("expired", "Expired"), ("cancelled", "Cancelled")):
        card = render_card(card_view(status=status))

        assert card["header"]["template"] == "grey"
        assert interactive_elements(card) == []
        assert f"**{word}**" in markdown_of(card)


def test_quorum_progress_is_shown_when_more_than_one_approval_is_needed() -> None:
    text = markdown_of(render_card(card_view(approvals_required=2, approved_by=(APPROVER,))))

    assert f"**Approvals:** 1 of 2 — <at id={APPROVER}></at>" in text


def test_a_single_approval_request_shows_no_quorum_line() -> None:
    assert "**Approvals:**" not in markdown_of(render_card(card_view()))


def test_the_approvers_are_mentioned_while_pending() -> None:
    text = markdown_of(render_card(card_view(approvers=(APPROVER, SECOND_APPROVER))))

    assert f"**Approvers:** <at id={APPROVER}></at> <at id={SECOND_APPROVER}></at>" in text


def test_escalation_and_a_note_get_their_own_lines() -> None:
    text = markdown_of(render_card(card_view(escalated=True, note="Reminder: still waiting for your decision")))

    assert "**Escalated:**" in text
    assert "Reminder: still waiting for your decision" in text


def test_a_long_argument_value_is_cut_with_an_ellipsis() -> None:
    text = markdown_of(render_card(card_view(tool_args={"memo": "x" * 5000})))

    line = next(line for line in text.splitlines() if line.startswith("- memo: "))
    assert line.endswith("…")
    assert len(line) == len("- memo: ") + ARG_VALUE_LIMIT


def test_very_many_arguments_are_cut_and_point_to_the_approval_page() -> None:
    many = {f"field_{number}": "y" * 250 for number in range(100)}

    text = markdown_of(render_card(card_view(tool_args=many)))

    assert "more line(s) on the approval page" in text
    assert "- field\\_0: " in text
    assert "field\\_99" not in text
    assert text.endswith("[Open the approval page](https://gateway.example/confirmations/7d1f0a52)")
    assert len(text) < 5000


def test_agent_supplied_text_cannot_mention_everyone_or_forge_a_link() -> None:
    hostile = card_view(
        tool_args={"note": "<at id=all></at> **urgent** [Approve](https://evil.example)"},
        reason="<font color='red'>trust me</font>",
    )

    text = markdown_of(render_card(hostile))

    assert "<at id=all>" not in text
    assert "<font" not in text
    assert "[Approve](" not in text
    assert "&lt;at id=all&gt;&lt;/at&gt; \\*\\*urgent\\*\\* \\[Approve\\](https://evil.example)" in text


def test_a_non_feishu_decider_is_written_as_text_not_as_a_mention() -> None:
    text = markdown_of(render_card(card_view(status="approved", decided_by="web:bob")))

    assert "by web:bob" in text
    assert "<at" not in text


def test_the_risk_is_a_coloured_tag_beside_the_title_and_the_first_line_high_in_red() -> None:
    for risk, colour, line in (
        ("low", "green", "🟢 **Risk:** low"),
        ("medium", "orange", "🟡 **Risk:** medium"),
        ("high", "red", "🔴 <font color='red'>**Risk: high**</font>"),
    ):
        card = render_card(card_view(risk=risk))
        tag = {"tag": "text_tag", "text": {"tag": "plain_text", "content": f"Risk: {risk}"}, "color": colour}
        assert card["header"]["text_tag_list"] == [tag]
        assert markdown_of(card).startswith(line + "\n")
    assert render_card(card_view(risk="high"))["config"]["summary"]["content"].startswith("🔴 High risk · Approval needed")
    assert render_card(card_view(risk="low"))["config"]["summary"]["content"].startswith("Approval needed")


def test_a_turns_card_tags_its_riskiest_call_and_marks_each_call() -> None:
    from gateway_contract import CardItem

    items = (
        CardItem("11111111-0000-4000-8000-000000000001", "pay", {"amount": 5}, "pending", risk="low"),
        CardItem("11111111-0000-4000-8000-000000000002", "pay", {"amount": 20000}, "pending", risk="high"),
    )
    card = render_card(card_view(risk="low", items=items))

    assert card["header"]["text_tag_list"][0]["text"]["content"] == "Risk: high"
    assert "**1.** 🟢 pay (low risk) — amount: 5" in markdown_of(card)
    assert "**2.** 🔴 pay (high risk) — amount: 20000" in markdown_of(card)
