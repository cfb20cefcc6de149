"""The admin's pages for learning from the record, over HTTP as a team's staff (docs/policies.md):
the policies people always approved, shown to copy and never applied, and the config preview that
replays a pasted draft — both over the staff's own teams' agents only."""

from __future__ import annotations

import html
import os

import pytest
from django.contrib.auth.models import Permission, User

from approvals import services
from approvals.models import Agent, AgentConfigVersion, Team
from gateway_contract import Callback
from tests.approvals.learning_history import row_counts
from tests.conftest import apply_config
from tests.support import SignedIn

pytestmark = pytest.mark.django_db(transaction=True)

CONFIG = """
channels:
  - {name: web, kind: web}
agents:
  - name: ops-bot
    team: ops
    hooks:
      - {kind: approval_gate, name: gate, tools: ["deploy"], channel: web, approvers: ["alice"]}
  - name: lab-bot
    team: research
    hooks:
      - {kind: approval_gate, name: gate, tools: ["deploy"], channel: web, approvers: ["alice"]}
"""

DRAFT = CONFIG.replace('tools: ["deploy"], channel', 'tools: ["deploy"], when: "args.env == \'prod\'", channel')


@pytest.fixture
def fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def recorded(transactional_db, fast_password_hashing):
    """Ten approved deploys to staging for each agent, and two to prod still waiting."""
    apply_config(CONFIG)
    Team.objects.filter(name="default").update(everyone=False)
    for name in ("ops-bot", "lab-bot"):
        agent = Agent.objects.get(name=name)
        for n in range(12):
            env = "prod" if n >= 10 else "staging"
            answer = services.tool_call_pre(agent=agent, session_id=f"s{n}", tool_name="deploy", tool_args={"env": env})
            if n < 10:
                services.confirmation_respond(
                    channel_name="web",
                    callback=Callback(confirmation_id=answer.confirmation_id, decision="approve", actor="alice"),
                )
    rita = User.objects.create_user("rita", password="pw", is_staff=True)
    rita.user_permissions.add(Permission.objects.get(codename="view_toolcall"))
    Team.objects.get(name="ops").members.add(rita)
    User.objects.create_user("nina", password="pw")  # signed in, not staff


def test_staff_see_their_teams_suggestions_as_yaml_to_copy_and_nothing_that_applies_it(live_gateway, recorded):
    rita = SignedIn(live_gateway.url, "rita", "pw")
    versions = AgentConfigVersion.objects.count()
    page = rita.get("/admin/approvals/toolcall/suggestions/")
    assert page.status_code == 200
    text = html.unescape(page.text)
    assert '<td>ops-bot</td><td>deploy</td><td>env</td>' in text
    assert '<td class="approvals">10</td><td class="would-allow">10</td>' in text
    assert "lab-bot" not in text  # another team's agent: not suggested, not even named
    assert '- name: ops-bot' in text and 'args["env"] in ["staging"]' in text
    assert "<form method=\"post\"" not in page.text  # nothing on the page applies anything (only a GET form)
    assert rita.get("/admin/approvals/toolcall/suggestions/?min_approvals=11&days=30").text.count('class="suggestion"') == 0
    assert AgentConfigVersion.objects.count() == versions
    listing = rita.get("/admin/approvals/toolcall/")
    assert "/admin/approvals/toolcall/suggestions/" in listing.text and "/admin/approvals/toolcall/preview/" in listing.text
    rita.close()


def test_the_config_preview_replays_a_pasted_draft_on_the_staffs_teams_calls_only(live_gateway, recorded):
    rita = SignedIn(live_gateway.url, "rita", "pw")
    assert rita.get("/admin/approvals/toolcall/preview/").status_code == 200
    before = row_counts()
    page = rita.post("/admin/approvals/toolcall/preview/", {"draft": DRAFT, "days": "7"})
    text = html.unescape(page.text)
    assert "Replayed 12 call(s) since" in text and "10 would change." in text
    assert text.count('class="change"') == 10 and "<td>ops-bot</td><td>deploy</td><td>ask</td><td>allow</td>" in text
    assert "No recorded calls of an agent lab-bot of your teams." in text  # its calls are not replayed for rita
    assert row_counts() == before
    bad = rita.post("/admin/approvals/toolcall/preview/", {"draft": "agents: [{name: x, hooks: [{kind: nope}]}]", "days": "7"})
    assert "agents[0].hooks[0].kind" in html.unescape(bad.text) and 'id="summary"' not in bad.text
    # ${NAME} in a pasted draft is never read from the server's environment
    leaky = CONFIG.replace(
        "    team: ops\n    hooks:\n",
        "    team: ops\n    hooks:\n      - {kind: policy, rules: [{effect: deny, tools: [deploy], reason: '${HOME}'}]}\n",
    )
    shown = html.unescape(rita.post("/admin/approvals/toolcall/preview/", {"draft": leaky, "days": "7"}).text)
    assert "<td>ask</td><td>deny</td><td>${HOME}</td>" in shown and os.environ["HOME"] not in shown
    rita.close()


def test_people_who_are_not_staff_never_reach_the_pages(live_gateway, recorded):
    nina = SignedIn(live_gateway.url, "nina", "pw")
    for path in ("/admin/approvals/toolcall/suggestions/", "/admin/approvals/toolcall/preview/"):
        page = nina.get(path)
        assert "ops-bot" not in page.text and "/admin/login/" in str(page.url)
    nina.close()
