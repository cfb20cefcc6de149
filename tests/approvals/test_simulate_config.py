"""`manage.py simulate_config FILE` on a recorded history of 500 calls (docs/policies.md, "Trying a config
on the past"): exactly the calls whose outcome a draft changes, the counts per tool, and nothing written."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from tests.approvals.learning_history import CONFIG, build_history, row_counts

pytestmark = pytest.mark.django_db(transaction=True)

DRAFT = CONFIG.replace(
    """          - {effect: ask, tools: ["crm__delete_contact"], reason: deleting a contact needs a human}
""",
    """          - {effect: ask, tools: ["crm__delete_contact"], reason: deleting a contact needs a human}
          - {effect: deny, tools: ["crm__search"], when: "args.q.startsWith('drop')", reason: no SQL in searches}
          - {effect: allow, tools: ["crm__tag"], reason: tags are harmless}
""",
).replace(
    """        tools: ["pay__transfer"]
        channel: web
        approvers: ["alice"]
""",
    """        tools: ["pay__transfer"]
        when: "args.amount > 500"
        channel: web
        approvers: ["alice"]
      - kind: rate_limit
        name: balance-limit
        tools: ["pay__balance"]
        limit: 100
        window_seconds: 86400
        per: agent
      - kind: command              # would deny every call, and leave a mark, if a replay ran it
        name: auditor
        event: pre_tool_use
        tools: ["pay__balance"]
        command: ["sh", "-c", "touch {marker}; exit 2"]
""",
)


@pytest.fixture
def history():
    return build_history()


def test_it_reports_exactly_the_calls_whose_outcome_would_change(history, tmp_path):
    marker = tmp_path / "ran"
    draft = tmp_path / "draft.yaml"
    draft.write_text(DRAFT.replace("{marker}", str(marker)))
    before = row_counts()
    out = io.StringIO()
    call_command("simulate_config", str(draft), "--since", "1d", "--format", "json", stdout=out)
    report = json.loads(out.getvalue())

    searches = [pk for n, pk in enumerate(history["search_allowed"]) if n % 40 == 0]  # "drop table …"
    small_transfers = history["transfer_approved"][:5] + history["transfer_pending_in_range"]  # amount ≤ 500
    over_the_limit = history["balance_allowed"][100:]  # the 101st call of the day onwards
    expected = (
        {(pk, "crm__search", "allow", "deny") for pk in searches}
        | {(pk, "crm__tag", "ask", "allow") for pk in history["tag_approved"]}
        | {(pk, "pay__transfer", "ask", "allow") for pk in small_transfers}
        | {(pk, "pay__balance", "allow", "deny") for pk in over_the_limit}
    )
    assert {(c["id"], c["tool"], c["old"], c["new"]) for c in report["changed"]} == expected
    assert report["replayed"] == 500
    assert report["per_tool"]["crm__search"] == {"replayed": 200, "changed": 5, "allow → deny": 5}
    assert report["per_tool"]["pay__balance"] == {"replayed": 190, "changed": 90, "allow → deny": 90}
    assert report["per_tool"]["pay__transfer"] == {"replayed": 12, "changed": 6, "ask → allow": 6}
    assert report["per_tool"]["crm__merge"] == {"replayed": 16, "changed": 0}
    # The command hook was never run: it had not answered these calls when they were recorded.
    assert report["not_replayed"] == {"pay-bot/auditor": 100}  # the rate limit denied the others first
    assert not marker.exists()
    assert row_counts() == before


def test_the_text_report_has_a_table_of_changes_and_counts_per_tool(history, tmp_path):
    draft = tmp_path / "draft.yaml"
    draft.write_text(DRAFT.replace("{marker}", str(tmp_path / "ran")))
    out = io.StringIO()
    call_command("simulate_config", str(draft), stdout=out)
    text = out.getvalue()
    assert text.startswith("replayed 500 call(s) since ") and "; 110 would change" in text.splitlines()[0]
    assert f"{history['tag_approved'][0]}  crm-bot" in text and "ask → allow  (tags are harmless)" in text
    assert "pay__balance                       190       90  allow → deny: 90" in text


def test_the_recorded_config_itself_changes_nothing(history, tmp_path):
    draft = tmp_path / "same.yaml"
    draft.write_text(CONFIG)
    out = io.StringIO()
    call_command("simulate_config", str(draft), "--since", "2020-01-01", "--format", "json", stdout=out)
    report = json.loads(out.getvalue())
    assert report["replayed"] == 500 and report["changed"] == []


def test_a_bad_file_is_a_clear_error_with_exit_code_2(history, tmp_path):
    draft = tmp_path / "bad.yaml"
    draft.write_text(CONFIG.replace("default: ask", "default: maybe"))
    err = io.StringIO()
    with pytest.raises(CommandError) as caught:
        call_command("simulate_config", str(draft), stderr=err)
    assert caught.value.returncode == 2 and "nothing was replayed" in str(caught.value)
    assert "agents[0].hooks[1].default" in err.getvalue()
    with pytest.raises(CommandError) as missing:
        call_command("simulate_config", str(tmp_path / "none.yaml"), stderr=io.StringIO())
    assert missing.value.returncode == 2
