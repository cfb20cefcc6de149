"""The operator's console.

Decisions, key creation and revocation, the read-only switch and hook changes go
through `approvals.services`, like every other path. Audit rows (events,
responses, tool calls, config versions, outbox) are never added, changed or
deleted here; neither are confirmation requests, whose only moves are the
approve / reject / cancel actions.

Django discovers this package (`approvals.admin`); importing each module below
registers its ModelAdmins, one module per family of records:

    base        the read-only and actions-only bases, the helpers that show a record
    scoping     TeamScoped: a team's staff administer only their team (docs/approving.md, "Teams")
    requests    confirmation requests and their events, approver responses, outbox
    tool_calls  tool calls (and their export) and grants
    learning    the policies people always approved, and a draft config tried on the past (tool calls' pages)
    agents      agents, the hook list's editor and its config versions, API keys
    teams       teams and their channels
    people      the people directory: people, identities, groups, stand-ins
    sign_in     identity provider links (superusers only)
"""

from __future__ import annotations

from django.contrib import admin

admin.site.site_header = "Approval gateway"
admin.site.site_title = "Approval gateway admin"
admin.site.index_title = "Operator console"

from approvals.admin.agents import (  # noqa: E402
    AgentAdmin,
    AgentConfigVersionAdmin,
    AgentConfigVersionInline,
    AgentForm,
    ApiKeyAdmin,
    ApiKeyInline,
    hooks_as_text,
)
from approvals.admin.base import (  # noqa: E402
    ActionsOnlyAdmin,
    ReadOnlyAdmin,
    ReadOnlyInline,
    admin_link,
    hook_decisions_html,
    mask,
    pretty_json,
    search_by_uuid,
)
from approvals.admin.people import (  # noqa: E402
    PeopleGroupAdmin,
    PersonAdmin,
    StandInAdmin,
)
from approvals.admin.requests import (  # noqa: E402
    ADMIN_CHANNEL,
    ApproverResponseAdmin,
    ApproverResponseInline,
    ConfirmationEventAdmin,
    ConfirmationEventInline,
    ConfirmationRequestAdmin,
    GrantInline,
    OutboxAdmin,
    OutboxInline,
    ReasonForm,
    ToolCallInline,
)
from approvals.admin.scoping import TEAM_PATHS, TeamScoped, TeamsOnlyFilter, of_users_teams  # noqa: E402
from approvals.admin.sign_in import IdentityProviderLinkAdmin  # noqa: E402
from approvals.admin.teams import ChannelAdmin, TeamAdmin, masked_config  # noqa: E402
from approvals.admin.tool_calls import GrantAdmin, ToolCallAdmin  # noqa: E402

__all__ = [
    "ADMIN_CHANNEL",
    "TEAM_PATHS",
    "ActionsOnlyAdmin",
    "AgentAdmin",
    "AgentConfigVersionAdmin",
    "AgentConfigVersionInline",
    "AgentForm",
    "ApiKeyAdmin",
    "ApiKeyInline",
    "ApproverResponseAdmin",
    "ApproverResponseInline",
    "ChannelAdmin",
    "ConfirmationEventAdmin",
    "ConfirmationEventInline",
    "ConfirmationRequestAdmin",
    "GrantAdmin",
    "GrantInline",
    "IdentityProviderLinkAdmin",
    "OutboxAdmin",
    "OutboxInline",
    "PeopleGroupAdmin",
    "PersonAdmin",
    "ReadOnlyAdmin",
    "ReadOnlyInline",
    "ReasonForm",
    "StandInAdmin",
    "TeamAdmin",
    "TeamScoped",
    "TeamsOnlyFilter",
    "ToolCallAdmin",
    "ToolCallInline",
    "admin_link",
    "hook_decisions_html",
    "hooks_as_text",
    "mask",
    "masked_config",
    "of_users_teams",
    "pretty_json",
    "search_by_uuid",
]
