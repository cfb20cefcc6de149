"""The contract the gateway's core and its channels share, below both (docs/architecture.md).

The core (`approvals`) and every channel package (`channels_ext.<kind>`) import it; it imports neither.
What it holds: the one list of channel kinds and their capabilities (`registry`), the config every
channel has (`config`), what a card shows (`cards`), the adapter contract with its callbacks and
outcomes (`adapter`), the link that brings clicks over an outbound connection (`links`), ids signed
into buttons (`signing`), what a digest shows (`digest`) and the answers a question may take (`answers`).
"""

from gateway_contract import answers
from gateway_contract.registry import (
    ACTOR_KINDS,
    CHANNEL_KINDS,
    ChannelKind,
    asks_questions,
    takes_digests,
    draws_itself,
    has_turn_cards,
    kind_spec,
    missing_requirement,
    question_kinds,
    self_drawing_kinds,
)
from gateway_contract.config import (
    ChannelConfigBase,
    get_config_model,
    needed_in_mode,
    not_blank_in_mode,
    secret,
    secret_keys,
)
from gateway_contract.cards import (
    CardItem,
    CardView,
    actor_label,
    argument_value,
    split_actor,
)
from gateway_contract.adapter import (
    Callback,
    CallbackError,
    ChannelAdapter,
    ChannelError,
    Decide,
    Decision,
    DecisionOutcome,
    MessageRef,
    Show,
    get_adapter,
    get_adapter_class,
)
from gateway_contract.signing import (
    sign_confirmation_id,
    sign_digest_ids,
    sign_shown_ids,
    unsign_confirmation_id,
    unsign_digest_ids,
    unsign_shown_ids,
)
from gateway_contract.digest import (
    DIGEST_MAX_ITEMS,
    DIGESTIBLE_RISKS,
    DigestConfig,
    DigestItem,
    DigestView,
    digest_config,
)
from gateway_contract.links import (
    CONNECTED,
    CONNECTING,
    ChannelLink,
    ConnectionRefused,
    FAILED,
    RECONNECTING,
    Report,
    STOPPED,
    run_on_own_loop,
)

__all__ = [
    "answers",
    "ACTOR_KINDS",
    "CHANNEL_KINDS",
    "ChannelKind",
    "asks_questions",
    "takes_digests",
    "draws_itself",
    "has_turn_cards",
    "kind_spec",
    "missing_requirement",
    "question_kinds",
    "self_drawing_kinds",
    "ChannelConfigBase",
    "get_config_model",
    "needed_in_mode",
    "not_blank_in_mode",
    "secret",
    "secret_keys",
    "CardItem",
    "CardView",
    "actor_label",
    "argument_value",
    "split_actor",
    "Callback",
    "CallbackError",
    "ChannelAdapter",
    "ChannelError",
    "Decide",
    "Decision",
    "DecisionOutcome",
    "MessageRef",
    "Show",
    "get_adapter",
    "get_adapter_class",
    "sign_confirmation_id",
    "sign_digest_ids",
    "sign_shown_ids",
    "unsign_confirmation_id",
    "unsign_digest_ids",
    "unsign_shown_ids",
    "DIGEST_MAX_ITEMS",
    "DIGESTIBLE_RISKS",
    "DigestConfig",
    "DigestItem",
    "DigestView",
    "digest_config",
    "CONNECTED",
    "CONNECTING",
    "ChannelLink",
    "ConnectionRefused",
    "FAILED",
    "RECONNECTING",
    "Report",
    "STOPPED",
    "run_on_own_loop",
]
