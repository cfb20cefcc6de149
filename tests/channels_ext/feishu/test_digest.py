"""Feishu digests (issue 35, point 2; docs/feishu.md, "Digests"): low-risk calls kept back and sent as one
card, through the live gateway, a real worker, lark-oapi against FakeFeishu and encrypted, signed callbacks.
The digest tick is beat's; here the test makes the held cards old and calls the tick's function itself."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db.models import F

from approvals.models import ApproverResponse, ConfirmationRequest, Digest, Outbox
from approvals.tasks import TICK_JOBS, tick
from gateway_contract import unsign_digest_ids
from tests.channels_ext.feishu.test_cards import interactive_elements
from tests.channels_ext.feishu.test_end_to_end import (
    APP_SECRET,
    APPROVER,
    CHANNEL,
    CHANNELS_YAML,
    ENCRYPT_KEY,
    TOOL,
    VERIFICATION_TOKEN,
    FeishuDeployment,
    agents_yaml,
)
from tests.conftest import apply_config, make_agent_client
from tests.fakes.feishu_api import MESSAGES_PATH, FakeFeishu, unique_app_id
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def digest_deploy(live_gateway, celery_worker, fake_feishu: FakeFeishu, monkeypatch) -> Iterator[Callable[[], FeishuDeployment]]:
    """The Feishu channel with a digest of low-risk calls, and a gate that rates TOOL low."""

    def deploy_() -> FeishuDeployment:
        app_id = unique_app_id()  # lark-oapi caches tenant tokens process-wide by app_id
        for name, value in {
            "FEISHU_APP_ID": app_id, "FEISHU_APP_SECRET": APP_SECRET, "FEISHU_VERIFICATION_TOKEN": VERIFICATION_TOKEN,
            "FEISHU_ENCRYPT_KEY": ENCRYPT_KEY, "FEISHU_API_BASE_URL": fake_feishu.domain,
        }.items():  # fmt: skip
            monkeypatch.setenv(name, value)
        digest = "    digest: {risks: [low], every_minutes: 5}\n"
        apply_config(CHANNELS_YAML + digest + agents_yaml(1800, gate_keys="        risk: low"))
        return FeishuDeployment(
            fake=fake_feishu,
            agent=make_agent_client(live_gateway, "purchasing-bot"),
            callback_url=f"{live_gateway.url}/channels/{CHANNEL}/callback",
            app_id=app_id,
        )

    yield deploy_
    wait_until(lambda: not Outbox.objects.filter(status="pending").exists(), what="the outbox to drain at teardown")


def buttons(card: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The card's buttons by name, with the value each sends."""
    return {e["name"]: e["behaviors"][0]["value"] for e in interactive_elements(card) if e["tag"] == "button"}


def markdown_of(card: dict[str, Any]) -> str:
    """Every markdown element of the card, one per line (a digest has one per call)."""
    return "\n".join(e["content"] for e in card["body"]["elements"] if e["tag"] == "markdown")


def card_now(feishu: FeishuDeployment, message_id: str, sent: dict[str, Any]) -> dict[str, Any]:
    patches = feishu.fake.calls("PATCH", f"{MESSAGES_PATH}/{message_id}")
    return json.loads(patches[-1].json()["content"]) if patches else sent


def test_low_risk_calls_go_out_as_one_digest_card_and_approve_these_decides_the_pending_ones(digest_deploy, monkeypatch):
    feishu = digest_deploy()
    ids = []
    for amount in (1, 2, 3):
        answer = feishu.agent.pre_tool_use(TOOL, {"amount": amount}, user_id="u-42").json()
        assert answer["decision"] == "pending"
        ids.append(answer["confirmation_id"])
    assert set(ConfirmationRequest.objects.values_list("risk", flat=True)) == {"low"}
    assert feishu.fake.sent_messages() == []  # held for the digest

    Outbox.objects.filter(status="held").update(created_at=F("created_at") - dt.timedelta(minutes=6))
    # As beat runs it: its tick, applied, by a worker that has not gathered digests yet.
    (digests,) = [job for job in TICK_JOBS if job.name == "digests"]
    monkeypatch.setattr(digests, "last", float("-inf"))
    assert tick.apply().get()["digests"] == 1
    wait_until(lambda: Digest.objects.filter(message_ref__isnull=False).exists(), what="the digest to be sent")
    [message] = feishu.fake.sent_messages()
    card = message.card
    assert card["header"]["title"]["content"] == "Digest: 3 of 3 calls waiting"
    markdown = markdown_of(card)
    for number, amount in enumerate((1, 2, 3), start=1):
        assert f"**{number}.** oa\\_\\_purchase\\_pay · purchasing-bot · 🟢 low — amount: {amount}" in markdown
    values = buttons(card)
    assert {"approve_1", "approve_2", "approve_3", "reject_1", "reject_2", "reject_3", "approve_digest"} <= set(values)
    digest = Digest.objects.get()
    assert unsign_digest_ids(values["approve_digest"]["digest"]) == (str(digest.pk), tuple(ids))

    # The second call rejected on its own, with a reason from the form.
    rejected = feishu.click(values["reject_2"], reason="not this one")
    assert rejected.json()["toast"]["type"] == "success"
    assert "card" not in rejected.json()  # the digest stays on the screen (redrawn through the outbox)

    # A tampered "Approve these 3" (the 2nd id swapped for a call the digest does not show) is refused.
    text, signature = values["approve_digest"]["digest"].rsplit(":", 1)
    outsider = feishu.agent.pre_tool_use(TOOL, {"amount": 4}, user_id="u-42").json()["confirmation_id"]
    forged = feishu.click({**values["approve_digest"], "digest": f"{text.replace(ids[1], outsider)}:{signature}"})
    assert (forged.status_code, forged.json()["error"]["code"]) == (400, "callback_refused")

    approved = feishu.click(values["approve_digest"])
    assert approved.status_code == 200
    assert approved.json()["toast"] == {"type": "success", "content": "Approved 2 call(s) of this digest."}
    statuses = dict(ConfirmationRequest.objects.values_list("tool_args__amount", "status"))
    assert statuses == {1: "approved", 2: "rejected", 3: "approved", 4: "pending"}
    assert ApproverResponse.objects.filter(approver=f"feishu:{APPROVER}", decision="approve").count() == 2

    def all_decided() -> dict[str, Any] | None:
        now = card_now(feishu, message.message_id, card)
        return now if now["header"]["title"]["content"] == "Digest: 3 calls, all decided" else None

    final = wait_until(all_decided, what="the digest card redrawn as decided")
    assert [e for e in interactive_elements(final) if e["tag"] == "button"] == []
    assert "❌ rejected by" in markdown_of(final) and markdown_of(final).count("✅ approved by") == 2
