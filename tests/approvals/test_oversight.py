"""Whether oversight is real (docs/web-and-admin.md, "Oversight"): requests asked by agents and answered
on the approval page over real HTTP, one expired through the agent's own wait; the admin's oversight
page read as its staff read it (its SVG charts, its tables), the team scoping, the escaping of what
agents and the directory name, and the same figures on `/metrics`.

Where a person would have taken their time, the test moves the request's card back instead of
waiting: the `card_posted` event (and the request's creation) are set earlier through the ORM before
the click, so the answer is really given that many seconds after the card was shown.
"""

from __future__ import annotations

import datetime as dt
import html
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.db.models import F
from django.utils import timezone

from approvals.admin.charts import percent_text, seconds_text
from approvals.models import ApproverResponse, ConfirmationEvent, ConfirmationRequest, EventKind, Person, Team
from approvals.selectors.oversight import percentile
from tests.channels_ext.slack.test_end_to_end import ALICE, TOOL, click, posted_card, slack_agent  # noqa: F401 (a fixture)
from tests.conftest import apply_config, make_agent_client
from tests.gateway.test_metrics import TOKEN, scrape
from tests.support import SignedIn, rewrite_request

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "correct horse battery staple"
PAGE = "/admin/approvals/confirmationrequest/oversight/"
XSS_TOOL = 'lab__<script>alert("tool")</script>'
XSS_NAME = '<img src=x onerror=alert("name")>'

CONFIG = """
channels:
  - {name: web, kind: web}
  - {name: lab-web, kind: web, team: research}
agents:
  - name: purchasing-bot
    hooks:
      - kind: approval_gate
        name: gate
        tools: ["oa__*", "fs__*"]
        channel: web
        approvers: ["alice", "bob"]
        timeout_seconds: 1800
  - name: lab-bot
    team: research
    hooks:
      - kind: approval_gate
        name: lab-gate
        tools: ["lab__*"]
        channel: lab-web
        approvers: ["dave"]
        timeout_seconds: 1800
"""


@pytest.fixture
def setup(live_gateway, settings):
    """The config, the people (alice, bob approve; dave approves the lab's, named in the directory by an
    XSS attempt; rita is the research team's staff; root a superuser; carol signed in, not staff; sam
    staff who may not view requests), the agents, and fast answers under 20 s."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.GATEWAY_OVERSIGHT_FAST_SECONDS = 20
    settings.GATEWAY_METRICS_TOKEN = TOKEN
    apply_config(CONFIG)
    Team.objects.filter(name="default").update(everyone=False)
    users = {name: User.objects.create_user(name, password=PASSWORD) for name in ("alice", "bob", "carol", "dave")}
    Team.objects.get(name="default").members.add(users["alice"], users["bob"], users["carol"])
    Team.objects.get(name="research").members.add(users["dave"])
    Person.objects.create(display_name=XSS_NAME, user=users["dave"])
    rita = User.objects.create_user("rita", password=PASSWORD, is_staff=True)
    rita.user_permissions.add(Permission.objects.get(codename="view_confirmationrequest"))
    Team.objects.get(name="research").members.add(rita)
    User.objects.create_user("sam", password=PASSWORD, is_staff=True)
    User.objects.create_superuser("root", "root@example.com", PASSWORD)
    agents = {name: make_agent_client(live_gateway, name) for name in ("purchasing-bot", "lab-bot")}
    yield agents
    for agent in agents.values():
        agent.http.close()


def ask(agent, tool: str) -> str:
    answer = agent.pre_tool_use(tool, {"amount": 1}).json()
    assert answer["decision"] == "pending", answer
    return answer["confirmation_id"]


def shown_earlier(confirmation_id: str, seconds: float) -> None:
    """As if the card had been shown `seconds` ago: its request made and its card posted that long ago."""
    back = dt.timedelta(seconds=seconds)
    ConfirmationRequest.objects.filter(pk=confirmation_id).update(created_at=F("created_at") - back)
    ConfirmationEvent.objects.filter(confirmation_id=confirmation_id).update(created_at=F("created_at") - back)


def all_earlier(confirmation_id: str, days: int) -> None:
    """The whole exchange moved `days` days back (the same seconds apart): it happened on another day."""
    shown_earlier(confirmation_id, days * 86400)
    back = dt.timedelta(days=days)
    ApproverResponse.objects.filter(confirmation_id=confirmation_id).update(created_at=F("created_at") - back)


def waited(confirmation_id: str) -> float:
    """An answer's time to decide, from the rows: its card's first posting to the response."""
    response = ApproverResponse.objects.get(confirmation_id=confirmation_id)
    posted = ConfirmationEvent.objects.filter(confirmation_id=confirmation_id, kind=EventKind.CARD_POSTED).first()
    return (response.created_at - posted.created_at).total_seconds()


def table(page: str, table_id: str) -> dict[str, list[str]]:
    """A table of the page by its first cell's text (as read: unescaped)."""
    body = re.search(rf'<table class="oversight" id="{table_id}">.*?</thead>(.*?)</table>', page, re.S).group(1)
    rows = {}
    for row in re.findall(r"<tr>(.*?)</tr>", body, re.S):
        cells = [html.unescape(re.sub(r"<[^>]+>", "", cell)).strip() for cell in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, re.S)]
        rows[cells[0]] = cells[1:]
    return rows


def count(page: str, element: str, css: str) -> int:
    return len(re.findall(rf'<{element} class="{css}"', page))


def test_the_oversight_page_draws_the_answers_and_expiries_and_metrics_count_them(setup, live_gateway):
    buyer, lab = setup["purchasing-bot"], setup["lab-bot"]
    before = scrape(live_gateway)
    alice, bob = SignedIn(live_gateway.url, "alice", PASSWORD), SignedIn(live_gateway.url, "bob", PASSWORD)

    # alice: approves one 30 s after its card (two days ago), rejects one after 90 s (today).
    older, rejected = ask(buyer, "oa__purchase_pay"), ask(buyer, "oa__purchase_pay")
    shown_earlier(older, 30)
    assert alice.post(f"/approvals/{older}/", {"decision": "approve", "reason": ""}).status_code == 200
    shown_earlier(rejected, 90)
    alice.post(f"/approvals/{rejected}/", {"decision": "reject", "reason": "not this quarter"})
    # bob approves one at once: faster than the threshold (20 s here)
    quick = ask(buyer, "fs__delete")
    bob.post(f"/approvals/{quick}/", {"decision": "approve", "reason": ""})
    # nobody answers one: its deadline passes while its agent waits, and the wait expires it
    unanswered = ask(buyer, "fs__delete")
    rewrite_request(unanswered, expires_at=ConfirmationRequest.objects.get(pk=unanswered).created_at)
    assert buyer.wait(unanswered, timeout=5).json()["status"] == "expired"
    # the lab's: an agent's tool name and a directory name that try to run script
    lab_request = ask(lab, XSS_TOOL)
    dave = SignedIn(live_gateway.url, "dave", PASSWORD)
    dave.post(f"/approvals/{lab_request}/", {"decision": "approve", "reason": ""})
    statuses = {str(pk): status for pk, status in ConfirmationRequest.objects.values_list("pk", "status")}
    assert [statuses[pk] for pk in (older, rejected, quick, unanswered, lab_request)] == [
        "approved", "rejected", "approved", "expired", "approved"]  # fmt: skip
    seconds = {pk: waited(pk) for pk in (older, rejected, quick, lab_request)}
    assert 30 <= seconds[older] < 40 and 90 <= seconds[rejected] < 100 and seconds[quick] < 20

    # /metrics: each answer by tool, channel and decision; the fast one; the expiry
    after = scrape(live_gateway)

    def delta(name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    pay = {"tool": "oa__purchase_pay", "channel": "web"}
    assert delta("gateway_time_to_decide_seconds_count", **pay, decision="approve") == 1
    assert delta("gateway_time_to_decide_seconds_count", **pay, decision="reject") == 1
    assert delta("gateway_time_to_decide_seconds_bucket", **pay, decision="reject", le="60.0") == 0
    assert delta("gateway_time_to_decide_seconds_bucket", **pay, decision="reject", le="300.0") == 1
    assert 120 <= delta("gateway_time_to_decide_seconds_sum", **pay, decision="approve") + delta(
        "gateway_time_to_decide_seconds_sum", **pay, decision="reject") < 140  # fmt: skip
    assert delta("gateway_time_to_decide_seconds_count", tool="fs__delete", channel="web", decision="approve") == 1
    assert delta("gateway_fast_decisions_total", tool="fs__delete", channel="web") == 1
    assert delta("gateway_fast_decisions_total", **pay) == 0
    assert delta("gateway_expired_unanswered_total", tool="fs__delete", channel="web") == 1
    assert delta("gateway_expired_unanswered_total", **pay) == 0
    assert delta("gateway_fast_decisions_total", tool=XSS_TOOL, channel="lab-web") == 1

    all_earlier(older, days=2)  # alice's approval was two days ago

    # the superuser's page: every team's figures
    root = SignedIn(live_gateway.url, "root", PASSWORD)
    index = root.get("/admin/")
    assert PAGE in index.text and "Is oversight real?" in index.text
    page = root.get(PAGE)
    assert page.status_code == 200
    text = page.text
    assert text.count('<figure class="chart">') == 4 and text.count('<svg xmlns="http://www.w3.org/2000/svg" viewBox') == 4
    # 30 days, today last: p50 and p90 points on the two days with answers, one bar a day of fast
    # answers (today's), one of expiries (today)
    assert count(text, "circle", "point p50") == 2 and count(text, "circle", "point p90") == 2
    assert count(text, "circle", "point rate") == 2
    assert count(text, "rect", "bar fast") == 1 and count(text, "rect", "bar expired") == 1
    today = timezone.localdate().isoformat()
    assert f"fast answers {today}: 2</title>" in text  # bob's and dave's
    assert f"expired {today}: 1</title>" in text

    approvers = table(text, "oversight-approvers")
    # alice: her two answers, their percentiles as PostgreSQL computed them and as read here
    two = [seconds[older], seconds[rejected]]
    assert (approvers["alice"][0], approvers["bob"][0], approvers[XSS_NAME][0]) == ("web:alice", "web:bob", "web:dave")
    assert approvers["alice"][1:] == [
        "2", seconds_text(percentile(two, 0.5)), seconds_text(percentile(two, 0.9)), "50%", "0", "0%", "1"]  # fmt: skip
    assert approvers["bob"][1:] == ["1", seconds_text(seconds[quick]), seconds_text(seconds[quick]), "100%", "1", "100%", "1"]
    assert approvers[XSS_NAME][1:] == ["1", seconds_text(seconds[lab_request]), seconds_text(seconds[lab_request]),
                                       "100%", "1", "100%", "0"]  # fmt: skip
    everyone = list(seconds.values())
    assert approvers["All approvers"][1:] == [
        "4", seconds_text(percentile(everyone, 0.5)), seconds_text(percentile(everyone, 0.9)), percent_text(3 / 4),
        "2", "50%", "1"]  # fmt: skip
    tools = table(text, "oversight-tools")
    assert tools["oa__purchase_pay"] == ["2", seconds_text(percentile(two, 0.5)), seconds_text(percentile(two, 0.9)),
                                         "50%", "0", "0%", "0"]  # fmt: skip
    assert tools["fs__delete"] == ["1", seconds_text(seconds[quick]), seconds_text(seconds[quick]), "100%", "1", "100%", "1"]
    assert tools[XSS_TOOL][0] == "1"
    # what an agent or the directory names is text, never markup
    assert "<script>" not in text and "<img src=x" not in text
    assert html.escape(XSS_TOOL, quote=False) in text or html.escape(XSS_TOOL) in text

    # a window of 7 days draws 7 days (the first one labelled below the charts); one not offered is refused
    week = root.get(f"{PAGE}?days=7")
    assert week.status_code == 200 and count(week.text, "circle", "point p50") == 2
    assert f">{(timezone.localdate() - dt.timedelta(days=6)).isoformat()}</text>" in week.text
    refused = root.get(f"{PAGE}?days=13")
    assert refused.status_code == 400 and "days must be one of 7, 30, 90" in refused.text

    # rita, the research team's staff: only the lab's answers
    rita = SignedIn(live_gateway.url, "rita", PASSWORD)
    scoped = rita.get(PAGE)
    assert scoped.status_code == 200
    assert set(table(scoped.text, "oversight-approvers")) == {XSS_NAME, "All approvers"}
    assert set(table(scoped.text, "oversight-tools")) == {XSS_TOOL}
    assert "oa__purchase_pay" not in scoped.text and "alice" not in scoped.text
    assert count(scoped.text, "circle", "point p50") == 1 and count(scoped.text, "rect", "bar expired") == 0


def test_only_staff_who_may_view_requests_see_the_page(setup, live_gateway):
    carol = SignedIn(live_gateway.url, "carol", PASSWORD)
    with httpx.Client(base_url=live_gateway.url, cookies=carol.http.cookies, timeout=30) as plain:
        answer = plain.get(PAGE)
        assert answer.status_code == 302 and answer.headers["location"].startswith("/admin/login/")
    sam = SignedIn(live_gateway.url, "sam", PASSWORD)
    assert sam.get(PAGE).status_code == 403
    assert PAGE not in sam.get("/admin/").text
    assert httpx.get(f"{live_gateway.url}{PAGE}").status_code == 302


def test_the_python_percentile_interpolates_as_postgresqls_percentile_cont(transactional_db):
    """The fallback `make run` uses on SQLite gives PostgreSQL's answers."""
    samples = [[4.0], [1.0, 2.0], [0.5, 3.0, 7.0, 90.0, 1800.0], [float(n) for n in range(1, 12)]]
    with connection.cursor() as cursor:
        for values in samples:
            for fraction in (0.5, 0.9):
                cursor.execute(
                    "SELECT percentile_cont(%s) WITHIN GROUP (ORDER BY v) FROM unnest(%s::float8[]) AS v",
                    [fraction, values],
                )
                assert percentile(values, fraction) == pytest.approx(cursor.fetchone()[0])
    assert percentile([], 0.5) is None


def test_a_chat_answer_is_timed_from_when_its_card_was_posted_not_from_the_request(
    slack_agent, fake_slack, live_gateway, settings
):
    """A Slack card is posted by a worker, later than the request was made: an answer 12 s after the card
    of a request made 57 s before is a 12-second answer (fast under a 30 s threshold), on the page and
    in the metrics alike."""
    settings.GATEWAY_METRICS_TOKEN = TOKEN
    settings.GATEWAY_OVERSIGHT_FAST_SECONDS = 30
    before = scrape(live_gateway)
    confirmation_id = ask(slack_agent, TOOL)
    card = posted_card(fake_slack)
    ConfirmationRequest.objects.filter(pk=confirmation_id).update(created_at=F("created_at") - dt.timedelta(seconds=57))
    ConfirmationEvent.objects.filter(confirmation_id=confirmation_id, kind=EventKind.CARD_POSTED).update(
        created_at=F("created_at") - dt.timedelta(seconds=12)
    )
    assert click(live_gateway, fake_slack, card, ALICE, "approve").status_code == 200
    assert ConfirmationRequest.objects.get(pk=confirmation_id).status == "approved"
    answered = waited(confirmation_id)
    assert 12 <= answered < 20

    after = scrape(live_gateway)
    labels = {"tool": TOOL, "channel": "ops-slack"}
    assert after.value("gateway_time_to_decide_seconds_count", **labels, decision="approve") - before.value(
        "gateway_time_to_decide_seconds_count", **labels, decision="approve") == 1  # fmt: skip
    in_30s = after.value("gateway_time_to_decide_seconds_bucket", **labels, decision="approve", le="30.0")
    assert in_30s - before.value("gateway_time_to_decide_seconds_bucket", **labels, decision="approve", le="30.0") == 1
    fast = after.value("gateway_fast_decisions_total", **labels) - before.value("gateway_fast_decisions_total", **labels)
    assert fast == 1

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    User.objects.create_superuser("root", "root@example.com", PASSWORD)
    page = SignedIn(live_gateway.url, "root", PASSWORD).get(PAGE).text
    row = table(page, "oversight-approvers")["alice"]
    assert row[:3] == ["slack:U0ALICE", "1", seconds_text(answered)] and row[5:7] == ["1", "100%"]


def test_an_agent_inventing_tool_names_cannot_grow_the_series_past_the_bound():
    """In a process of its own (the bound is per process): 150 invented tools are 100 labels and `other`."""
    script = """
from prometheus_client.parser import text_string_to_metric_families
from gateway_utils import metrics
for n in range(150):
    metrics.approver_answered(tool=f"made_up_{n}", channel="web", decision="approve", seconds=1.0, fast_seconds=3)
    metrics.expired_unanswered(tool=f"made_up_{n}", channel="web")
families = {f.name: f for f in text_string_to_metric_families(metrics.exposition().decode())}
for name in ("gateway_fast_decisions", "gateway_expired_unanswered"):
    tools = {s.labels["tool"]: s.value for s in families[name].samples if s.name.endswith("_total")}
    print(name, len(tools), tools["other"], tools["made_up_0"], "made_up_120" in tools)
"""
    env = {key: value for key, value in os.environ.items() if key != "PROMETHEUS_MULTIPROC_DIR"}
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60, cwd=ROOT)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split("\n")[:2] == [
        "gateway_fast_decisions 101 50.0 1.0 False",
        "gateway_expired_unanswered 101 50.0 1.0 False",
    ]
