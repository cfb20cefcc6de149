"""Exports filtered by team (docs/audit.md): `export_audit --team` and the admin's export of a list
filtered by team — and a team's staff export only their team, whatever the filter says."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from approvals.models import Agent, Team
from tests.audit.support import agents, some_history

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def two_teams():
    payer, reader = agents()
    finance = Team.objects.create(name="finance")
    Agent.objects.filter(pk=payer.pk).update(team=finance)
    some_history(payer)
    some_history(reader, session="s-2")
    return finance, payer, reader


def exported_agents(text: str) -> list[str]:
    return [json.loads(line)["agent"] for line in text.splitlines()]


def test_export_audit_team_narrows_the_export_to_that_teams_agents(two_teams):
    out = io.StringIO()
    call_command("export_audit", "--format", "jsonl", "--team", "finance", stdout=out, stderr=io.StringIO())
    assert set(exported_agents(out.getvalue())) == {"payer"} and len(out.getvalue().splitlines()) == 4
    out = io.StringIO()
    call_command("export_audit", "--format", "jsonl", "--team", "default", stdout=out, stderr=io.StringIO())
    assert set(exported_agents(out.getvalue())) == {"reader"}


def test_an_unknown_team_is_a_clear_error_and_exports_nothing(two_teams):
    out = io.StringIO()
    with pytest.raises(CommandError, match="no team named 'nope'; known teams: default, finance"):
        call_command("export_audit", "--format", "jsonl", "--team", "nope", stdout=out, stderr=io.StringIO())
    assert out.getvalue() == ""


def test_the_admin_exports_by_team_and_a_teams_staff_only_their_team(two_teams):
    finance, _, _ = two_teams
    admin = Client()
    admin.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    page = admin.get("/admin/approvals/toolcall/", {"agent__team__id__exact": finance.pk})
    assert f"agent__team__id__exact={finance.pk}".encode() in page.content  # the export button keeps the filter
    response = admin.get("/admin/approvals/toolcall/export/", {"agent__team__id__exact": finance.pk})
    assert set(exported_agents(b"".join(response.streaming_content).decode())) == {"payer"}

    # Finance's staff: only finance's calls, even when asking for the default team's.
    Team.objects.update_or_create(name="default", defaults={"everyone": False})
    fin = User.objects.create_user("fin", password="pw", is_staff=True)
    fin.user_permissions.add(Permission.objects.get(codename="view_toolcall"))
    finance.members.add(fin)
    staff = Client()
    staff.force_login(fin)
    everything = staff.get("/admin/approvals/toolcall/export/")
    assert set(exported_agents(b"".join(everything.streaming_content).decode())) == {"payer"}
    default = Team.objects.get(name="default")
    other = staff.get("/admin/approvals/toolcall/export/", {"agent__team__id__exact": default.pk})
    assert exported_agents(b"".join(other.streaming_content).decode()) == []
    assert b"reader" not in staff.get("/admin/approvals/toolcall/").content
