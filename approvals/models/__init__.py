"""The gateway's records, one module per entity; this package names every model.

State changes never go through `save()`: every transition is one conditional
UPDATE in `approvals.services` (see `TRANSITIONS`). Audit rows (events,
responses, tool calls) are append-only, and every write of an event or a tool
call is a link of its agent's tamper-evident chain (`AuditEntry`, docs/audit.md).
The hooks keep their own small state in `hooks.models`.

- `people`: teams, people, their chat identities, groups, stand-ins and one-time links; identity provider links;
- `agents`: agents, their hook versions and API keys; channels;
- `confirmations`: requests (states and moves), approvers' responses, events, callback receipts, the outbox,
  digests;
- `tool_calls`: every call an agent asked about, and grants;
- `audit`: the tamper-evident chain's entries, heads and checkpoints.

`from approvals.models import X` works for every name; the modules import each other directly,
never through this package (and migrations name `approvals.models.default_team_id` and
`approvals.models.new_webhook_secret`, so those stay here too).
"""

from approvals.models.people import (
    DEFAULT_TEAM,
    IdentityProviderLink,
    IdentitySource,
    LinkToken,
    PeopleGroup,
    Person,
    PersonIdentity,
    StandIn,
    Team,
    default_team_id,
)
from approvals.models.agents import Agent, AgentConfigVersion, ApiKey, Channel, new_webhook_secret
from approvals.models.confirmations import (
    FINAL_STATUSES,
    TRANSITIONS,
    ApproverResponse,
    CallbackReceipt,
    ConfirmationEvent,
    ConfirmationRequest,
    Digest,
    EventKind,
    Outbox,
    OutboxKind,
    OutboxStatus,
    RequestKind,
    Status,
)
from approvals.models.tool_calls import Grant, GrantScope, ToolCall
from approvals.models.audit import AuditAction, AuditCheckpoint, AuditEntry, AuditHead

__all__ = [
    "DEFAULT_TEAM",
    "FINAL_STATUSES",
    "TRANSITIONS",
    "Agent",
    "AgentConfigVersion",
    "ApiKey",
    "ApproverResponse",
    "AuditAction",
    "AuditCheckpoint",
    "AuditEntry",
    "AuditHead",
    "CallbackReceipt",
    "Channel",
    "ConfirmationEvent",
    "ConfirmationRequest",
    "Digest",
    "EventKind",
    "Grant",
    "GrantScope",
    "IdentityProviderLink",
    "IdentitySource",
    "LinkToken",
    "Outbox",
    "OutboxKind",
    "OutboxStatus",
    "PeopleGroup",
    "Person",
    "PersonIdentity",
    "RequestKind",
    "StandIn",
    "Status",
    "Team",
    "ToolCall",
    "default_team_id",
    "new_webhook_secret",
]
