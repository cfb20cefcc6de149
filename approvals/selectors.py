"""Every read the gateway makes, and the views of rows that callers share."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import datetime as dt
import functools
import json
import logging
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Count, Min, Q
from django.urls import get_script_prefix, reverse
from django.utils import timezone

from approvals import standing
from approvals.audit import GRANT_SIGNED, chained_row_verifies, decision_verifies
from approvals.caches import KeyHolder, cache
from approvals.arguments import dotted, with_edits
from approvals.errors import Conflict, InvalidInput, NotFound
from approvals.models import (
    Agent,
    ApiKey,
    ApproverResponse,
    Channel,
    ConfirmationRequest,
    Grant,
    Outbox,
    OutboxKind,
    OutboxStatus,
    Person,
    PersonIdentity,
    RequestKind,
    StandIn,
    Status,
    Team,
    ToolCall,
)
from approvals.types import SYSTEM_ACTOR, ConfirmationState, PreToolUseAnswer
from gateway_contract import ACTOR_KINDS, CardItem, CardView, ChannelAdapter, actor_label, get_adapter
from hooks.base import Hook, grant_label
from hooks.registry import build, validate_agent_hooks

# --------------------------------------------------------------------------- teams (docs/approving.md, "Teams")

_TEAMS_ATTRIBUTE = "_gateway_team_ids"  # the user's teams, read once per request (request.user lives as long)


def team_ids_of(user: Any) -> frozenset[int] | None:
    """The teams whose requests `user` sees and decides; None: every team (a superuser). A user is a
    member of a team directly, through one of its groups (their active person a member of it), or by
    signing in where the team is open to everyone; someone not signed in is a member of none."""
    if not getattr(user, "is_authenticated", False):
        return frozenset()
    if user.is_superuser:
        return None
    cached = getattr(user, _TEAMS_ATTRIBUTE, None)
    if cached is None:
        cached = frozenset(
            Team.objects.filter(
                Q(everyone=True) | Q(members=user) | Q(groups__members__user=user, groups__members__active=True)
            )
            .values_list("pk", flat=True)
            .distinct()
        )
        setattr(user, _TEAMS_ATTRIBUTE, cached)
    return cached


def team_names_of(user: Any) -> list[str]:
    """The names of `user`'s teams, for the inbox to say whose requests it lists ([] for a superuser: all)."""
    teams = team_ids_of(user)
    return [] if teams is None else list(Team.objects.filter(pk__in=teams).order_by("name").values_list("name", flat=True))


def in_teams(user: Any, team_id: int) -> bool:
    """Whether `user` is a member of the team `team_id` (a superuser is of every team)."""
    teams = team_ids_of(user)
    return teams is None or team_id in teams


def of_teams(queryset: Any, user: Any, *, path: str) -> Any:
    """`queryset` narrowed to the rows of `user`'s teams; `path` leads from a row to its team
    (`agent__team` for a request, `team` for an agent or a channel)."""
    teams = team_ids_of(user)
    return queryset if teams is None else queryset.filter(**{f"{path}__in": teams})


def team_sees(user: Any, confirmation: ConfirmationRequest) -> bool:
    """Whether `confirmation` belongs to one of `user`'s teams (its agent's team). Outside them a request
    does not exist for the user: its page is a 404 and no click of theirs on the web reaches it.
    A team everyone signed in belongs to (`everyone`, the default team's setting) needs no read of the
    user's teams when the request was read with its agent's team."""
    agent = confirmation.agent
    if Agent.team.is_cached(agent) and agent.team.everyone:
        return True
    return in_teams(user, agent.team_id)

logger = logging.getLogger("approvals.audit")

# Most calls a turn's card lists (the rest are on the web page).
TURN_CARD_ITEMS = 20


def api_key_lookup(*, raw_key: str) -> ApiKey | None:
    """The live key matching a presented secret, with its agent; None if unknown or revoked."""
    if not raw_key:
        return None
    return (
        ApiKey.objects.select_related("agent")
        .filter(key_hash=ApiKey.hash_key(raw_key), revoked_at__isnull=True)
        .first()
    )


def key_holder(*, raw_key: str) -> KeyHolder | None:
    """Whose live key this is (cached per process while it hears changes); None if unknown or revoked."""
    if not raw_key:
        return None

    def read() -> KeyHolder | None:
        key = api_key_lookup(raw_key=raw_key)
        if key is None:
            return None
        return KeyHolder(key.pk, key.agent_id, key.agent.name, key.agent.read_only, key.agent.generation, key.agent.team_id)

    return cache.key_holder(ApiKey.hash_key(raw_key), read)


def agent_hooks(*, agent: Agent) -> tuple[int, list[Hook]]:
    """The agent's current hook version and its built hooks, as of `agent.generation` (cached per
    process while it hears changes, and built once per content)."""

    def current() -> tuple[int, tuple[Hook, ...]]:
        found = agent.config_versions.order_by("-version").values_list("version", "hooks").first()
        if found is None:
            return 0, ()
        version, hooks = found
        return version, _built_hooks(json.dumps(hooks, sort_keys=True))

    def read() -> tuple[int, int, tuple[Hook, ...]]:
        generation = Agent.objects.filter(pk=agent.pk).values_list("generation", flat=True).first()
        return (generation, *current())

    if not cache.active():
        version, hooks = current()
        return version, list(hooks)
    entry = cache.agent_hooks(agent.pk, read)
    if entry[0] != agent.generation:  # cached under another generation than the caller's agent
        cache.forget(f"agent:{agent.pk}")
        entry = read()
    _generation, version, hooks = entry
    return version, list(hooks)


@functools.lru_cache(maxsize=512)
def _built_hooks(hooks_json: str) -> tuple[Hook, ...]:
    """Hooks built from a stored hook list; cached by content, so a new version builds anew."""
    # Stored lists were checked when applied; the outbound guard checks each call they make.
    return tuple(build(validate_agent_hooks(json.loads(hooks_json), check_outbound=False)))


def channel_names() -> set[str]:
    """The names of the configured channels (approval gates may name these)."""
    return set(Channel.objects.values_list("name", flat=True))


def pending_by_channel() -> dict[str, tuple[int, dt.datetime | None]]:
    """Every channel's pending requests now: (how many, when the oldest was created). For /metrics."""
    pending: dict[str, tuple[int, dt.datetime | None]] = {name: (0, None) for name in channel_names()}
    rows = (
        ConfirmationRequest.objects.filter(status=Status.PENDING)
        .values("channel__name")
        .annotate(count=Count("pk"), oldest=Min("created_at"))
        .values_list("channel__name", "count", "oldest")
    )
    for name, count, oldest in rows:
        pending[name or ""] = (count, oldest)
    return pending


def confirmation_for_agent(*, agent: Agent, confirmation_id: Any) -> ConfirmationRequest:
    """One of this agent's requests. Another agent's id, or junk, is a 404."""
    try:
        pk = uuid.UUID(str(confirmation_id))
    except ValueError:
        raise NotFound(f"no confirmation request {confirmation_id!r}") from None
    confirmation = (
        ConfirmationRequest.objects.select_related("agent", "channel")
        .filter(pk=pk, agent=agent, kind=RequestKind.CONFIRMATION)  # a question is served under /questions/
        .first()
    )
    if confirmation is None:
        raise NotFound(f"no confirmation request {confirmation_id}")
    return confirmation


def confirmation_url(confirmation: ConfirmationRequest | ConfirmationState | str) -> str:
    """The request's approval page. Every answer to an agent carries it (10,000 woken at once are 10,000
    of them), so the page's path is reversed once per script prefix and the id put in its place."""
    pk = str(getattr(confirmation, "pk", confirmation))
    return settings.GATEWAY_PUBLIC_URL + _page_path(get_script_prefix()).replace(_PAGE_ID, pk)


_PAGE_ID = "00000000-0000-0000-0000-000000000000"


@functools.lru_cache(maxsize=16)
def _page_path(prefix: str) -> str:  # (`prefix` keys the cache: `reverse` reads the current script prefix)
    return reverse("approval-page", args=[_PAGE_ID])


# What an agent is told of a request whose record does not verify (docs/audit.md, "Answered from facts that verify").
UNVERIFIED_REASON = (
    "the gateway's record of this decision does not verify (it was changed outside the gateway); "
    "the call is denied — an operator can see why with `manage.py verify_audit`"
)
# What an agent is told of a question whose record does not verify (docs/asking.md): it is cancelled.
UNVERIFIED_QUESTION_REASON = (
    "the gateway's record of this question does not verify (it was changed outside the gateway); "
    "there is no answer — an operator can see why with `manage.py verify_audit`"
)


def verified(confirmation: ConfirmationRequest | ConfirmationState) -> ConfirmationRequest | ConfirmationState:
    """The request as an agent may be told it: as it is if its `decision_mac` signs what it says, else
    rejected by the gateway (a decision changed behind the gateway's back never turns into `allow`) — a
    question cancelled by the gateway, with no answer and no default (an answer changed behind the
    gateway's back never reaches the agent)."""
    ok = confirmation.verified if isinstance(confirmation, ConfirmationState) else decision_verifies(
        ConfirmationRequest, confirmation
    )
    if ok:
        return confirmation
    state = confirmation if isinstance(confirmation, ConfirmationState) else ConfirmationState.from_row(confirmation)
    if state.kind == RequestKind.QUESTION:
        logger.error("question %s does not verify against its decision_mac: answered as cancelled", state.id)
        status, reason = Status.CANCELLED, UNVERIFIED_QUESTION_REASON
    else:
        logger.error("confirmation request %s does not verify against its decision_mac: answered as rejected", state.id)
        status, reason = Status.REJECTED, UNVERIFIED_REASON
    return dataclasses.replace(
        state, status=status, decided_by=SYSTEM_ACTOR, decided_by_name=SYSTEM_ACTOR, decision_reason=reason,
        arg_edits={}, approved_args=None, answer=None, default_answer=None,
    )  # fmt: skip


def confirmation_as_dict(confirmation: ConfirmationRequest | ConfirmationState) -> dict[str, Any]:
    """The API's view of one request (docs/reference/api.md), from its row or a waiter's state of it —
    `verified`: a request whose record does not verify is shown rejected by the gateway.

    `tool_args` are the arguments the agent proposed (as stored: redacted); `approved_args`
    what the approver approved instead, when they edited them (`edited: true`).
    """
    confirmation = verified(confirmation)
    return {
        "id": str(confirmation.pk),
        "status": confirmation.status,
        "tool_name": confirmation.tool_name,
        "tool_args": confirmation.tool_args,
        "reason": confirmation.decision_reason if confirmation.is_final else confirmation.reason,
        "decided_by": confirmation.decided_by or None,
        "decided_by_name": confirmation.decided_by_name or None,
        "decided_at": confirmation.decided_at.isoformat() if confirmation.decided_at else None,
        "expires_at": confirmation.expires_at.isoformat() if confirmation.expires_at else None,
        "edited": confirmation.edited,
        "approved_args": confirmation.approved_args,
        "url": confirmation_url(confirmation),
    }


def question_as_dict(question: ConfirmationRequest | ConfirmationState) -> dict[str, Any]:
    """The API's view of one question (docs/asking.md), from its row or a waiter's state of it.

    `answer` is the answer given (`answered`), or the question's `default_answer` once it expired
    unanswered (`defaulted: true`); null while pending or once cancelled. `verified`: a question whose
    record does not verify is shown cancelled by the gateway, with no answer.
    """
    question = verified(question)
    status = question.status
    defaulted = status == Status.EXPIRED
    answered = status == Status.ANSWERED
    return {
        "id": str(question.pk),
        "status": status,
        "question": question.reason,
        "answer": question.answer if answered else (question.default_answer if defaulted else None),
        "defaulted": defaulted,
        "answered_by": question.decided_by if answered else None,
        "answered_by_name": question.decided_by_name if answered else None,
        "answered_at": question.decided_at.isoformat() if answered and question.decided_at else None,
        "reason": question.decision_reason if question.is_final else "",
        "expires_at": question.expires_at.isoformat() if question.expires_at else None,
        "url": confirmation_url(question),
    }


def request_as_dict(request: ConfirmationRequest | ConfirmationState) -> dict[str, Any]:
    """A request in its own shape: a question's (`question_as_dict`) or a confirmation's."""
    return question_as_dict(request) if request.kind == RequestKind.QUESTION else confirmation_as_dict(request)


def question_for_agent(*, agent: Agent, question_id: Any) -> ConfirmationRequest:
    """One of this agent's questions. Another agent's id, a confirmation's, or junk, is a 404."""
    try:
        pk = uuid.UUID(str(question_id))
    except ValueError:
        raise NotFound(f"no question {question_id!r}") from None
    question = (
        ConfirmationRequest.objects.select_related("agent", "channel")
        .filter(pk=pk, agent=agent, kind=RequestKind.QUESTION)
        .first()
    )
    if question is None:
        raise NotFound(f"no question {question_id}")
    return question


def decider(confirmation: ConfirmationRequest | ConfirmationState) -> str:
    """Who decided, for people: "alice (slack:U0ALICE)" — the name to read, the id to be sure."""
    return actor_label(confirmation.decided_by, confirmation.decided_by_name) or "someone"


def final_state_sentence(confirmation: ConfirmationRequest) -> str:
    """One sentence a late clicker or a waiting agent can read."""
    who = decider(confirmation)
    if confirmation.status == Status.APPROVED:
        return f"Already approved by {who}."
    if confirmation.status == Status.ANSWERED:
        return f"Already answered by {who}."
    if confirmation.status == Status.REJECTED:
        why = f": {confirmation.decision_reason}" if confirmation.decision_reason else "."
        return f"Already rejected by {who}{why}"
    if confirmation.status == Status.EXPIRED:
        return "This request expired without a decision."
    if confirmation.status == Status.CANCELLED:
        return "This request was cancelled."
    return "This request is still pending."


def answer_for_confirmation(
    confirmation: ConfirmationRequest | ConfirmationState, *, tool_args: dict[str, Any]
) -> PreToolUseAnswer:
    """The pre-tool-use answer a request's current state implies (from its row or a waiter's state of it).

    `tool_args` are the agent's own arguments; an approval with edits answers them with the edits applied.
    A request whose record does not verify is answered `deny` (`verified`).
    """
    confirmation = verified(confirmation)
    status = confirmation.status
    who = decider(confirmation)
    if status == Status.PENDING:
        decision, reason = "pending", confirmation.reason or "waiting for a human decision"
    elif status == Status.APPROVED:
        decision, reason = "allow", f"approved by {who}"
        if confirmation.arg_edits:
            tool_args = with_edits(tool_args, confirmation.arg_edits)
            reason += " with edited arguments: " + ", ".join(sorted(confirmation.arg_edits))
    elif status == Status.REJECTED:
        decision = "deny"
        if who == SYSTEM_ACTOR:
            reason = confirmation.decision_reason
        else:
            reason = f"rejected by {who}" + (f": {confirmation.decision_reason}" if confirmation.decision_reason else "")
    elif status == Status.EXPIRED:
        decision = "allow" if confirmation.on_timeout == "allow" else "deny"
        reason = f"no decision before the deadline (on_timeout: {confirmation.on_timeout})"
    else:
        decision, reason = "deny", "the request was cancelled"
    return PreToolUseAnswer(
        decision=decision, tool_args=tool_args, reason=reason, confirmation_id=str(confirmation.pk)
    )


def decided_call(
    confirmation: ConfirmationRequest, call: ToolCall | None
) -> tuple[PreToolUseAnswer, list[str]]:
    """For whoever learns a decision without asking again (the decision webhook): the answer a repeat
    ask would give, with the arguments as the gateway holds them — the hooks' rewrites and the approver's
    edits applied, masked values still masks — and the dotted paths of those masks (the agent's own
    values, to be filled from its call)."""
    masks = ((call.response or {}).get("masked") if call is not None else None) or {}
    answer = answer_for_confirmation(confirmation, tool_args=confirmation.tool_args)
    lost = sorted(dotted(tuple(path)) for path in masks.get("hook", []))
    return unless_unrestorable(answer, lost), sorted(dotted(tuple(path)) for path in masks.get("agent", []))


def unless_unrestorable(answer: PreToolUseAnswer, lost: list[str]) -> PreToolUseAnswer:
    """`answer`, unless it allows a call whose arguments hold masked values a hook rewrote or added
    (`lost`): the gateway kept no copy of those, so it cannot say what to run — it denies instead,
    saying why (docs/approving.md, "What the agent gets")."""
    if answer.decision != "allow" or not lost:
        return answer
    answer.decision = "deny"
    answer.reason = (
        f"{answer.reason}, but the arguments to run hold redacted values a hook rewrote ({', '.join(lost)}), "
        "which the gateway does not keep, so a repeat ask cannot give them back: wait for the decision on "
        "the first ask (wait_seconds), or ask again with a new idempotency key"
    )
    return answer


def approvers_for_channel(confirmation: ConfirmationRequest, *, channel_name: str) -> list[str] | None:
    """Who may decide from this channel: a list ([] = anyone there), or None if nobody can."""
    if channel_name == confirmation.channel.name:
        return list(confirmation.approvers)
    if confirmation.escalate_channel_id and confirmation.escalated_at and channel_name == confirmation.escalate_channel.name:
        return list(confirmation.escalate_approvers)
    return None


def approver_refusal(
    confirmation: ConfirmationRequest, *, channel_name: str, actor: str, identity: str = ""
) -> tuple[str, str] | None:
    """(code, sentence) if `actor` (channel-native; `identity`: channel-qualified) may not decide this
    request from `channel_name`; None if they may.

    Beside the channel-native ids, a person the gate named (`group:` / `person:`, routed when the
    request was made: `approver_people`) may decide under any identity linked to them now, and so
    may a stand-in of someone routed the request while their window is open (`stand_in_for`) — each
    only while the directory still says so (`approvals.standing.routing_refusal`). A stand-in of the
    person the call is made for is refused like them, unless the gate allows self-approval.
    """
    allowed = approvers_for_channel(confirmation, channel_name=channel_name)
    if allowed is None:
        return "not_approver", "This request cannot be decided from this channel."
    routed = routed_people(confirmation, channel_name=channel_name)
    if identity and (routed["people"] or routed["stand_ins"]):
        # The clicker is read now; the call's owner will be (self-approval, below): in one statement.
        owner = "" if confirmation.allow_self_approval else confirmation.user_id
        _read_users_at_once([_owner_identity(owner), identity])
        _read_links_at_once([identity, *(_owner_chat_identities(confirmation) if owner else ())])
    person = person_of(identity) if identity and (routed["people"] or routed["stand_ins"]) else ""
    standing_in = stand_in_for(routed, person=person) if person in routed["stand_ins"] else None
    if person in routed["stand_ins"] and standing_in is None:  # only a stand-in, and the window has closed
        return "not_approver", f"Your time standing in for {routed['stand_ins'][person]['name']} has ended."
    # A channel id the gate lists itself is the config's, not the directory's: it stays an approver.
    by_id = actor in (routed["entries"] or ())
    if not by_id and (person in routed["people"] or standing_in is not None):
        refusal = standing.routing_refusal(routed, person=person, standing_in=standing_in, remembered=_remembered)
        if refusal is not None:
            return refusal
    if allowed and actor not in allowed and person not in routed["people"] and standing_in is None:
        return "not_approver", "You are not one of the approvers of this request."
    if standing_in is not None and not confirmation.allow_self_approval and _is_owner(confirmation, lambda: standing_in["for"]):
        return "self_approval", standing.OWN_STAND_IN.format(standing_in["name"])
    return self_approval_refusal(confirmation, actor=actor, identity=identity)


def routed_people(confirmation: ConfirmationRequest, *, channel_name: str) -> dict[str, Any]:
    """The people snapshot of the approver list `channel_name` decides by: {"people": {key: name},
    "stand_ins": {delegate key: {"for": key, "name": name, "until": iso}}, "entries": the gate's list as
    given, or None for a request routed before it was kept} (empty for raw ids)."""
    escalated = bool(confirmation.escalate_channel_id) and channel_name != confirmation.channel.name
    snapshot = (confirmation.escalate_approver_people if escalated else confirmation.approver_people) or {}
    return {
        "people": snapshot.get("people") or {},
        "stand_ins": snapshot.get("stand_ins") or {},
        "entries": snapshot.get("entries"),
    }


def stand_in_for(routed: dict[str, Any], *, person: str, now: dt.datetime | None = None) -> dict[str, str] | None:
    """{"for": key, "name": name} if `person` decides as a stand-in (not named in their own right) whose
    window is still open; None otherwise."""
    if not person or person in routed["people"]:
        return None
    entry = routed["stand_ins"].get(person)
    if entry is None:
        return None
    until = dt.datetime.fromisoformat(entry["until"])
    if until <= (now or timezone.now()):
        return None
    return {"for": entry["for"], "name": entry["name"]}


def self_approval_refusal(confirmation: ConfirmationRequest, *, actor: str, identity: str = "") -> tuple[str, str] | None:
    """Refuses the person the call was made for, unless the gate allows self-approval.

    The call's `user_id` is compared with the clicker's channel-native id (`carol`, `U0CAROL`), with
    their channel-qualified `identity` (`web:carol`), and by person: the `user_id` mapped to a person
    (`_is_owner`: an identity, an e-mail, a username, a bare id of the request's channel) against the
    person behind `identity` (`person_of`) — a call made for `alice@example.com` is Alice's on Slack,
    Feishu and the web alike.
    """
    user_id = confirmation.user_id
    if confirmation.allow_self_approval or not user_id:
        return None
    own = user_id in (actor, identity)
    if not own and identity:
        _read_users_at_once([_owner_identity(user_id), identity])
        _read_links_at_once([identity, *_owner_chat_identities(confirmation)])
        own = _is_owner(confirmation, lambda: person_of(identity))
    return ("self_approval", "You cannot approve a call made on your own behalf.") if own else None


def _is_owner(confirmation: ConfirmationRequest, person: Callable[[], str]) -> bool:
    """Whether the person `person()` answers (a `person_of` key, read only if needed) is the one the call was
    made for: `owner_of` its `user_id`; or, for a bare id that names no Django user (`U0ALICE`), the person
    that id is on the request's channels. (Only a directory person can be that: an unlinked id is a person
    of its own, compared as an id already.)"""
    owner = owner_of(confirmation.user_id)
    if owner is not None:
        return owner == person()
    bare = _bare_owner_identities(confirmation)
    if not bare:
        return False
    key = person()
    return key.startswith("person:") and any(person_of(identity) == key for identity in bare)


def _owner_chat_identities(confirmation: ConfirmationRequest) -> list[str]:
    """The chat identities the call's `user_id` may be read as (`_is_owner`): itself when channel-qualified,
    or as a bare id; read with the clicker's (`_read_links_at_once`)."""
    kind, sep, _ = confirmation.user_id.partition(":")
    return ([confirmation.user_id] if kind in ACTOR_KINDS else []) if sep else _bare_owner_identities(confirmation)


def _bare_owner_identities(confirmation: ConfirmationRequest) -> list[str]:
    """A bare `user_id` (no kind, no `@`: `U0ALICE`) as an identity of the request's chat channels (its own,
    and the one it escalated to); [] for any other `user_id`. (On the web a bare id is a username: `owner_of`.)"""
    user_id = confirmation.user_id
    if not user_id or ":" in user_id or "@" in user_id:
        return []
    kinds = [confirmation.channel.kind]
    if confirmation.escalate_channel_id and confirmation.escalated_at:
        kinds.append(confirmation.escalate_channel.kind)
    return [f"{kind}:{user_id}" for kind in dict.fromkeys(kinds) if kind not in (*DJANGO_USER_KINDS, "email")]


def _read_links_at_once(identities: list[str]) -> None:
    """Within `people_memo`: the people these chat identities are linked to, read in one statement and
    remembered as `person_of` would answer (the clicker's, and the call's owner's by a bare id). Identities
    of a Django user or an e-mail (found by address too) are left to their own reads."""
    memo = _PEOPLE_MEMO.get()
    if memo is None:
        return
    wanted = [
        i
        for i in dict.fromkeys(identities)
        if i.partition(":")[0] not in (*DJANGO_USER_KINDS, "email") and ("person", i) not in memo
    ]
    if len(wanted) > 1:
        linked = dict(PersonIdentity.objects.filter(identity__in=wanted).values_list("identity", "person_id"))
        for identity in wanted:
            memo[("person", identity)] = f"person:{linked[identity]}" if identity in linked else identity


# The identity kinds of a signed-in Django user (the approval page, the admin): one person on all of them.
DJANGO_USER_KINDS = ("web", "admin")
PEOPLE_PREFIXES = standing.PEOPLE_PREFIXES


# Who is whom, remembered while a page judges many requests for one user (`people_memo`): the inbox.
_PEOPLE_MEMO: contextvars.ContextVar[dict[tuple[str, str], Any] | None] = contextvars.ContextVar("people_memo", default=None)


@contextlib.contextmanager
def people_memo() -> Iterator[None]:
    """Within this block `person_of` and `owner_of` answer each question once (one page's worth of reads,
    one click's). A block inside another shares the outer one's answers."""
    if _PEOPLE_MEMO.get() is not None:
        yield
        return
    token = _PEOPLE_MEMO.set({})
    try:
        yield
    finally:
        _PEOPLE_MEMO.reset(token)


def _remembered(kind: str, key: str, read: Callable[[], Any]) -> Any:
    memo = _PEOPLE_MEMO.get()
    if memo is None:
        return read()
    if (kind, key) not in memo:
        memo[(kind, key)] = read()
    return memo[(kind, key)]


def person_of(identity: str) -> str:
    """The person behind a channel-qualified identity: the key a quorum counts once, and what
    self-approval compares (docs/approving.md, "One person counts once").

    An identity linked to a `Person` (`PersonIdentity`; a Django user's `web:` / `admin:` through
    `Person.user`; an `email:` identity through `Person.email`) is `person:<id>`. Otherwise
    `web:<username>` and `admin:<username>` are the Django user, `user:<id>` (by id, so a renamed
    user stays one person), and every other identity (`slack:U…`, `feishu:ou_…`) is a person of its
    own — exactly as before anyone was linked. This is the one place that says who is the same
    person: every quorum and self-approval check follows it.
    """
    return _remembered("person", identity, lambda: _person_of(identity))


def _person_of(identity: str) -> str:
    kind, _, native = identity.partition(":")
    if kind in DJANGO_USER_KINDS and native:
        # A signed-in user (the page, the admin): their row, their person and a link of this identity, in one read.
        row = _user_row(identity)
        if row is not None:
            return _user_person_key(row)
    linked = PersonIdentity.objects.filter(identity=identity).values_list("person_id", flat=True).first()
    if linked is not None:
        return f"person:{linked}"
    if kind == "email" and native:
        found = Person.objects.filter(email__iexact=native).values_list("pk", flat=True).first()
        if found is not None:
            return f"person:{found}"
    return identity


def _user_row(identity: str) -> tuple[int, int | None, int | None] | None:
    """`_django_user_rows` for one `web:` / `admin:` identity (remembered within `people_memo`)."""
    return _remembered("user", identity, lambda: _django_user_rows([identity])[identity])


def _read_users_at_once(identities: list[str | None]) -> None:
    """Within `people_memo`: the Django users behind these identities that are not known yet, read in
    one statement and remembered (a click asks who clicked and whom the call was made for: one read,
    not two). Identities of other kinds, and None, are left to their own reads."""
    memo = _PEOPLE_MEMO.get()
    if memo is None:
        return
    wanted = list(dict.fromkeys(i for i in identities if i and _django_username(i) and ("user", i) not in memo))
    if len(wanted) > 1:
        for identity, row in _django_user_rows(wanted).items():
            memo[("user", identity)] = row


def _django_username(identity: str) -> str:
    """The username of a `web:` / `admin:` identity (a signed-in Django user); "" for any other."""
    kind, _, native = identity.partition(":")
    return native if kind in DJANGO_USER_KINDS else ""


def _owner_identity(user_id: str) -> str | None:
    """The identity `owner_of` reads a Django user by for this `user_id` (a username is `web:<name>`);
    None if it names no Django user (an e-mail, a `person:` key, a chat identity) or nobody ("")."""
    if not user_id:
        return None
    kind, sep, native = user_id.partition(":")
    if sep and kind in ACTOR_KINDS:
        return user_id if _django_username(user_id) else None
    return None if (sep and kind == "person") or "@" in user_id else f"web:{user_id}"


def _django_user_rows(identities: list[str]) -> dict[str, tuple[int, int | None, int | None] | None]:
    """For each `web:` / `admin:` identity: (the Django user's id, their directory person's id, the person
    the identity is linked to), None if there is no such user. One statement written out, however many:
    every click on the page and every self-approval check makes it, and composing it with the ORM cost
    more than running it."""
    users = connection.ops.quote_name(get_user_model()._meta.db_table)
    people = connection.ops.quote_name(Person._meta.db_table)
    links = connection.ops.quote_name(PersonIdentity._meta.db_table)
    # (The wanted rows as a UNION: SQLite, the embedded database, names no VALUES columns.)
    wanted = " UNION ALL ".join(
        ["SELECT CAST(%s AS INTEGER) AS n, CAST(%s AS TEXT) AS identity, CAST(%s AS TEXT) AS username"] * len(identities)
    )
    params = [x for n, identity in enumerate(identities) for x in (n, identity, _django_username(identity))]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT w.n, u.id, p.id, (SELECT i.person_id FROM {links} i WHERE i.identity = w.identity LIMIT 1) "
            f"FROM ({wanted}) w JOIN {users} u ON u.username = w.username LEFT JOIN {people} p ON p.user_id = u.id",
            params,
        )
        found = {n: (user, person, linked) for n, user, person, linked in cursor.fetchall()}
    return {identity: found.get(n) for n, identity in enumerate(identities)}


def _user_person_key(row: tuple[int, int | None, int | None]) -> str:
    """`person_of`'s key for a Django user's row (`_django_user_rows`): the person their identity is linked
    to, else their own person, else the user by id (so a renamed user stays one person)."""
    user_pk, own_person, linked = row
    if linked is not None:
        return f"person:{linked}"
    return f"person:{own_person}" if own_person is not None else f"user:{user_pk}"


def person_name(person: str) -> str:
    """The display name of a directory person (`person:<id>`); "" for any other key."""
    kind, _, pk = person.partition(":")
    if kind != "person" or not pk.isdigit():
        return ""
    return Person.objects.filter(pk=int(pk)).values_list("display_name", flat=True).first() or ""


def owner_of(user_id: str) -> str | None:
    """The person a call's `user_id` names, as `person_of` keys them; None if it names nobody known.

    `user_id` may be a channel-qualified identity (`slack:U0ALICE`), `person:EMAIL`, an e-mail
    address (a person's), or a Django username.
    """
    return _remembered("owner", user_id, lambda: _owner_of(user_id))


def _owner_of(user_id: str) -> str | None:
    kind, sep, native = user_id.partition(":")
    if sep and kind == "person":
        return person_key_by_email(native)
    if sep and kind in ACTOR_KINDS:
        return person_of(user_id)
    if "@" in user_id:
        return person_key_by_email(user_id)
    # A Django username: the user's person, read with the user (and remembered as `person_of` would).
    identity = f"web:{user_id}"
    row = _user_row(identity)
    if row is None:
        return None
    return _remembered("person", identity, lambda: _user_person_key(row))


def person_key_by_email(email: str) -> str | None:
    found = Person.objects.filter(email__iexact=email).values_list("pk", flat=True).first()
    return None if found is None else f"person:{found}"


def linked_identities(*, user: Any) -> list[str]:
    """The chat identities linked to a signed-in user's person, sorted."""
    return list(PersonIdentity.objects.filter(person__user=user).order_by("identity").values_list("identity", flat=True))


def stand_ins_of(*, user: Any) -> list[StandIn]:
    """The stand-ins a signed-in user's person named that have not ended yet, soonest first."""
    return list(
        StandIn.objects.filter(person__user=user, ends_at__gt=timezone.now()).select_related("delegate").order_by("starts_at")
    )


def channels_sending_direct_messages() -> list[str]:
    """The names of the configured channels whose adapter can send one person a link (`sends_direct_messages`)."""
    return [c.name for c in Channel.objects.order_by("name") if channel_adapter(c).sends_direct_messages]


def _native_ids(people: list[Person], kind: str) -> list[str]:
    """The channel-native ids of `people` on a channel of `kind`: their linked `kind:` identities, or
    on the web channel their Django usernames."""
    if kind == "web":
        return [p.user.username for p in people if p.user is not None]
    prefix = f"{kind}:"
    identities = PersonIdentity.objects.filter(person__in=people, identity__startswith=prefix).order_by("person_id", "identity")
    natives = [row.identity[len(prefix) :] for row in identities]
    if kind == "email":  # the e-mail channel reaches a person at their own address too
        natives += [p.email for p in people if p.email]
    return natives


def approver_routing(entries: list[str], *, kind: str, now: dt.datetime) -> tuple[list[str], dict[str, Any]]:
    """A gate's `approvers` for a channel of `kind`, routed as the request is made: (the channel-native
    ids the request's card names and that may decide, the people snapshot for `approver_people`).

    Raw channel ids stay as they are. `group:NAME` is every active member, `person:EMAIL` that person,
    each reached by their identities linked on `kind`. Anyone routed the request (named, or linked to
    a raw id) who has a stand-in whose window is open now reaches the stand-in too. A list that names
    nobody known and no stand-in comes back exactly as it was given, with an empty snapshot.
    """
    if not entries:
        return [], {}
    raw = [e for e in entries if not e.startswith(PEOPLE_PREFIXES)]
    named: dict[int, Person] = {}
    for entry in entries:
        prefix, _, name = entry.partition(":")
        if prefix == "group":
            members = Person.objects.filter(groups__name=name, active=True).select_related("user")
            named.update((p.pk, p) for p in members)
        elif prefix == "person":
            person = Person.objects.filter(email__iexact=name, active=True).select_related("user").first()
            if person is not None:
                named[person.pk] = person
    linked_ids = _people_linked(raw, kind=kind)
    linked = Person.objects.filter(pk__in=linked_ids).select_related("user") if linked_ids else ()
    everyone = {**{p.pk: p for p in linked}, **named}
    stand_ins: dict[str, dict[str, str]] = {}
    delegates: dict[int, Person] = {}
    open_stand_ins = (
        StandIn.objects.filter(person_id__in=list(everyone), starts_at__lte=now, ends_at__gt=now, delegate__active=True)
        .select_related("person", "delegate__user")
        .order_by("starts_at")
        if everyone
        else ()  # nobody of the directory: no stand-in (and no query composed only to find that out)
    )
    for row in open_stand_ins:
        if row.delegate_id in everyone or row.delegate_id in delegates:
            continue  # an approver in their own right, or already standing in for someone
        delegates[row.delegate_id] = row.delegate
        stand_ins[row.delegate.key] = {"for": row.person.key, "name": row.person.display_name, "until": row.ends_at.isoformat()}
    if not named and not stand_ins:
        return list(entries), {}
    routed = list(dict.fromkeys([*raw, *_native_ids([*named.values(), *delegates.values()], kind)]))
    unresolved = [e for e in entries if e.startswith(PEOPLE_PREFIXES)] if not routed else []
    # A named list never becomes [] ("any member"): entries nobody answers to keep it closed.
    # The gate's entries too: at a click, who is still in the groups they name (`approvals.standing.routing_refusal`).
    snapshot = {"people": {p.key: p.display_name for p in named.values()}, "stand_ins": stand_ins, "entries": list(entries)}
    return routed + unresolved, snapshot


def _people_linked(raw: list[str], *, kind: str) -> list[int]:
    """The active people behind raw channel ids of `kind`: linked identities, and on the web Django users by
    username (on e-mail, addresses: `person_of` finds an `email:` identity by address too). One statement
    written out rather than composed by the ORM: every request with an approver list makes it."""
    if not raw:
        return []
    if connection.vendor != "postgresql":  # (SQLite for `make run`: no arrays)
        return list(
            Person.objects.filter(active=True)
            .filter(
                Q(identities__identity__in=[f"{kind}:{native}" for native in raw])
                | Q(user__username__in=raw if kind == "web" else [])
                | Q(email__in=raw if kind == "email" else [])
            )
            .values_list("pk", flat=True)
            .distinct()
        )
    tables = {model: connection.ops.quote_name(model._meta.db_table) for model in (Person, PersonIdentity)}
    users = connection.ops.quote_name(get_user_model()._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT p.id FROM {tables[Person]} p WHERE p.active AND ("
            f"p.id IN (SELECT i.person_id FROM {tables[PersonIdentity]} i WHERE i.identity = ANY(%(identities)s))"
            f" OR p.user_id IN (SELECT u.id FROM {users} u WHERE u.username = ANY(%(usernames)s))"
            f" OR p.email = ANY(%(emails)s))",
            {
                "identities": [f"{kind}:{native}" for native in raw],
                "usernames": raw if kind == "web" else [],
                "emails": raw if kind == "email" else [],
            },
        )
        return [row[0] for row in cursor.fetchall()]


def still_to_answer(confirmation: ConfirmationRequest, *, channel_name: str = "") -> tuple[str, ...]:
    """Who has yet to answer a request that needs more than one approval (the card's "Waiting for"):
    the people routed it by name, else the channel-native approvers, minus those who answered."""
    if confirmation.status != Status.PENDING or confirmation.approvals_required <= 1:
        return ()
    answered = set(confirmation.responses.values_list("person", flat=True)) | set(
        confirmation.responses.exclude(on_behalf_of="").values_list("on_behalf_of", flat=True)
    )
    routed = routed_people(confirmation, channel_name=channel_name or confirmation.channel.name)
    if routed["people"]:
        return tuple(name for key, name in routed["people"].items() if key not in answered)
    approvers = approvers_for_channel(confirmation, channel_name=channel_name or confirmation.channel.name) or []
    kind = confirmation.channel.kind
    return tuple(a for a in approvers if person_of(f"{kind}:{a}") not in answered and not a.startswith(PEOPLE_PREFIXES))


def approvals_so_far(confirmation: ConfirmationRequest) -> list[str]:
    """Who has approved a request so far (channel-qualified ids), first first (quorum progress)."""
    if confirmation.status == Status.PENDING and confirmation.approvals_required <= 1:
        return []  # one approval decides such a request (in the transaction that records it): none yet
    return list(
        confirmation.responses.filter(decision="approve").order_by("created_at").values_list("approver", flat=True)
    )


def actor_kind(confirmation: ConfirmationRequest, *, channel_name: str) -> str:
    """The kind of the channel a click on this request came through: the prefix of the clicker's id."""
    if channel_name == confirmation.channel.name:
        return confirmation.channel.kind
    if confirmation.escalate_channel_id and channel_name == confirmation.escalate_channel.name:
        return confirmation.escalate_channel.kind
    return Channel.objects.filter(name=channel_name).values_list("kind", flat=True).first() or channel_name


def batch_of(confirmation: ConfirmationRequest) -> list[ConfirmationRequest]:
    """The calls of a turn shown on `confirmation`'s card, itself first, when it is a turn's lead
    (the first call of the turn, whose card the later ones joined); [] for any other request."""
    if confirmation.batch_lead_id is not None:
        return []  # a call that joined another's card: its own views (an escalation's card) list only itself
    if not confirmation.turn_id:
        return []  # only calls of the same turn join a card
    members = list(
        ConfirmationRequest.objects.filter(batch_lead_id=confirmation.pk).order_by("created_at", "id")[: TURN_CARD_ITEMS * 5]
    )
    return [confirmation, *members] if members else []


def card_owner(confirmation: ConfirmationRequest) -> ConfirmationRequest:
    """The request whose card shows this one: its turn's lead, or itself."""
    if confirmation.batch_lead_id is None:
        return confirmation
    return ConfirmationRequest.objects.select_related("agent", "channel", "escalate_channel").get(
        pk=confirmation.batch_lead_id
    )


def card_view(confirmation: ConfirmationRequest, *, channel_name: str = "") -> CardView:
    """What the card of `confirmation` shows (a turn's lead: the turn's calls too)."""
    approved_by = tuple(approvals_so_far(confirmation))
    items = tuple(
        CardItem(
            confirmation_id=str(c.pk),
            tool_name=c.tool_name,
            tool_args=c.approved_args if c.approved_args is not None else c.tool_args,
            status=c.status,
            decided_by=c.decided_by,
            decided_by_name=c.decided_by_name,
            decision_reason=c.decision_reason,
            edited=c.edited,
        )
        for c in batch_of(confirmation)
    )
    escalated = bool(
        confirmation.escalated_at and channel_name and channel_name == confirmation.channel.name
    )
    approvers = confirmation.approvers
    if confirmation.escalate_channel_id and channel_name == getattr(confirmation.escalate_channel, "name", None):
        approvers = confirmation.escalate_approvers
    return CardView(
        confirmation_id=str(confirmation.pk),
        agent=confirmation.agent.name,
        tool_name=confirmation.tool_name,
        tool_args=confirmation.tool_args,
        user_id=confirmation.user_id,
        session_id=confirmation.session_id,
        reason=confirmation.reason,
        hook=confirmation.hook_name,
        status=confirmation.status,
        url=confirmation_url(confirmation),
        expires_at=confirmation.expires_at,
        approvers=tuple(approvers),
        approvals_required=confirmation.approvals_required,
        approved_by=approved_by,
        decided_by=confirmation.decided_by,
        decided_at=confirmation.decided_at,
        decision_reason=confirmation.decision_reason,
        escalated=escalated,
        decided_by_name=confirmation.decided_by_name,
        approved_args=confirmation.approved_args,
        editable_paths=tuple(confirmation.editable_paths or ()),
        grant_options=tuple(grant_label(option) for option in confirmation.grant_options or ()),
        items=items,
        kind=confirmation.kind,
        answer_schema=confirmation.answer_schema,
        answer=confirmation.answer,
        waiting_for=still_to_answer(confirmation, channel_name=channel_name),
        on_behalf_of=on_behalf_of(confirmation),
    )


def on_behalf_of(confirmation: ConfirmationRequest | ConfirmationState) -> str:
    """The name of the person a stand-in decided for, if the deciding answer was a stand-in's; else ""."""
    if not confirmation.decided_by or confirmation.status not in (Status.APPROVED, Status.REJECTED):
        return ""
    if " on behalf of " not in confirmation.decided_by_name:
        return ""  # the one mark a stand-in's decision carries on the row: no query for any other
    return (
        ApproverResponse.objects.filter(confirmation_id=confirmation.pk, approver=confirmation.decided_by)
        .exclude(on_behalf_of="")
        .values_list("on_behalf_of_name", flat=True)
        .first()
        or ""
    )


def channel_adapter(channel: Channel) -> ChannelAdapter:
    return get_adapter(channel.name, channel.kind, channel.config)


def posted_cards(confirmation: ConfirmationRequest) -> list[Outbox]:
    """Every card that shows this request (to redraw them all at each state change): its own, and
    for a call of a turn, its turn's card (`Outbox.confirmation` is the request whose card it is)."""
    owners = {confirmation.pk, confirmation.batch_lead_id} - {None}
    return list(
        Outbox.objects.select_related(
            "channel", "confirmation", "confirmation__agent", "confirmation__channel", "confirmation__escalate_channel"
        ).filter(confirmation_id__in=owners, kind=OutboxKind.CARD, status=OutboxStatus.SENT)
    )


def live_grant_for(
    *, agent: Agent, session_id: str, user_id: str, tool_name: str, gate: str, fingerprint: str, now: dt.datetime
) -> list[Any]:
    """Ids of the live grants whose scope covers this call (its user's, or made without a user for a
    call without one), oldest first (the caller uses one with a conditional UPDATE, which re-checks
    that it is still live). Only grants that verify — their `decision_mac`, and the latest entry of the
    audit chain about them: one inserted, widened or un-revoked behind the gateway's back allows nothing."""
    rows = (
        Grant.objects.filter(
            agent=agent, session_id=session_id, user_id=user_id, tool_name=tool_name, gate=gate, revoked_at__isnull=True
        )
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .filter(Q(args_fingerprint="") | Q(args_fingerprint=fingerprint))
        .order_by("created_at")
        .values(*GRANT_SIGNED, "decision_mac")[:5]
    )
    live = []
    for row in rows:
        # Its MAC (nothing made up), and the chain's latest entry about it (nothing rolled back to a state
        # it really had: a grant restored from before its revocation).
        if decision_verifies(Grant, row) and chained_row_verifies("grant", row):
            live.append(row["id"])
        else:
            logger.error("grant %s does not verify against its decision_mac and its audit entry: not used", row["id"])
    return live


def tool_call_for_completion(*, agent: Agent, session_id: str, tool_call_id: str) -> ToolCall:
    """The allowed call a post-tool-use / tool-error reports on; refuses calls never allowed."""
    if not tool_call_id:
        raise InvalidInput("tool_call_id is required for this event", details={"tool_call_id": ["required"]})
    call = (
        ToolCall.objects.select_related("confirmation")
        .filter(agent=agent, session_id=session_id, tool_call_id=tool_call_id)
        .order_by("-created_at")
        .first()
    )
    if call is None:
        raise NotFound(f"no pre-tool-use call {tool_call_id!r} in session {session_id!r}")
    allowed = call.decision in ("allow", "skip")
    if call.confirmation is not None:
        allowed = answer_for_confirmation(call.confirmation, tool_args={}).decision == "allow"
    if not allowed:
        raise Conflict(f"tool call {tool_call_id!r} was never allowed to run", details={"decision": call.decision})
    return call


def tool_call_audit(*, tool_call_id: str) -> dict[str, Any]:
    """One ToolCall in full, for audits (`manage.py describe_toolcall`): args, every
    hook's decision with its config version, the approval and its events, result, timings.

    `tool_call_id` is the record's UUID, or an agent's `tool_call_id` that names one record.
    """
    try:
        calls = list(ToolCall.objects.filter(pk=uuid.UUID(str(tool_call_id))))
    except ValueError:
        calls = []
    if not calls:
        calls = list(ToolCall.objects.filter(tool_call_id=tool_call_id)[:10])
    if not calls:
        raise NotFound(f"no tool call {tool_call_id!r}")
    if len(calls) > 1:
        ids = ", ".join(str(c.pk) for c in calls)
        raise NotFound(f"{tool_call_id!r} names several tool calls; give one id: {ids}")
    call = ToolCall.objects.select_related("agent", "confirmation", "confirmation__channel", "grant").get(pk=calls[0].pk)
    return tool_call_record(call)


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def tool_call_record(call: ToolCall) -> dict[str, Any]:
    """One ToolCall as an audit record: what was asked, every hook's decision with the config version,
    who decided (the approval with its responses and events), what ran. `describe_toolcall --json`
    prints it; `export_audit` streams it (with the call's agent, confirmation, its channel, responses and
    events fetched beforehand, so building a record reads nothing more)."""
    approval = None
    if call.confirmation is not None:
        c = call.confirmation
        approval = {
            "id": str(c.pk),
            "status": c.status,
            "channel": c.channel.name,
            "approvers": c.approvers,
            "approvals_required": c.approvals_required,
            "gate": c.hook_name,
            "config_version": c.config_version,
            "reason": c.reason,
            "decided_by": c.decided_by or None,
            "decided_by_name": c.decided_by_name or None,
            "decided_at": _iso(c.decided_at),
            "decision_reason": c.decision_reason,
            "expires_at": _iso(c.expires_at),
            "turn_id": c.turn_id,
            # The three records of an approval: what the agent proposed, what was approved, what ran.
            "proposed_args": c.tool_args,
            "approved_args": c.approved_args if c.edited else (c.tool_args if c.status == Status.APPROVED else None),
            "edited": c.edited,
            "edited_paths": sorted(c.arg_edits or {}),
            "ran_args": call.ran_args,
            "grants": [
                {
                    "id": str(g.pk),
                    "scope": g.scope_label,
                    "granted_by": g.granted_by,
                    "granted_by_name": g.granted_by_name,
                    "at": _iso(g.created_at),
                    "expires_at": _iso(g.expires_at),
                    "revoked_at": _iso(g.revoked_at),
                    "uses": g.uses,
                }
                for g in c.grants.all()
            ],
            "responses": [
                {
                    "approver": r.approver,
                    "approver_name": r.approver_name,
                    "decision": r.decision,
                    "reason": r.reason,
                    "channel": r.channel,
                    "at": _iso(r.created_at),
                }
                for r in c.responses.all()
            ],
            "events": [
                {"kind": e.kind, "actor": e.actor, "channel": e.channel, "message": e.message, "at": _iso(e.created_at)}
                for e in c.events.all()
            ],
        }
    return {
        "id": str(call.pk),
        "agent": call.agent.name,
        "session_id": call.session_id,
        "turn_id": call.turn_id,
        "tool_call_id": call.tool_call_id,
        "tool_name": call.tool_name,
        "tool_args": call.tool_args,
        "user_id": call.user_id,
        "metadata": call.metadata,
        "idempotency_key": call.idempotency_key,
        "decision": call.decision,
        "reason": call.reason,
        "decided_by_hook": call.decided_by_hook,
        "config_version": call.config_version,
        # pre-tool-use decisions were stored without event and version: they are the call's own.
        "hook_decisions": [
            {"event": "pre_tool_use", "config_version": call.config_version, **d} for d in call.hook_decisions
        ],
        "approval": approval,
        "allowed_by_grant": (
            {
                "id": str(call.grant.pk),
                "scope": call.grant.scope_label,
                "granted_by": call.grant.granted_by,
                "granted_by_name": call.grant.granted_by_name,
                "at": _iso(call.grant.created_at),
                "request": str(call.grant.confirmation_id),
            }
            if call.grant
            else None
        ),
        "ran_args": call.ran_args,
        "outcome": call.outcome or None,
        "result": call.result,
        "result_size": call.result_size,
        "duration_ms": call.duration_ms,
        "created_at": _iso(call.created_at),
        "completed_at": _iso(call.completed_at),
    }
