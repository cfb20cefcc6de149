"""Teams from the config file, and the staff API scoped by team (docs/approving.md, "Teams")."""

from __future__ import annotations

import httpx
import pytest
from django.contrib.auth.models import User

from approvals import services
from approvals.config_schema import parse_config_text
from approvals.models import Agent, AgentConfigVersion, Channel, Team
from gateway_utils.configfile import ConfigError
from tests.conftest import apply_config

pytestmark = pytest.mark.django_db(transaction=True)

CONFIG = """
channels:
  - {name: web, kind: web}
  - {name: lab-web, kind: web, team: research}
agents:
  - {name: purchasing-bot, hooks: []}
  - {name: lab-bot, team: research, hooks: []}
"""


def test_a_file_that_names_no_team_puts_everything_in_the_default_team_open_to_everyone():
    apply_config("channels: [{name: web, kind: web}]\nagents: [{name: purchasing-bot, hooks: []}]\n")
    assert Agent.objects.get().team.name == Channel.objects.get().team.name == "default"
    assert Team.objects.get(name="default").everyone is True
    assert services.agent_create(name="by-hand").team.name == "default"


def test_teams_the_file_names_are_made_closed_and_agents_move_when_their_team_changes():
    apply_config(CONFIG)
    research = Team.objects.get(name="research")
    assert research.everyone is False
    assert Agent.objects.get(name="lab-bot").team == research and Channel.objects.get(name="lab-web").team == research
    assert Agent.objects.get(name="purchasing-bot").team.name == "default"
    assert Channel.objects.get(name="lab-web").config == {}  # `team` is not a key of the channel's own config

    summary = services.config_apply(
        config=parse_config_text(CONFIG.replace("{name: purchasing-bot, hooks: []}", "{name: purchasing-bot, team: research, hooks: []}")),
        source="test",
    )
    assert summary.agents_moved == ["purchasing-bot"]
    assert Agent.objects.get(name="purchasing-bot").team == research
    assert "agents moved to another team: purchasing-bot" in summary.lines()
    again = services.config_apply(config=parse_config_text(CONFIG.replace("{name: purchasing-bot, hooks: []}", "{name: purchasing-bot, team: research, hooks: []}")), source="test")
    assert again.agents_moved == [] and "agent purchasing-bot" in again.unchanged


def test_a_team_name_that_is_not_a_slug_is_a_problem_at_its_path():
    with pytest.raises(ConfigError) as caught:
        parse_config_text("agents: [{name: a, team: 'Payments Team', hooks: []}]\n")
    assert caught.value.problems[0].path.startswith("agents[0].team")


@pytest.fixture
def fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def test_a_teams_staff_reach_only_their_teams_agents_through_the_hooks_api(live_gateway, fast_password_hashing):
    apply_config(CONFIG)
    Team.objects.update_or_create(name="default", defaults={"everyone": False})
    rita = User.objects.create_user("rita", password="pw-rita", is_staff=True)
    Team.objects.get(name="research").members.add(rita)
    root = User.objects.create_superuser("root", "root@example.com", "pw-root")
    with httpx.Client(base_url=live_gateway.url, auth=("rita", "pw-rita"), timeout=30) as staff:
        assert staff.get("/api/v1/agents/lab-bot/hooks").json()["agent"] == "lab-bot"
        other = staff.put("/api/v1/agents/purchasing-bot/hooks", json={"hooks": []})
        assert other.status_code == 404 and other.json()["error"]["code"] == "not_found"
        assert staff.get("/api/v1/agents/purchasing-bot/hooks").status_code == 404
    assert not AgentConfigVersion.objects.filter(agent__name="purchasing-bot", version__gt=1).exists()
    with httpx.Client(base_url=live_gateway.url, auth=(root.username, "pw-root"), timeout=30) as superuser:
        assert superuser.get("/api/v1/agents/purchasing-bot/hooks").status_code == 200
