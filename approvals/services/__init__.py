"""Every write the gateway makes, one module per entity; this package names the public ones.

- `tool_calls`: pre-tool-use — the hook chain, the audited `ToolCall`, idempotent replays;
- `lifecycle`: the other events (session start, turns, after the call, errors);
- `confirmations`: requests created (with their cards), moved out of pending (`confirmation_transition`), cancelled;
- `clicks`: an approver's click on one request, a batch, a turn card's "all";
- `responses`: one click applied under the request's row lock (who may decide, one response per person, the quorum);
- `edits`: what an approval may carry (edited arguments judged again, a scope) checked;
- `expiry`: requests expired at their deadline (a late click, a waiter, the sweep);
- `timers`: requests reminded, warned of their deadline, escalated;
- `records`: the events and outbox rows written beside a change;
- `delivery`: the outbox's work done outside the database (cards, redraws, webhooks); a digest's in `digest_delivery`;
- `digests`: cards kept for their channel's digest, gathered into digest messages by beat's tick;
- `agents`: the config file applied, an agent's hooks versioned, the read-only switch;
- `api_keys`: keys created, revoked, touched;
- `audit`: the tamper-evident chain appended to with every chained write (docs/audit.md);
- `audit_retention`: the chain's heads recorded outside the database, and the purge.
- `people`: chat identities linked to people (by e-mail through the vendors, by a one-time link).
- `grants`: "approve for a scope" — grants made with an approval, used on the ask path, revoked.
- `simulation`: a draft config tried on the recorded calls, changing nothing (`config_simulate`);
- `suggestions`: what people always approved, offered as hooks to adopt (`policies_suggest`);
- `sign_in`: who someone signing in through the organisation's identity provider is (a user, their groups);
  an admin's link of a subject to a user.

Callers outside `approvals.services` use these names (`services.confirmation_respond(...)`);
the modules import each other directly, never through this package.
"""

from approvals.services.agents import agent_create, agent_hooks_apply, agent_set_read_only, config_apply
from approvals.services.api_keys import api_key_create, api_key_revoke, api_key_touch, api_key_touch_by_id
from approvals.services.audit import audit_append
from approvals.services.audit_retention import audit_checkpoint, audit_purge
from approvals.services.clicks import confirmation_respond, confirmations_respond
from approvals.services.confirmations import (
    confirmation_cancel,
    confirmation_cancel_by_staff,
    confirmation_create,
    confirmation_transition,
)
from approvals.services.delivery import outbox_claim, outbox_deliver, outbox_due_ids
from approvals.services.digests import digests_gather
from approvals.services.expiry import confirmation_expire, confirmation_expire_due, confirmations_expire
from approvals.services.grants import grant_revoke, grants_end_session
from approvals.services.lifecycle import hook_event_run, result_size
from approvals.services.people import (
    email_conflict,
    identity_conflict,
    person_for_user,
    person_identity_link,
    person_link_by_email,
    person_link_offer,
    person_link_redeem,
    stand_in_end,
    stand_in_name,
    stand_in_team_problem,
)
from approvals.services.questions import question_create
from approvals.services.records import event_record, outbox_add
from approvals.services.simulation import config_simulate
from approvals.services.suggestions import policies_suggest
from approvals.services.sign_in import identity_provider_link_create, user_from_identity_provider
from approvals.services.timers import (
    confirmation_escalate,
    confirmation_remind,
    confirmation_timers_due,
    confirmation_warn,
)
from approvals.services.tool_calls import request_fingerprint, tool_call_pre

__all__ = [
    "agent_create",
    "agent_hooks_apply",
    "agent_set_read_only",
    "api_key_create",
    "api_key_revoke",
    "api_key_touch",
    "api_key_touch_by_id",
    "audit_append",
    "audit_checkpoint",
    "audit_purge",
    "config_apply",
    "config_simulate",
    "question_create",
    "confirmation_cancel",
    "confirmation_cancel_by_staff",
    "confirmation_create",
    "confirmation_escalate",
    "confirmation_expire",
    "confirmation_expire_due",
    "confirmation_remind",
    "confirmation_respond",
    "confirmation_timers_due",
    "confirmation_transition",
    "confirmation_warn",
    "confirmations_expire",
    "confirmations_respond",
    "digests_gather",
    "event_record",
    "grant_revoke",
    "grants_end_session",
    "hook_event_run",
    "email_conflict",
    "identity_conflict",
    "identity_provider_link_create",
    "person_for_user",
    "person_identity_link",
    "person_link_by_email",
    "person_link_offer",
    "person_link_redeem",
    "policies_suggest",
    "stand_in_end",
    "stand_in_name",
    "stand_in_team_problem",
    "outbox_add",
    "outbox_claim",
    "outbox_deliver",
    "outbox_due_ids",
    "request_fingerprint",
    "user_from_identity_provider",
    "result_size",
    "tool_call_pre",
]
