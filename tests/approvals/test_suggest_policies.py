"""`manage.py suggest_policies` on a recorded history of 500 calls (docs/policies.md, "Learning from what
people approved"): exactly the patterns that qualify, as YAML that `apply_config` accepts and that, applied,
allows exactly the calls it claims and nothing else."""

from __future__ import annotations

import datetime as dt
import io

import pytest
import yaml
from django.core.management import CommandError, call_command
from django.utils import timezone

from approvals import services
from approvals.config_schema import load_config_file
from approvals.models import Agent, ConfirmationRequest
from tests.approvals.learning_history import CONFIG, build_history, row_counts

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def history():
    return build_history()


def test_it_proposes_exactly_the_patterns_people_always_approved(history):
    found = services.policies_suggest(min_approvals=10, days=30)
    got = {(s.agent, s.tool, s.keys, s.approvals, s.would_allow) for s in found.suggestions}
    assert got == {
        ("crm-bot", "crm__delete_contact", ("id",), 11, 11),
        ("crm-bot", "crm__update_contact", ("field", "id"), 12, 14),
        ("pay-bot", "pay__transfer", ("amount", "currency"), 10, 11),
    }



def adopted(config_text: str, fragment: str) -> str:
    """The config file with each agent the fragment names replaced by the fragment's entry (what the
    operator is told to do with the output)."""
    config, entries = yaml.safe_load(config_text), yaml.safe_load(fragment)["agents"]
    by_name = {entry["name"]: entry for entry in entries}
    config["agents"] = [by_name.get(agent["name"], agent) for agent in config["agents"]]
    return yaml.safe_dump(config, sort_keys=False)


def test_its_yaml_passes_apply_config_and_applied_allows_exactly_the_calls_it_claims(history, tmp_path):
    out = io.StringIO()
    call_command("suggest_policies", stdout=out, stderr=io.StringIO())
    fragment = out.getvalue()
    assert "# [2] approved 12 times, none rejected; would have allowed 14 past call(s)" in fragment
    assert "pay-gate (approval_gate): its `when` leaves these pay__transfer calls out" in fragment
    draft = tmp_path / "adopted.yaml"
    draft.write_text(adopted(CONFIG, fragment))
    call_command("apply_config", str(draft), "--check", stdout=io.StringIO())  # the validation apply_config uses

    replayed = services.config_simulate(config=load_config_file(draft), since=timezone.now() - dt.timedelta(days=1))
    claimed = history["update_approved"] + history["update_pending_in_range"] + history["delete_approved"]
    claimed += history["transfer_approved"] + history["transfer_pending_in_range"]
    assert {(c.id, c.old, c.new) for c in replayed.changed} == {(pk, "ask", "allow") for pk in claimed}
    assert len(claimed) == sum(s.would_allow for s in services.policies_suggest().suggestions) == 36

    call_command("apply_config", str(draft), stdout=io.StringIO())
    crm, pay = Agent.objects.get(name="crm-bot"), Agent.objects.get(name="pay-bot")

    def decided(agent, tool, args, **extra):
        return services.tool_call_pre(agent=agent, session_id="after", tool_name=tool, tool_args=args, **extra).decision

    assert decided(crm, "crm__update_contact", {"id": 20, "field": "phone"}) == "allow"
    assert decided(crm, "crm__update_contact", {"id": 41, "field": "phone"}) == "pending"  # past the range
    assert decided(crm, "crm__update_contact", {"id": 20, "field": "address"}) == "pending"  # never approved
    assert decided(crm, "crm__update_contact", {"id": "20", "field": "phone"}) == "pending"  # another type
    assert decided(crm, "crm__update_contact", {"id": 20, "field": "phone", "x": 1}) == "pending"  # another shape
    assert decided(crm, "crm__delete_contact", {"id": 105}) == "allow"
    assert decided(crm, "crm__delete_contact", {"id": 105}, metadata={"region": "eu"}) == "pending"  # as before
    assert decided(crm, "crm__update_contact", {"id": 20, "field": "phone"}, metadata={"region": "eu"}) == "deny"
    assert decided(crm, "crm__merge", {"a": 1, "b": 2}) == "pending"
    assert decided(pay, "pay__transfer", {"amount": 500, "currency": "EUR"}) == "allow"
    assert decided(pay, "pay__transfer", {"amount": 500, "currency": "GBP"}) == "pending"
    assert decided(pay, "pay__transfer", {"amount": 911, "currency": "EUR"}) == "pending"


def test_near_misses_qualify_only_when_the_bar_is_lowered_to_meet_them(history):
    lowered = {(s.tool, s.approvals) for s in services.policies_suggest(min_approvals=9, days=30).suggestions}
    assert ("crm__tag", 9) in lowered  # nine approvals: enough for a bar of nine
    assert {"crm__merge", "crm__note", "crm__export"}.isdisjoint({tool for tool, _ in lowered})  # never: rejected, edited, old
    assert ("crm__export", 10) in {(s.tool, s.approvals) for s in services.policies_suggest(min_approvals=10, days=60).suggestions}
    only_pay = services.policies_suggest(agents=Agent.objects.filter(name="pay-bot"))
    assert [(s.agent, s.tool) for s in only_pay.suggestions] == [("pay-bot", "pay__transfer")]


def test_a_decision_changed_in_sql_teaches_nothing(history):
    """Someone with database access turns the rejection into an approval: the row no longer verifies,
    so it counts as a rejection, never as an approval."""
    rejected = ConfirmationRequest.objects.get(tool_call__pk=history["merge_rejected"][0])
    ConfirmationRequest.objects.filter(pk=rejected.pk).update(status="approved")
    # and another one forges approvals of a pattern nobody approved
    forged = ConfirmationRequest.objects.filter(tool_call__pk__in=history["update_pending_out_of_range"])
    forged.update(status="approved", decided_at=timezone.now())
    found = {(s.tool, s.approvals) for s in services.policies_suggest().suggestions}
    assert "crm__merge" not in {tool for tool, _ in found}
    assert ("crm__update_contact", 12) not in found  # the forged approval spoils its pattern instead of widening it


def test_the_command_runs_writes_nothing_and_says_so_when_nothing_qualifies(history):
    counts = row_counts()
    out, err = io.StringIO(), io.StringIO()
    call_command("suggest_policies", "--min-approvals", "100", stdout=out, stderr=err)
    assert yaml.safe_load(out.getvalue()) == {"agents": []}
    assert "# No pattern qualifies." in out.getvalue() and "0 suggestion(s)" in err.getvalue()
    call_command("suggest_policies", "--agent", "pay-bot", stdout=io.StringIO(), stderr=io.StringIO())
    assert row_counts() == counts
    with pytest.raises(CommandError, match="no agent named 'nobody'"):
        call_command("suggest_policies", "--agent", "nobody")


@pytest.mark.parametrize(
    ("args", "holds"),
    [
        ({'we"ird\\key': 'it\'s "quoted"\n', "ünï": 2.5, "flag": True, "many": "s3", "obj": {"a": 1}}, True),
        ({'we"ird\\key': "other", "ünï": 2.5, "flag": True, "many": "s3", "obj": {"a": 1}}, False),
        ({'we"ird\\key': 'it\'s "quoted"\n', "ünï": 3, "flag": True, "many": "s3", "obj": {"a": 1}}, False),
        ({'we"ird\\key': 'it\'s "quoted"\n', "ünï": "2", "flag": True, "many": "s3", "obj": {"a": 1}}, False),
        ({'we"ird\\key': 'it\'s "quoted"\n', "ünï": 1, "flag": False, "many": "s3", "obj": {"a": 1}}, False),
        ({'we"ird\\key': 'it\'s "quoted"\n', "ünï": 1, "flag": True, "many": "anything", "obj": {"b": 2}}, True),
        ({'we"ird\\key': 'it\'s "quoted"\n', "ünï": 1, "flag": True, "many": 7, "obj": {"a": 1}}, False),
        ({'we"ird\\key': 'it\'s "quoted"\n', "ünï": 1, "flag": True, "many": "s3", "obj": [1]}, False),
        ({"ünï": 1, "flag": True, "many": "s3", "obj": {"a": 1}}, False),
    ],
)
def test_a_learned_when_holds_only_within_what_was_approved_and_never_errs(args, holds):
    """Any key, any string, compiled by the validator of `when`; another type or shape is false, not an error
    (an error in a policy's rule would deny the call)."""
    from approvals.services.suggestions import pattern_when
    from hooks.cel import compile_expression, evaluate

    approved = [
        {'we"ird\\key': 'it\'s "quoted"\n', "ünï": value, "flag": True, "many": f"s{value}", "obj": {"a": value}}
        for value in (1, 2.5, 1.5, 1.25, 2.25, 2)  # six distinct strings in `many`: more than five, any string
    ]
    when = pattern_when(tuple(sorted(approved[0])), approved, masked=set())
    assert evaluate(compile_expression(when), {"args": args}) is holds
