"""Every read the gateway makes, and the views of rows that callers share: one module per entity; this
package names the public ones.

- `teams`: which teams a user belongs to, and the rows of those teams;
- `agents`: whose key a presented secret is, an agent's current hooks (cached per process);
- `channels`: the configured channels, their adapters, what is pending on each;
- `requests`: one request as its agent sees it — its page's URL, its view in the API, the answer its state
  implies, only from a record that verifies;
- `inbox`: requests as the people who decide them find them (by id, the inbox's lists);
- `people`: who is whom (`person_of`, `owner_of`), whom a gate routes a request to, who may decide it;
- `cards`: what a request's card shows (`card_view`), and the cards posted for it;
- `digests`: what a digest message shows (`digest_view`), the digests that show a request;
- `tool_calls`: the grants that cover a call or that a person sees, a call's record for audits;
- `standing`: the people directory as it is at a click (below `people`; models only);
- `people_teams`: which teams a person or a group belongs to, for the admin (reached as a module);
- `oversight`: whether oversight is real — time to decide, approval rate, fast answers, expiries, per day,
  approver and tool (`oversight_figures`), and when a request's card was shown (`card_shown_at`).

Callers outside `approvals.selectors` use these names (`selectors.card_view(...)`); the modules import each
other directly, never through this package, in one direction: `cards → people, requests`, `digests → requests`,
`tool_calls → requests, teams`, `inbox → teams`, `oversight → people, teams`, `people → standing`, `people_teams → agents, teams`.
"""

from approvals.selectors.agents import agent_hooks, api_key_lookup, key_holder
from approvals.selectors.cards import (
    TURN_CARD_ITEMS,
    actor_kind,
    approvals_so_far,
    batch_of,
    card_owner,
    card_view,
    on_behalf_of,
    posted_cards,
    still_to_answer,
)
from approvals.selectors.channels import (
    channel_adapter,
    channel_configs,
    channel_list,
    channel_lookup,
    channel_names,
    channel_of_agent,
    channels_sending_direct_messages,
    nothing_due_before,
    pending_by_channel,
)
from approvals.selectors.digests import (
    digest_lookup,
    digest_state_key,
    digest_view,
    digested_risks,
    digests_showing,
)
from approvals.selectors.inbox import (
    INBOX_LIMIT,
    confirmation_editable_values,
    confirmation_shown_digest,
    confirmation_lookup,
    confirmations_by_ids,
    confirmations_decided_by,
    confirmations_pending_for,
)
from approvals.selectors.oversight import card_shown_at, oversight_figures
from approvals.selectors.people import (
    DJANGO_USER_KINDS,
    PEOPLE_PREFIXES,
    approver_refusal,
    approver_routing,
    approvers_for_channel,
    linked_identities,
    owner_of,
    owners_read_at_once,
    people_known,
    people_memo,
    person_key_by_email,
    person_name,
    person_of,
    routed_people,
    self_approval_refusal,
    stand_in_for,
    stand_ins_of,
    user_by_id,
)
from approvals.selectors.requests import (
    UNVERIFIED_QUESTION_REASON,
    UNVERIFIED_REASON,
    answer_for_confirmation,
    confirmation_as_dict,
    confirmation_for_agent,
    confirmation_state,
    confirmation_state_told,
    confirmation_url,
    decided_call,
    decider,
    final_state_sentence,
    question_as_dict,
    question_for_agent,
    request_as_dict,
    unless_unrestorable,
    verified,
)
from approvals.selectors.teams import in_teams, of_teams, team_ids_of, team_names_of, team_sees
from approvals.selectors.tool_calls import (
    grant_is_revoked,
    grants_live_for,
    grants_of_confirmation,
    live_grant_for,
    tool_call_audit,
    tool_call_for_completion,
    tool_call_record,
)

__all__ = [
    "digest_lookup",
    "digest_state_key",
    "digest_view",
    "digested_risks",
    "digests_showing",
    "DJANGO_USER_KINDS",
    "INBOX_LIMIT",
    "PEOPLE_PREFIXES",
    "TURN_CARD_ITEMS",
    "UNVERIFIED_QUESTION_REASON",
    "UNVERIFIED_REASON",
    "actor_kind",
    "agent_hooks",
    "answer_for_confirmation",
    "api_key_lookup",
    "approvals_so_far",
    "approver_refusal",
    "approver_routing",
    "approvers_for_channel",
    "batch_of",
    "card_owner",
    "card_shown_at",
    "card_view",
    "channel_adapter",
    "channel_configs",
    "channel_list",
    "channel_lookup",
    "channel_of_agent",
    "channel_names",
    "channels_sending_direct_messages",
    "nothing_due_before",
    "confirmation_as_dict",
    "confirmation_editable_values",
    "confirmation_for_agent",
    "confirmation_lookup",
    "confirmation_shown_digest",
    "confirmation_state",
    "confirmation_state_told",
    "confirmation_url",
    "confirmations_by_ids",
    "confirmations_decided_by",
    "confirmations_pending_for",
    "decided_call",
    "decider",
    "final_state_sentence",
    "grant_is_revoked",
    "grants_live_for",
    "grants_of_confirmation",
    "in_teams",
    "key_holder",
    "linked_identities",
    "live_grant_for",
    "of_teams",
    "on_behalf_of",
    "oversight_figures",
    "owner_of",
    "owners_read_at_once",
    "pending_by_channel",
    "people_known",
    "people_memo",
    "person_key_by_email",
    "person_name",
    "person_of",
    "posted_cards",
    "question_as_dict",
    "question_for_agent",
    "request_as_dict",
    "routed_people",
    "self_approval_refusal",
    "stand_in_for",
    "stand_ins_of",
    "user_by_id",
    "still_to_answer",
    "team_ids_of",
    "team_names_of",
    "team_sees",
    "tool_call_audit",
    "tool_call_for_completion",
    "tool_call_record",
    "unless_unrestorable",
    "verified",
]
