"""The one list of channel kinds and what each can do (docs/architecture.md, "One place per extension").

A channel kind is one package (`channels_ext/<kind>/`: its config model, its adapter, its cards) plus one
line in `CHANNEL_KINDS`. Every list of kinds — the Channel model's choices, the config file's schema, the
system checks, the admin's masking of secrets — is derived from that dict. The entries are dotted paths:
nothing here imports a kind.
"""

from __future__ import annotations

import dataclasses
from importlib.util import find_spec


@dataclasses.dataclass(frozen=True)
class ChannelKind:
    """Where a kind's two halves live, as dotted paths (imported when first needed)."""

    config: str  # its pydantic config model: light, imported to validate config files
    adapter: str  # its adapter class: may import a vendor SDK (lark-oapi takes seconds)
    # Its cards can list the calls of one turn (`CardView.items`) and decide them together;
    # if not, each call of a turn gets a card of its own.
    turn_cards: bool = True
    # Its card is the gateway's own page (`post_card` returns {"url": the request's page};
    # `update_card` and `notify_approvers` reach nothing outside): the gateway records such a
    # card as posted when the request is created and writes no outbox rows to draw or redraw it.
    draws_itself: bool = False
    # The vendor SDK its adapter imports when it is not one of the server's own requirements:
    # (module, the pinned requirement in requirements-channels.txt). A configured channel whose
    # SDK is missing fails the system check (channels_ext.E003) instead of its first delivery.
    requires: tuple[str, str] | None = None
    # Its cards can take a question's typed answer (docs/asking.md); a question to a channel of a
    # kind that cannot is refused when it is asked (400), naming the kind.
    questions: bool = False
    # Its adapter posts digests (`post_digest`, `update_digest`) and its config takes a `digest:` key:
    # the low-risk calls gathered into one message every N minutes (docs/policies.md, "Risk").
    digests: bool = False


CHANNEL_KINDS: dict[str, ChannelKind] = {
    "web": ChannelKind(
        "channels_ext.web.config.WebChannelConfig",
        "channels_ext.web.adapter.WebAdapter",
        draws_itself=True,
        questions=True,
    ),
    "slack": ChannelKind(
        "channels_ext.slack.config.SlackChannelConfig",
        "channels_ext.slack.adapter.SlackAdapter",
        questions=True,
        digests=True,
    ),
    "feishu": ChannelKind(
        "channels_ext.feishu.config.FeishuChannelConfig",
        "channels_ext.feishu.adapter.FeishuAdapter",
        questions=True,
        digests=True,
    ),
    "teams": ChannelKind(
        "channels_ext.teams.config.TeamsChannelConfig",
        "channels_ext.teams.adapter.TeamsAdapter",
        requires=("microsoft_agents.hosting.msteams", "microsoft-agents-hosting-msteams"),
    ),
    # DingTalk's general card template has one row of buttons and no inputs: one card per call.
    "dingtalk": ChannelKind(
        "channels_ext.dingtalk.config.DingTalkChannelConfig",
        "channels_ext.dingtalk.adapter.DingTalkAdapter",
        turn_cards=False,
        requires=("dingtalk_stream", "dingtalk-stream"),
    ),
    "telegram": ChannelKind(
        "channels_ext.telegram.config.TelegramChannelConfig",
        "channels_ext.telegram.adapter.TelegramAdapter",
        requires=("telegram", "python-telegram-bot"),
    ),
    "email": ChannelKind(
        "channels_ext.email.config.EmailChannelConfig", "channels_ext.email.adapter.EmailAdapter", turn_cards=False
    ),
}

# The prefixes of a channel-qualified approver id (`slack:U0123`): every channel kind, the
# Django admin, and `agent:` for an agent's own cancel. `gateway` (expiry) has none.
ACTOR_KINDS = frozenset({*CHANNEL_KINDS, "admin", "agent"})


def kind_spec(kind: str) -> ChannelKind:
    try:
        return CHANNEL_KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown channel kind {kind!r}; known: {', '.join(sorted(CHANNEL_KINDS))}") from None


def draws_itself(kind: str) -> bool:
    """Whether a kind's card is the gateway's own page (`ChannelKind.draws_itself`)."""
    return kind_spec(kind).draws_itself


def self_drawing_kinds() -> list[str]:
    """The kinds whose card is the gateway's own page (`ChannelKind.draws_itself`), sorted."""
    return sorted(kind for kind, spec in CHANNEL_KINDS.items() if spec.draws_itself)


def asks_questions(kind: str) -> bool:
    """Whether a kind's cards take a question's answer (`ChannelKind.questions`)."""
    return kind_spec(kind).questions


def question_kinds() -> list[str]:
    """The kinds whose cards take a question's answer, sorted."""
    return sorted(kind for kind, spec in CHANNEL_KINDS.items() if spec.questions)


def takes_digests(kind: str) -> bool:
    """Whether a kind's channels can gather calls into digests (`ChannelKind.digests`)."""
    return kind_spec(kind).digests


def has_turn_cards(kind: str) -> bool:
    """Whether a kind's cards list the calls of one turn (without importing its adapter)."""
    return kind_spec(kind).turn_cards


def missing_requirement(kind: str) -> str | None:
    """The requirement to install (`python-telegram-bot`) if a kind's vendor SDK is not importable; else None."""
    needed = kind_spec(kind).requires
    return needed[1] if needed is not None and find_spec(needed[0]) is None else None
