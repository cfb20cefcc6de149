"""A channel's `digest:` key (docs/reference/config.md): which risks are gathered and how often; `high` is
refused with a sentence saying why, as are keys a digest does not have and kinds that send no digests."""

from __future__ import annotations

from approvals.config_schema import parse_config_text
from gateway_contract import digest_config
from tests.hooks.schema_support import problems_of

SLACK = """
channels:
  - name: ops-slack
    kind: slack
    bot_token: xoxb-1
    signing_secret: s3cret
    channel_id: C0APPROVALS
    {digest}
"""


def problem_text(digest: str, channel: str = SLACK) -> list[str]:
    return [str(p) for p in problems_of(channel.format(digest=digest))]


def test_a_digest_of_low_and_medium_calls_every_five_minutes_is_accepted():
    config = parse_config_text(SLACK.format(digest="digest: {risks: [medium, low], every_minutes: 5}"), environ={})
    (channel,) = config.channels
    settings = digest_config(channel.model_dump())
    assert (settings.risks, settings.every_minutes) == (["low", "medium"], 5)
    assert digest_config(parse_config_text(SLACK.format(digest=""), environ={}).channels[0].model_dump()) is None


def test_high_risk_calls_are_never_digested():
    (problem,) = problem_text("digest: {risks: [low, high]}")
    assert "channels[0].digest.risks" in problem
    assert "high-risk calls are never digested: each is posted at once" in problem


def test_a_digest_needs_a_whole_minute_and_known_keys():
    assert any("channels[0].digest.every_minutes" in p for p in problem_text("digest: {every_minutes: 0}"))
    assert any("channels[0].digest.risks" in p for p in problem_text("digest: {risks: [urgent]}"))
    assert any("channels[0].digest.every" in p for p in problem_text("digest: {every: 5}"))


def test_a_kind_that_sends_no_digests_refuses_the_key():
    web = """
channels:
  - name: web
    kind: web
    {digest}
"""
    assert any("channels[0].digest" in p for p in problem_text("digest: {every_minutes: 5}", web))
