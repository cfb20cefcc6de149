"""The inbox as a triage list, through Django's test client against the real database (docs/approving.md,
"The inbox"): filters and groups by agent, tool, risk and age, a risk badge and a one-line preview per
row, and a batch that decides each request only as its row showed it."""

from __future__ import annotations

import datetime
import re
import uuid

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from approvals.models import ApproverResponse, ConfirmationEvent, ConfirmationRequest
from tests.channels_ext.web.conftest import PASSWORD, ask, inbox_shown, shown_as_now
from tests.support import rewrite_request

pytestmark = pytest.mark.django_db(transaction=True)


def signed_in(username: str) -> Client:
    client = Client()
    assert client.login(username=username, password=PASSWORD)
    return client


def rows_of(html: str) -> list[dict[str, str]]:
    """The inbox's rows as drawn, in order: id, risk, agent, tool."""
    return [
        {"id": pk, "risk": risk, "agent": agent, "tool": tool}
        for pk, risk, agent, tool in re.findall(
            r'<tr class="row[^"]*" data-id="([^"]+)" data-risk="(\w+)" data-agent="([^"]+)" data-tool="([^"]+)"', html
        )
    ]


def groups_of(html: str) -> list[tuple[str, int]]:
    """The group headers, in order: (the group's name, its count)."""
    groups = []
    for head in re.findall(r'<tr class="group-head">.*?</tr>', html):
        name = re.sub(r"<[^>]+>", "", re.search(r': (.*?)<span class="count"', head).group(1))
        groups.append((name, int(re.search(r">(\d+)</span></th>", head).group(1))))
    return groups


def test_the_inbox_filters_by_agent_tool_risk_and_age_and_groups_with_counts(bots):
    billing, deploy, mail = bots["billing-bot"], bots["deploy-bot"], bots["mail-bot"]
    paid = {n: ask(billing, "pay", amount=n) for n in (5, 500, 5000)}
    shipped = {n: ask(deploy, "ship", amount=n) for n in (50, 50000)}
    refunded = ask(billing, "refund", amount=2000)
    ask(mail, "send", amount=1)  # bob's: not in alice's inbox, nor among her filters' choices
    ConfirmationRequest.objects.filter(pk=paid[5]).update(created_at=timezone.now() - datetime.timedelta(minutes=90))
    alice = signed_in("alice")

    everything = alice.get(reverse("approval-inbox")).content.decode()
    assert [r["id"] for r in rows_of(everything)][0] == paid[5]  # oldest first
    assert len(rows_of(everything)) == 6
    assert "mail-bot" not in everything and "send" not in re.findall(r'<option value="(\w+)"', everything)

    def ids(**query) -> set[str]:
        response = alice.get(reverse("approval-inbox"), query)
        assert response.status_code == 200
        return {r["id"] for r in rows_of(response.content.decode())}

    assert ids(agent="deploy-bot") == set(shipped.values())
    assert ids(tool="refund") == {refunded}
    assert ids(risk="high") == {paid[5000], shipped[50000], refunded}
    assert ids(risk="low", agent="billing-bot") == {paid[5]}
    assert ids(older_than=60) == {paid[5]}
    assert ids(agent="mail-bot") == set()  # bob's requests are not hers, filtered or not

    by_risk = alice.get(reverse("approval-inbox"), {"group": "risk"}).content.decode()
    assert groups_of(by_risk) == [("high", 3), ("medium", 1), ("low", 2)]  # riskiest first
    assert [r["risk"] for r in rows_of(by_risk)] == ["high", "high", "high", "medium", "low", "low"]
    by_agent = alice.get(reverse("approval-inbox"), {"group": "agent", "risk": "high"}).content.decode()
    assert groups_of(by_agent) == [("billing-bot", 2), ("deploy-bot", 1)]
    by_tool = alice.get(reverse("approval-inbox"), {"group": "tool"}).content.decode()
    assert groups_of(by_tool) == [("pay", 3), ("refund", 1), ("ship", 2)]
    assert '<span class="risk high">high</span>' in by_tool  # the badge


def test_a_filter_the_inbox_cannot_read_is_a_400_that_says_why(bots):
    ask(bots["billing-bot"], "pay", amount=5)
    alice = signed_in("alice")

    for query, field in (({"risk": "extreme"}, "risk"), ({"older_than": "soon"}, "older_than"), ({"group": "x"}, "group")):
        response = alice.get(reverse("approval-inbox"), query)
        assert response.status_code == 400
        assert f"{field}: " in response.content.decode()
        assert len(rows_of(response.content.decode())) == 1  # shown unfiltered beside the error


def test_each_row_previews_its_arguments_on_one_line_escaped_and_cut(bots):
    script = "<script>alert('x')</script>"
    long_text = "word " * 60
    pk = ask(bots["billing-bot"], "pay", amount=5, memo=script, note=long_text)

    html = signed_in("alice").get(reverse("approval-inbox")).content.decode()

    row = html.split(f'data-id="{pk}"', 1)[1].split("</tr>", 1)[0]
    preview = re.search(r'<code class="preview" title="[^"]*">(.*?)</code>', row).group(1)
    assert preview.startswith("amount=5, memo=&quot;&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;&quot;, note=")
    assert "<script>" not in row
    assert preview.endswith("…") and len(re.sub(r"&[#\w]+;", "_", preview)) <= 80
    assert "\n" not in preview


def test_a_request_changed_since_the_page_was_drawn_is_left_unchanged_and_listed(bots):
    billing = bots["billing-bot"]
    kept, tampered, rerated, unchanged = (ask(billing, "pay", amount=n) for n in (10, 20, 3000, 40))
    alice = signed_in("alice")
    drawn = inbox_shown(alice.get(reverse("approval-inbox")).content.decode())
    assert set(drawn) == {kept, tampered, rerated, unchanged}
    # What two rows showed changes after the page was drawn — signed anew, so the record still verifies
    # (someone with the database and the audit key): only what the page showed tells them apart.
    rewrite_request([tampered], tool_args={"amount": 20, "to": "attacker"})
    rewrite_request([rerated], risk="low")  # was high

    response = alice.post(
        reverse("approval-inbox-decide"),
        {"ids": list(drawn.values()), "decision": "approve", "next": "/approvals/"},
        follow=True,
    )

    page = response.content.decode()
    assert "Approved 2 request(s)" in page
    said = page.split('<ul class="messages">', 1)[1].split("</ul>", 1)[0]
    assert said.count("changed since this page was drawn") == 2
    assert [ConfirmationRequest.objects.get(pk=pk).status for pk in (kept, tampered, rerated, unchanged)] == [
        "approved",
        "pending",
        "pending",
        "approved",
    ]
    for pk in (tampered, rerated):  # nothing at all was written for them
        assert not ApproverResponse.objects.filter(confirmation_id=pk).exists()
        assert not ConfirmationEvent.objects.filter(confirmation_id=pk, kind="refused_click").exists()
    # Drawn again, the changed rows show what they are now, and decide as such.
    redrawn = inbox_shown(page)
    assert set(redrawn) == {tampered, rerated} and redrawn[tampered] != drawn[tampered]
    alice.post(reverse("approval-inbox-decide"), {"ids": [redrawn[tampered]], "decision": "reject", "reason": "not this payee"})
    assert ConfirmationRequest.objects.get(pk=tampered).status == "rejected"


def test_a_change_made_in_sql_is_refused_by_what_the_row_showed_before_the_record_is_even_checked(bots):
    pk = ask(bots["billing-bot"], "pay", amount=10)
    alice = signed_in("alice")
    drawn = inbox_shown(alice.get(reverse("approval-inbox")).content.decode())
    ConfirmationRequest.objects.filter(pk=pk).update(tool_args={"amount": 10, "to": "attacker"})  # not signed

    response = alice.post(reverse("approval-inbox-decide"), {"ids": [drawn[pk]], "decision": "approve"}, follow=True)

    said = response.content.decode().split('<ul class="messages">', 1)[1].split("</ul>", 1)[0]
    assert "changed since this page was drawn" in said
    assert ConfirmationRequest.objects.get(pk=pk).status == "pending"
    # Drawn again and approved as it is now, the record that does not verify is refused by the core.
    redrawn = inbox_shown(response.content.decode())
    again = alice.post(reverse("approval-inbox-decide"), {"ids": [redrawn[pk]], "decision": "approve"}, follow=True)
    assert "does not verify" in again.content.decode()
    assert ConfirmationRequest.objects.get(pk=pk).status == "pending"


def test_a_hand_made_batch_without_what_the_rows_showed_decides_nothing(bots):
    pk = ask(bots["billing-bot"], "pay", amount=10)
    other = ask(bots["billing-bot"], "pay", amount=11)
    alice = signed_in("alice")
    drawn = inbox_shown(alice.get(reverse("approval-inbox")).content.decode())
    digest_of_other = drawn[other].split(":")[1]

    bare = alice.post(reverse("approval-inbox-decide"), {"ids": [pk], "decision": "approve"}, follow=True)
    swapped = alice.post(reverse("approval-inbox-decide"), {"ids": [f"{pk}:{digest_of_other}"], "decision": "approve"}, follow=True)
    junk = alice.post(reverse("approval-inbox-decide"), {"ids": [f"{pk}:{'0' * 32}"], "decision": "approve"}, follow=True)

    def said(response) -> str:
        return response.content.decode().split('<ul class="messages">', 1)[1].split("</ul>", 1)[0]

    assert "this page did not show it as it is now" in said(bare)
    for response in (swapped, junk):
        assert "changed since this page was drawn" in said(response)
    assert ConfirmationRequest.objects.get(pk=pk).status == "pending"
    assert not ApproverResponse.objects.filter(confirmation_id=pk).exists()


def test_a_turn_that_grew_after_the_page_was_drawn_keeps_its_new_call_pending(bots):
    billing = bots["billing-bot"]

    def in_turn(amount: int) -> str:
        body = billing.pre_tool_use("pay", {"amount": amount}, turn_id="t-1", user_id="u-7").json()
        assert body["decision"] == "pending", body
        return body["confirmation_id"]

    first, second = in_turn(1), in_turn(2)
    alice = signed_in("alice")
    drawn = inbox_shown(alice.get(reverse("approval-inbox")).content.decode())
    joined = in_turn(3)  # the agent adds a call to the turn while alice looks at the page

    response = alice.post(reverse("approval-inbox-decide"), {"ids": list(drawn.values()), "decision": "approve"}, follow=True)

    assert "Approved 2 request(s)" in response.content.decode()
    statuses = {pk: ConfirmationRequest.objects.get(pk=pk).status for pk in (first, second, joined)}
    assert statuses == {first: "approved", second: "approved", joined: "pending"}
    assert set(inbox_shown(response.content.decode())) == {joined}


def test_the_same_batch_posted_twice_decides_each_request_once(bots):
    ids = [ask(bots["deploy-bot"], "ship", amount=n) for n in (1, 2, 3)]
    alice = signed_in("alice")
    drawn = list(inbox_shown(alice.get(reverse("approval-inbox")).content.decode()).values())
    body = {"ids": drawn, "decision": "reject", "reason": "freeze week"}

    first = alice.post(reverse("approval-inbox-decide"), body, follow=True).content.decode()
    again = alice.post(reverse("approval-inbox-decide"), body, follow=True).content.decode()

    assert "Rejected 3 request(s)" in first
    assert "Left unchanged (3)" in again and "Already rejected by web:alice: freeze week" in again
    for pk in ids:
        assert ApproverResponse.objects.filter(confirmation_id=pk).count() == 1
        assert ConfirmationEvent.objects.filter(confirmation_id=pk, kind="rejected").count() == 1


def test_after_a_batch_the_inbox_keeps_its_filters_and_sends_nobody_elsewhere(bots):
    pk = ask(bots["billing-bot"], "pay", amount=5000)
    other = ask(bots["billing-bot"], "pay", amount=6000)
    alice = signed_in("alice")
    drawn = inbox_shown(alice.get(reverse("approval-inbox"), {"risk": "high", "group": "tool"}).content.decode())

    kept = alice.post(
        reverse("approval-inbox-decide"),
        {"ids": [drawn[pk]], "decision": "approve", "next": "/approvals/?risk=high&group=tool&evil=1"},
    )
    elsewhere = alice.post(
        reverse("approval-inbox-decide"),
        {"ids": [drawn[other]], "decision": "approve", "next": "https://evil.example/approvals/?risk=high"},
    )

    assert kept["Location"] == "/approvals/?risk=high&group=tool"
    assert elsewhere["Location"] == "/approvals/?risk=high"  # only the filters of what was posted, rebuilt


def test_another_teams_request_in_a_batch_stays_unknown(bots):
    """A digest does not open a door: a request of a team alice is not in is 'no such request', with nothing recorded."""
    from approvals.models import Agent, Team

    mail = ask(bots["mail-bot"], "send", amount=1)
    Agent.objects.filter(name="mail-bot").update(team=Team.objects.create(name="secret", everyone=False))

    response = signed_in("alice").post(
        reverse("approval-inbox-decide"), {"ids": [shown_as_now(mail)], "decision": "approve"}, follow=True
    )

    said = response.content.decode().split('<ul class="messages">', 1)[1].split("</ul>", 1)[0]
    assert said.endswith(f"Left unchanged (1): {mail[:8]}: no such request</li>")  # not even its tool's name
    assert ConfirmationRequest.objects.get(pk=mail).status == "pending"
    assert not ConfirmationEvent.objects.filter(confirmation_id=mail, kind="refused_click").exists()


def test_the_inbox_with_500_pending_reads_a_constant_number_of_statements(bots, django_assert_max_num_queries):
    """500 requests from 500 end users, for two approvers: the page does not read anything per row."""
    template = ConfirmationRequest.objects.get(pk=ask(bots["billing-bot"], "pay", amount=5))
    mail = ConfirmationRequest.objects.get(pk=ask(bots["mail-bot"], "send", amount=5))
    clones = []
    for n in range(498):
        source = template if n % 3 else mail
        clone = ConfirmationRequest.objects.get(pk=source.pk)
        clone.pk = uuid.uuid4()
        clone.tool_args = {"amount": n, "note": f"row {n}"}
        clone.user_id = f"end-user-{n}"
        clone.risk = ("low", "medium", "high")[n % 3]
        clones.append(clone)
    ConfirmationRequest.objects.bulk_create(clones)
    alice = signed_in("alice")
    alice.get(reverse("approval-inbox"))  # the session and the user, warmed like any later page

    with django_assert_max_num_queries(16):
        response = alice.get(reverse("approval-inbox"), {"group": "risk"})

    html = response.content.decode()
    assert len(rows_of(html)) == 1 + sum(1 for n in range(498) if n % 3)
    assert "mail-bot" not in html  # bob's requests: not hers to decide, nor to see


def test_two_batches_racing_over_the_same_requests_decide_each_exactly_once(bots):
    """alice's inbox open in two tabs: an approval of the first six and a rejection of the last six, posted
    at the same moment; the four both name are decided once, by whichever came first."""
    import threading

    from django.db import connection as db_connection

    ids = [ask(bots["billing-bot"], "pay", amount=n) for n in range(8)]
    tabs = [signed_in("alice"), signed_in("alice")]
    drawn = inbox_shown(tabs[0].get(reverse("approval-inbox")).content.decode())
    bodies = [
        {"ids": [drawn[pk] for pk in ids[:6]], "decision": "approve"},
        {"ids": [drawn[pk] for pk in ids[2:]], "decision": "reject", "reason": "duplicate run"},
    ]
    barrier = threading.Barrier(2)

    def post(tab, body) -> None:
        try:
            barrier.wait()
            assert tab.post(reverse("approval-inbox-decide"), body).status_code == 302
        finally:
            db_connection.close()

    threads = [threading.Thread(target=post, args=pair) for pair in zip(tabs, bodies)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    statuses = {pk: ConfirmationRequest.objects.get(pk=pk).status for pk in ids}
    assert all(statuses[pk] == "approved" for pk in ids[:2]) and all(statuses[pk] == "rejected" for pk in ids[6:])
    for pk in ids:
        assert statuses[pk] in ("approved", "rejected")
        assert ApproverResponse.objects.filter(confirmation_id=pk).count() == 1
        assert ConfirmationEvent.objects.filter(confirmation_id=pk, kind__in=("approved", "rejected")).count() == 1
