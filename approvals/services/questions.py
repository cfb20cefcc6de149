"""Questions: a request for a typed answer (docs/asking.md).

A question is a `ConfirmationRequest` of kind `question`: it is created, carded, reminded, warned,
escalated, expired, audited and awaited by the same code as a confirmation, and answered through
`confirmation_respond` (a `Callback` with decision "answer"), whose one conditional UPDATE makes the
first valid answer the only one. Here: the checks a question needs before it exists.
"""

from __future__ import annotations

import datetime as dt
from typing import Any


from approvals import selectors
from approvals.selectors import people_teams
from approvals.errors import InvalidInput
from approvals.models import Agent, Channel, ConfirmationRequest, RequestKind
from approvals.services.audit import audit_transaction
from approvals.services.confirmations import confirmation_create
from gateway_contract.answers import SchemaError, answer_problem, check_schema
from gateway_contract import asks_questions
from hooks.base import AskSpec

# What a question's request records as its "tool" (the admin and the audit show it).
QUESTION_TOOL = "ask_human"
QUESTION_GATE = "question"


def question_create(
    *,
    agent: Agent,
    text: str,
    answer_schema: Any,
    channel: str = "",
    approvers: list[str] | None = None,
    timeout_seconds: int | None = 3600,
    gate: str = "",
    default_answer: Any = None,
    session_id: str = "",
    user_id: str = "",
    metadata: dict[str, Any] | None = None,
    callback_url: str = "",
    remind_after_seconds: int | None = None,
    warn_before_seconds: int | None = None,
    escalate_after_seconds: int | None = None,
    escalate_channel: str = "",
    escalate_approvers: list[str] | None = None,
    now: dt.datetime | None = None,
) -> ConfirmationRequest:
    """Ask `approvers` on `channel` (any member: []) `text`, to be answered as `answer_schema` says.

    Without a channel the question goes where one of the agent's approval gates asks — `gate` by name,
    else its first — to that gate's approvers unless `approvers` are given, with its reminder, warning
    and escalation unless given here.

    Refused (InvalidInput, nothing written) when the schema is outside the allowed subset, the default
    answer does not fit it, or a channel does not exist or cannot show questions. What the agent names
    itself — a channel, approvers, an escalation — must be its own team's (`people_teams.strangers`);
    a gate's own are the operator's configuration, used as configured.
    """
    named = {"channel": bool(channel), "escalate_to": bool(escalate_channel)}  # by the agent, not by a gate
    named_approvers = {"channel": approvers is not None, "escalate_to": bool(escalate_channel)}
    if not channel:
        spec = _gate_spec(agent, gate)
        channel = spec.channel
        approvers = list(spec.approvers) if approvers is None else approvers
        remind_after_seconds = remind_after_seconds or spec.remind_after_seconds
        warn_before_seconds = warn_before_seconds or spec.warn_before_seconds
        if not escalate_channel and spec.escalate_channel:
            escalate_after_seconds = escalate_after_seconds or spec.escalate_after_seconds
            escalate_channel, escalate_approvers = spec.escalate_channel, list(spec.escalate_approvers)
    elif gate:
        raise InvalidInput("give a channel or a gate, not both", details={"gate": ["give a channel or a gate, not both"]})
    approvers = approvers or []
    try:
        schema = check_schema(answer_schema)
    except SchemaError as exc:
        raise InvalidInput(f"answer_schema: {exc}", details={"answer_schema": [str(exc)]}) from None
    if default_answer is not None:
        problem = answer_problem(schema, default_answer)
        if problem:
            message = f"the default answer does not fit the answer schema: {problem}"
            raise InvalidInput(message, details={"default_answer": [message]})
    for key, name, who in (("channel", channel, approvers), ("escalate_to", escalate_channel, escalate_approvers or [])):
        if not name:
            continue
        found = Channel.objects.filter(name=name).values_list("kind", "team_id").first()
        if found is None or (named[key] and found[1] != agent.team_id):  # another team's is none of the agent's
            message = f"no channel named {name!r} in the agent's team"
            raise InvalidInput(f"{key}: {message}", details={key: [message]})
        kind = found[0]
        if not asks_questions(kind):
            message = f"channel {name!r} is of kind {kind}, whose cards cannot take answers (docs/asking.md)"
            raise InvalidInput(message, details={key: [message]})
        others = people_teams.strangers(agent.team, kind=kind, entries=who) if named_approvers[key] else []
        if others:
            message = f"not people of the agent's team ({agent.team.name}): {', '.join(others)}"
            raise InvalidInput(f"{'approvers' if key == 'channel' else key}: {message}",
                               details={"approvers" if key == "channel" else key: [message]})  # fmt: skip
    spec = AskSpec(
        gate=QUESTION_GATE,
        channel=channel,
        approvers=tuple(approvers),
        approvals_required=1,
        timeout_seconds=timeout_seconds,
        on_timeout="deny",
        # The person the agent works for may answer its question (unlike approving their own call).
        allow_self_approval=True,
        remind_after_seconds=remind_after_seconds,
        warn_before_seconds=warn_before_seconds,
        escalate_after_seconds=escalate_after_seconds,
        escalate_channel=escalate_channel or None,
        escalate_approvers=tuple(escalate_approvers or ()),
        reason=text,
    )
    with audit_transaction():
        return confirmation_create(
            agent=agent,
            spec=spec,
            session_id=session_id,
            tool_name=QUESTION_TOOL,
            stored_args={},
            tool_call_id="",
            user_id=user_id,
            metadata=metadata or {},
            config_version=0,
            callback_url=callback_url,
            now=now,
            kind=RequestKind.QUESTION,
            answer_schema=schema,
            default_answer=default_answer,
        )


def _gate_spec(agent: Agent, gate: str) -> AskSpec:
    """How the agent's approval gate `gate` (or its first one) asks; InvalidInput if it has none."""
    _, hooks = selectors.agent_hooks(agent=agent)
    for hook in hooks:
        if hook.can_ask and (not gate or hook.name == gate):
            spec = hook.ask_spec("")
            if spec is not None:
                return spec
    if gate:
        message = f"agent {agent.name!r} has no approval gate named {gate!r}"
        raise InvalidInput(message, details={"gate": [message]})
    message = f"give a channel: agent {agent.name!r} has no approval gate whose channel a question could use"
    raise InvalidInput(message, details={"channel": [message]})
