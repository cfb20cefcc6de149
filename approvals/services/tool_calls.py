"""Pre-tool-use: every tool call of every agent, decided by its hooks and recorded.

The chain runs outside any transaction (hooks may do I/O: commands, webhooks).
An allowed or denied call is then recorded with ONE statement: the INSERT of
its `ToolCall` (each hook's decision, the config version) and the entry that
links it into its agent's tamper-evident chain (docs/audit.md), in autocommit.
An asked one: one transaction that also writes the confirmation request, its
event and its card outbox row. An idempotency key seen before answers from the
stored call: the same body gets the same answer (and the same request, never a
second card); a different body is refused (422).

A call served from the per-process caches (`approvals.caches`) says under which
generation of its agent it was served; it is recorded only if that is still
the agent's generation (the condition rides on the same statement), else
`StaleCache` is raised and the caller serves it afresh.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib
import json
import logging
from collections.abc import Callable
from typing import Any, ParamSpec

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Exists
from django.utils import timezone

from approvals import selectors
from approvals.audit import chained_row_verifies
from approvals.arguments import args_fingerprint, editable_paths, mask_record, masked_paths, replayed_args
from approvals.caches import StaleCache, cache
from approvals.errors import GatewayError, IdempotencyMismatch
from approvals.models import Agent, AuditAction, ConfirmationRequest, Grant, Status, ToolCall
from approvals.services.audit import audit_append, audit_insert_linked, audit_transaction
from approvals.services.confirmations import confirmation_create
from approvals.services.grants import grant_reason, grant_use
from approvals.services.records import Insert, insert_statement
from approvals.types import IDEMPOTENT_REPLAY, PreToolUseAnswer
from hooks import state as hook_state
from hooks.base import AskSpec, pre_tool_use_context
from gateway_utils import logs, metrics, tracing
from hooks.chain import run_chain

logger = logging.getLogger("approvals.tool_calls")


def request_fingerprint(payload: dict[str, Any]) -> str:
    """SHA-256 of the canonical request body, minus fields that steer waiting or name one attempt.

    `tool_call_id` is left out: a retried call usually gets a new call id from its runtime.
    """
    body = {k: v for k, v in payload.items() if k not in {"wait_seconds", "idempotency_key", "tool_call_id"}}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


_P = ParamSpec("_P")


def _observed(ask: Callable[_P, PreToolUseAnswer]) -> Callable[_P, PreToolUseAnswer]:
    """`tool_call_pre`, counted by its answer (`gateway_tool_calls_total`: a failure is an `error`, a
    stale cache nothing — the call is served again), noted on the current span, and logged; every
    line logged meanwhile names the agent, session, tool and call id (docs/operating.md)."""

    @functools.wraps(ask)
    def observed(*args: _P.args, **call: _P.kwargs) -> PreToolUseAnswer:
        agent: Agent = call["agent"]
        token = logs.bind(
            agent=agent.name,
            session_id=call.get("session_id"),
            tool_name=call.get("tool_name"),
            tool_call_id=call.get("tool_call_id"),
        )
        try:
            answer = ask(*args, **call)
        except StaleCache:
            raise
        except Exception as exc:
            if not isinstance(exc, GatewayError):  # the caller logs it, and answers 500
                metrics.tool_call_answered(agent=agent.name, decision="error")
                tracing.failed(exc)
            raise
        else:
            metrics.tool_call_answered(agent=agent.name, decision=answer.decision)
            tracing.annotate(
                {
                    tracing.GEN_AI_AGENT_NAME: agent.name,
                    "gateway.decision": answer.decision,
                    "gateway.confirmation.id": answer.confirmation_id,
                }
            )
            # An allowed call is the common case and is in the audit record: logged at DEBUG only.
            level = logging.DEBUG if answer.decision in ("allow", "skip") else logging.INFO
            if logger.isEnabledFor(level):
                logger.log(
                    level,
                    "tool call %s: %s",
                    answer.decision,
                    answer.reason or "no hook objected",
                    extra={"decision": answer.decision, "confirmation_id": answer.confirmation_id},
                )
            return answer
        finally:
            logs.unbind(token)

    return observed


@_observed
def tool_call_pre(
    *,
    agent: Agent,
    session_id: str,
    tool_name: str,
    tool_args: dict[str, Any],
    tool_call_id: str = "",
    user_id: str = "",
    metadata: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
    callback_url: str = "",
    fingerprint: str = "",
    now: dt.datetime | None = None,
    served_under: int | None = None,
    turn_id: str = "",
) -> PreToolUseAnswer:
    """Run the agent's pre-tool-use chain and record the call; ask a human if a gate says so
    (unless a live grant covers the call: `_ask_or_grant`).

    `served_under`: the agent generation the caller's cached view of the agent is from
    (None: the caller read the agent afresh). Raises StaleCache if it is no longer current.
    """
    metadata = metadata or {}
    if idempotency_key:
        existing = _asked_before(agent, idempotency_key, served_under)
        if existing is not None:
            return _replay(existing, fingerprint=fingerprint, tool_args=tool_args)

    # What outer levels (session-start, the current turn) said about this session.
    if served_under is None:
        stored = hook_state.session_stored(agent=agent.name, session_id=session_id)
    else:
        stored = cache.session_context(
            agent.name, session_id, lambda: hook_state.session_stored(agent=agent.name, session_id=session_id)
        )
    session = hook_state.session_values(agent=agent.name, session_id=session_id, stored=stored)
    user_id = user_id or session.get("user_id", "")
    metadata = {**session.get("metadata", {}), **metadata}
    turn_id = turn_id or session.get("turn_id", "")
    version, hooks = selectors.agent_hooks(agent=agent)
    ctx = pre_tool_use_context(
        agent=agent.name,
        session_id=session_id,
        user_id=user_id,
        metadata=metadata,
        tool_name=tool_name,
        tool_args=tool_args,
        tool_call_id=tool_call_id,
        turn_id=turn_id,
        agent_read_only=agent.read_only,
        config_version=version,
        now=now,
        session=session,
    )
    outcome = run_chain(hooks, ctx)
    stored_args = outcome.stored_args if outcome.stored_args is not None else outcome.tool_args
    answer = PreToolUseAnswer(
        decision={"ask": "pending"}.get(outcome.decision, outcome.decision),
        tool_args=outcome.tool_args,
        reason=outcome.reason,
        side_effects=outcome.side_effects,
        hook_decisions=outcome.hook_decisions,
    )
    record = ToolCall(
        agent=agent,
        session_id=session_id,
        turn_id=turn_id,
        tool_call_id=tool_call_id,
        tool_name=tool_name,
        tool_args=stored_args,
        user_id=user_id,
        metadata=metadata,
        decision=answer.decision,
        reason=answer.reason,
        decided_by_hook=outcome.decided_by,
        hook_decisions=outcome.hook_decisions,
        config_version=version,
        idempotency_key=idempotency_key or None,
        request_fingerprint=fingerprint,
    )
    try:
        if outcome.ask is None:
            # The allowed (or denied) call: one INSERT, in autocommit — no BEGIN/COMMIT round trips
            # (a savepoint only when a caller already holds a transaction, so a lost race leaves it usable).
            record.response = _kept_answer(answer, own_args=tool_args, stored_args=outcome.stored_args)
            with transaction.atomic() if transaction.get_connection().in_atomic_block else contextlib.nullcontext():
                _insert(record, served_under, stored)
            return answer
        def asked(confirmation: ConfirmationRequest) -> list[Insert]:
            # The call that asks, written with its request in one statement — only if the caches it
            # was served from are still current (`_served_condition`: else nothing is, StaleCache).
            answer.confirmation_id = str(confirmation.id)
            record.confirmation = confirmation
            record.response = _kept_answer(answer, own_args=tool_args, stored_args=outcome.stored_args)
            where, params = _served_condition(record, served_under, stored)
            return [Insert(record, where=where, params=params)]

        # The call and its request's events go into the agent's audit chain together, at the end
        # (`audit_transaction`): the chain's head is held for one statement and the COMMIT.
        with audit_transaction():
            grant, confirmation = _ask_or_grant(
                answer,
                agent=agent,
                spec=outcome.ask,
                session_id=session_id,
                turn_id=turn_id,
                tool_name=tool_name,
                tool_args=outcome.tool_args,
                stored_args=stored_args,
                tool_call_id=tool_call_id,
                user_id=user_id,
                metadata=metadata,
                config_version=version,
                callback_url=callback_url,
                now=now,
                also=asked,
            )
            if confirmation is not None:  # the call was written with its request
                if record._state.adding:
                    raise StaleCache(f"agent {record.agent_id} changed since generation {served_under}")
                audit_append(agent_id=record.agent_id, action=AuditAction.ASKED, row=record)
            else:  # a grant allows it
                record.grant = grant
                record.decision, record.reason = answer.decision, answer.reason
                record.response = _kept_answer(answer, own_args=tool_args, stored_args=outcome.stored_args)
                _insert(record, served_under, stored)
    except IntegrityError:
        # A concurrent request with the same idempotency key won the insert.
        existing = _asked_before(agent, idempotency_key, served_under) if idempotency_key else None
        if existing is None:
            raise
        return _replay(existing, fingerprint=fingerprint, tool_args=tool_args)
    return answer


def _asked_before(agent: Agent, idempotency_key: str, served_under: int | None) -> ToolCall | None:
    """The call first asked with this idempotency key, if any. Served from a cache (`served_under`), a
    repeat ask checks the agent's generation as a first ask's INSERT does — in the same query — so a key
    revoked a moment ago is refused on a repeat ask too: StaleCache, and the caller reads the key afresh."""
    calls = ToolCall.objects.filter(agent=agent, idempotency_key=idempotency_key)
    if served_under is None:
        return calls.first()
    current = Agent.objects.filter(pk=agent.pk, generation=served_under)
    found = calls.annotate(served_current=Exists(current)).first()
    if found is not None and not found.served_current:
        raise StaleCache(f"agent {agent.pk} changed since generation {served_under}")
    return found


def _insert(record: ToolCall, served_under: int | None, session_stored: Any) -> None:
    """INSERT the record and link it into its agent's audit chain, in one statement; with
    `served_under`, only if its agent's generation is still that and its session's context still
    `session_stored` (else StaleCache, nothing written)."""
    where, params = _served_condition(record, served_under, session_stored)
    if not audit_insert_linked(
        row=record,
        insert=lambda condition: insert_statement(record, where=condition),
        where=where,
        params=params,
        agent_id=record.agent_id,
        action=AuditAction.ASKED,
    ):
        raise StaleCache(f"agent {record.agent_id} changed since generation {served_under}")
    record._state.adding = False


def _served_condition(record: ToolCall, served_under: int | None, session_stored: Any) -> tuple[str, dict[str, Any]]:
    """The condition (SQL, named parameters) the record's INSERT carries when the call was served from
    the caches (`served_under`): its agent's generation is still that, and its session's context still
    `session_stored`. None otherwise."""
    where, params = "", {}
    if served_under is not None:
        quote = connection.ops.quote_name
        where = (
            f"EXISTS (SELECT 1 FROM {quote(Agent._meta.db_table)} "
            f"WHERE {quote('id')} = %(served_agent)s AND {quote('generation')} = %(served_under)s)"
        )
        params = {"served_agent": record.agent_id, "served_under": served_under}
        if connection.vendor == "postgresql":
            unchanged, more = hook_state.session_unchanged(
                agent=record.agent.name, session_id=record.session_id, stored=session_stored
            )
            where += f" AND {unchanged}"
            params.update(more)
    return where, params


def _ask_or_grant(
    answer: PreToolUseAnswer,
    *,
    agent: Agent,
    spec: AskSpec,
    session_id: str,
    turn_id: str,
    tool_name: str,
    tool_args: dict[str, Any],
    stored_args: dict[str, Any],
    **create: Any,
) -> tuple[Grant | None, ConfirmationRequest | None]:
    """A gate asks (every deny rule has had its say): a live grant covering the call allows it,
    else a human is asked. Inside the caller's transaction; `answer` is updated in place.

    The calls of one turn are taken one at a time (a transaction-scoped advisory lock on the
    agent, session and turn), and while a call of the turn is pending, a later one is never let
    through by a grant: it is asked too, and shown on the turn's card with the pending one.
    """
    fingerprint = args_fingerprint(tool_name, tool_args)
    turn_pending = False
    if turn_id:
        _lock_turn(agent, session_id, turn_id)
        turn_pending = ConfirmationRequest.objects.filter(
            agent=agent, session_id=session_id, turn_id=turn_id, status=Status.PENDING
        ).exists()
    grant = None
    if not turn_pending and spec.grants:  # a gate that offers no scopes honours none (and reads none)
        grant = grant_use(
            agent=agent, session_id=session_id, user_id=create["user_id"], tool_name=tool_name, gate=spec.gate,
            fingerprint=fingerprint, now=create.get("now"),
        )  # fmt: skip
    if grant is not None:
        answer.decision = "allow"
        answer.reason = grant_reason(grant)
        answer.side_effects = [*answer.side_effects, "allowed_by_grant"]
        answer.hook_decisions = [
            *answer.hook_decisions,
            {"hook": spec.gate, "kind": "grant", "decision": "allow", "reason": answer.reason},
        ]
        return grant, None
    editable = editable_paths(spec.allow_edit, stored_args=stored_args, masked=masked_paths(tool_args, stored_args))
    confirmation = confirmation_create(
        agent=agent,
        spec=spec,
        session_id=session_id,
        tool_name=tool_name,
        stored_args=stored_args,
        turn_id=turn_id,
        editable_paths=editable,
        edit_types={path: declared for path, declared in spec.edit_types.items() if path in editable},
        args_fingerprint=fingerprint,
        **create,
    )
    answer.confirmation_id = str(confirmation.id)
    return None, confirmation


def _lock_turn(agent: Agent, session_id: str, turn_id: str) -> None:
    """Serialise the asks of one turn until the transaction ends (PostgreSQL; SQLite has one writer anyway)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [agent.pk % 2**31, f"turn\x1f{session_id}\x1f{turn_id}"]
            )


def _kept_answer(
    answer: PreToolUseAnswer, *, own_args: dict[str, Any], stored_args: dict[str, Any] | None
) -> dict[str, Any]:
    """The answer as the call's record keeps it, for a repeat ask. Never an unredacted value: where a
    mask (redact) applied, `tool_args` is None and `masked` says which paths of the stored arguments
    hold masks and where each real value comes back from (`arguments.mask_record`)."""
    if stored_args is None:
        return answer.as_dict()
    masked = mask_record(own=own_args, answered=answer.tool_args, stored=stored_args)
    return {**answer.as_dict(), "tool_args": None, "masked": masked}


def _replay(call: ToolCall, *, fingerprint: str, tool_args: dict[str, Any]) -> PreToolUseAnswer:
    """The answer for a request whose idempotency key was seen before: the same decision, with the
    arguments the first answer had (rewritten by hooks, edited by the approver, masked values the
    agent's own again), never the repeated call's raw ones."""
    if fingerprint and call.request_fingerprint and call.request_fingerprint != fingerprint:
        raise IdempotencyMismatch(
            "this idempotency_key was used with a different request body",
            details={"tool_call": str(call.id)},
        )
    stored = call.response or {}
    if not chained_row_verifies("tool_call", call) and not _verifies_afresh(call):
        # The record the answer would come from was changed behind the gateway's back (docs/audit.md).
        logger.error("tool call %s does not verify against its audit entry: its repeat ask is denied", call.pk)
        return PreToolUseAnswer(
            decision="deny", tool_args=tool_args, reason=selectors.UNVERIFIED_REASON,
            side_effects=[IDEMPOTENT_REPLAY], hook_decisions=stored.get("hook_decisions", []),
            confirmation_id=str(call.confirmation_id) if call.confirmation_id else None,
        )  # fmt: skip
    args, lost = _replayed_args(call, stored, own_args=tool_args)
    window = dt.timedelta(seconds=settings.GATEWAY_IDEMPOTENT_SKIP_WINDOW_SECONDS)
    if call.outcome == "success" and call.completed_at and timezone.now() - call.completed_at <= window:
        return PreToolUseAnswer(
            decision="skip",
            tool_args=args,
            reason="this call already completed; returning its stored result",
            side_effects=[IDEMPOTENT_REPLAY],
            hook_decisions=stored.get("hook_decisions", []),
            result=call.result,
        )
    if call.confirmation_id is not None:
        confirmation = ConfirmationRequest.objects.get(pk=call.confirmation_id)
        answer = selectors.answer_for_confirmation(confirmation, tool_args=args)
        answer.hook_decisions = stored.get("hook_decisions", [])
        answer.side_effects = [*stored.get("side_effects", []), IDEMPOTENT_REPLAY]
    else:
        answer = PreToolUseAnswer(
            decision=stored.get("decision", call.decision),
            tool_args=args,
            reason=stored.get("reason", call.reason),
            side_effects=[*stored.get("side_effects", []), IDEMPOTENT_REPLAY],
            hook_decisions=stored.get("hook_decisions", []),
        )
    return selectors.unless_unrestorable(answer, lost)


def _verifies_afresh(call: ToolCall) -> bool:
    """The call read again and checked again: a completion may have committed between the two reads."""
    call.refresh_from_db()
    return chained_row_verifies("tool_call", call)


def _replayed_args(
    call: ToolCall, stored: dict[str, Any], *, own_args: dict[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """The arguments the first answer had, rebuilt for a repeat ask; and the masked paths it cannot rebuild."""
    if stored.get("tool_args") is not None:
        return stored["tool_args"], []
    if "masked" in stored:
        return replayed_args(call.tool_args, own=own_args, record=stored["masked"])
    return own_args, []  # a record from before masks were noted: the agent's own arguments, as then
