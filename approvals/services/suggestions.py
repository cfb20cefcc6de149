"""Learning from what people approved (docs/policies.md, "Learning from what people approved"): the
patterns of calls people approved at least N times in T days and never rejected, each offered as a
change of the agent's hooks that would let such calls through without asking. Nothing is applied:
the operator copies the YAML into the config file and applies it the audited way (`apply_config`).

A pattern is an agent, a tool and the set of the arguments' keys. What the approvals show of each
argument becomes the rule's `when`: a number's range (min..max seen), a few strings (at most
`MAX_VALUES`), a boolean's value; other values (objects, lists, many strings, masked values) only
their presence and type. Read from the requests themselves, and only from what verifies: a request
whose `decision_mac` does not sign it counts as a rejection (a decision made in SQL teaches nothing),
an approval with edited arguments disqualifies the pattern (a person changed the call), an expired or
cancelled one does not count.

Where the rule goes is where the calls are asked today, found by replaying them through the agent's
current hooks (`approvals.services.simulation`): an `allow` rule naming the tool exactly in the
`policy` that asks — false wherever one of the policy's deny rules naming the tool holds, so no deny
is ever outranked, and its `ask` rules naming the tool exactly get `&& !(…)`, as an exact ask would
beat the allow; a standalone `approval_gate` that asks gets `&& !(…)` on its `when`. The count of calls each would have allowed is
that replay's (the calls asked today that the changed hooks allow), and a change that would alter
anything else is not offered.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import math
from collections import defaultdict
from typing import Any

import yaml
from django.db.models import QuerySet
from django.utils import timezone

from approvals.audit import decision_verifies
from approvals.models import Agent, ConfirmationRequest
from approvals.services.simulation import Replay, call_context, new_outcome, recorded_calls, replay_only
from approvals.types import RequestKind, Status
from gateway_utils.configfile import ConfigError
from hooks.builtin.policy import pattern_specificity
from hooks.cel import compile_expression, evaluate
from hooks.registry import validate_agent_hooks

MAX_VALUES = 5  # at most this many distinct strings become an enumeration; more: any string
_INT64 = 2**63 - 1


@dataclasses.dataclass(frozen=True)
class Suggestion:
    """One pattern people always approved, and the change of the agent's hooks that would allow it."""

    number: int
    agent: str
    tool: str
    keys: tuple[str, ...]
    when: str
    approvals: int
    first: dt.datetime
    last: dt.datetime
    would_allow: int
    changes: tuple[str, ...]  # what changes in the hooks, in words

    @property
    def summary(self) -> str:
        keys = ", ".join(self.keys) or "no arguments"
        return (
            f"[{self.number}] {self.agent} · {self.tool} {{{keys}}}: approved {self.approvals} times, none rejected; "
            f"would have allowed {self.would_allow} past call(s)"
        )


@dataclasses.dataclass
class PolicySuggestions:
    """The suggestions of one run, and each concerned agent's config entry with them applied."""

    since: dt.datetime
    min_approvals: int
    days: int
    suggestions: list[Suggestion] = dataclasses.field(default_factory=list)
    entries: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # `agents:` items, hooks compact

    def yaml(self) -> str:
        """A config fragment (`agents:`) for the config file, each suggestion commented."""
        head = [
            f"# Suggested by `manage.py suggest_policies --min-approvals {self.min_approvals} --days {self.days}`:",
            f"# calls people approved at least {self.min_approvals} times and never rejected since {self.since:%Y-%m-%d}.",
            "# Nothing here is applied. To adopt a suggestion, replace the agent's entry in your config file with",
            "# it (the file names the channels its gates use), try the file on the past with",
            "# `manage.py simulate_config FILE`, then apply it with `manage.py apply_config FILE`.",
        ]
        if not self.suggestions:
            return "\n".join([*head, "# No pattern qualifies.", "agents: []", ""])
        head.append("#")
        for suggestion in self.suggestions:
            head.append(f"# {suggestion.summary}")
            head += [f"#     {change}" for change in suggestion.changes]
        body = yaml.safe_dump(
            {"agents": self.entries}, sort_keys=False, allow_unicode=True, default_flow_style=False, width=10**9
        ).splitlines()
        for suggestion in self.suggestions:
            _comment_rule(body, suggestion)
        return "\n".join([*head, *body, ""])


def policies_suggest(
    *,
    min_approvals: int = 10,
    days: int = 30,
    agents: QuerySet | None = None,
    now: dt.datetime | None = None,
) -> PolicySuggestions:
    """The patterns of `agents` (default: all) approved at least `min_approvals` times and never
    rejected in the last `days` days, in a stable order (agent, tool, keys), each with the change
    that would allow it and the number of past calls it would have allowed. Writes nothing."""
    since = (now or timezone.now()) - dt.timedelta(days=days)
    found = PolicySuggestions(since=since, min_approvals=min_approvals, days=days)
    agents = agents if agents is not None else Agent.objects.all()
    patterns = _qualifying(_patterns(agents=agents, since=since), min_approvals)
    by_agent: dict[str, list[_Pattern]] = defaultdict(list)
    for pattern in patterns:
        by_agent[pattern.agent].append(pattern)
    for name in sorted(by_agent):
        agent = agents.select_related("team").get(name=name)
        entry = _agent_suggestions(agent=agent, patterns=by_agent[name], since=since, found=found)
        if entry is not None:
            found.entries.append(entry)
    return found


# --------------------------------------------------------------------------- the record read


@dataclasses.dataclass
class _Pattern:
    agent: str
    tool: str
    keys: tuple[str, ...]
    approved: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # approved arguments, as stored
    masked: set[str] = dataclasses.field(default_factory=set)  # keys a mask hid in some call
    spoiled: bool = False  # a rejection, an unverifiable request or an edited approval
    first: dt.datetime | None = None
    last: dt.datetime | None = None


def _patterns(*, agents: QuerySet, since: dt.datetime) -> list[_Pattern]:
    requests = (
        ConfirmationRequest.objects.filter(kind=RequestKind.CONFIRMATION, agent__in=agents, decided_at__gte=since)
        .exclude(status__in=[Status.EXPIRED, Status.CANCELLED, Status.PENDING])
        .select_related("agent", "tool_call")
        .order_by("decided_at", "id")
    )
    patterns: dict[tuple[str, str, tuple[str, ...]], _Pattern] = {}
    for request in requests.iterator(chunk_size=500):
        args = request.tool_args if isinstance(request.tool_args, dict) else {}
        keys = tuple(sorted(args))
        where = (request.agent.name, request.tool_name, keys)
        pattern = patterns.setdefault(where, _Pattern(*where))
        verified = decision_verifies(ConfirmationRequest, request)
        edited = bool(request.arg_edits) or request.approved_args is not None
        if not verified or request.status != Status.APPROVED or edited:
            pattern.spoiled = True
            continue
        pattern.approved.append(args)
        pattern.masked |= _masked_keys(request)
        pattern.first = pattern.first or request.decided_at
        pattern.last = request.decided_at
    return list(patterns.values())


def _masked_keys(request: ConfirmationRequest) -> set[str]:
    """The top-level keys whose stored value a mask (redact) replaced in the request's call."""
    call = getattr(request, "tool_call", None)
    masked = (call.response or {}).get("masked") if call is not None and isinstance(call.response, dict) else None
    if not isinstance(masked, dict):
        return set()
    return {str(path[0]) for paths in masked.values() for path in paths or [] if path}


def _qualifying(patterns: list[_Pattern], min_approvals: int) -> list[_Pattern]:
    chosen = [p for p in patterns if not p.spoiled and len(p.approved) >= min_approvals]
    return sorted(chosen, key=lambda p: (p.agent, p.tool, p.keys))


# --------------------------------------------------------------------------- the rule's `when`


def cel_string(text: str) -> str:
    """A CEL string literal for `text`."""
    out = []
    for char in text:
        if char in '\\"':
            out.append("\\" + char)
        elif char in "\n\r\t":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}[char])
        elif ord(char) < 0x20 or 0xD800 <= ord(char) <= 0xDFFF or char in "\u2028\u2029":
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _number(value: int | float) -> str:
    return str(value) if isinstance(value, int) else repr(float(value))


def _is_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return abs(value) <= _INT64 if isinstance(value, int) else math.isfinite(value)


def pattern_when(keys: tuple[str, ...], approved: list[dict[str, Any]], masked: set[str]) -> str:
    """A CEL `when` true for calls with exactly these keys whose values are within what was approved.
    Every comparison is guarded by the value's type, so a call of another shape is false, never an error."""
    parts = [f"size(args) == {len(keys)}"]
    for key in keys:
        name = cel_string(key)
        value = f"args[{name}]"
        parts.append(f"{name} in args")
        values = [args[key] for args in approved]
        if key in masked:
            continue  # the record holds the mask, not what was approved
        if all(isinstance(v, bool) for v in values):
            seen = sorted(set(values))
            parts.append(f"{value} == {str(seen[0]).lower()}" if len(seen) == 1 else f"type({value}) == type(true)")
        elif all(_is_number(v) for v in values):
            low, high = min(values), max(values)
            parts.append(f"(type({value}) == type(0) || type({value}) == type(0.0))")
            parts.append(f"{value} >= {_number(low)} && {value} <= {_number(high)}")
        elif all(isinstance(v, str) for v in values):
            seen = sorted(set(values))
            if len(seen) <= MAX_VALUES:
                parts.append(f"{value} in [{', '.join(cel_string(v) for v in seen)}]")
            else:
                parts.append(f'type({value}) == type("")')
        elif all(isinstance(v, dict) for v in values):
            parts.append(f"type({value}) == type({{}})")
        elif all(isinstance(v, list) for v in values):
            parts.append(f"type({value}) == type([])")
    return " && ".join(parts)


# --------------------------------------------------------------------------- where the rule goes


def _and_not(when: str | None, excluded: str) -> str:
    return f"!({excluded})" if not when else f"({when}) && !({excluded})"


def _carved(hooks: list[dict[str, Any]], asker: str, tool: str, when: str, reason: str) -> tuple[list[dict[str, Any]], str] | None:
    """`hooks` changed so that the hook `asker` no longer asks about `tool` calls where `when` holds
    (and what changed, in words); None if `asker` is not a kind this can change."""
    hooks = copy.deepcopy(hooks)
    hook = next((h for h in hooks if h.get("name") == asker), None)
    if hook is None:
        return None
    if hook["kind"] == "policy":
        allowed = _policy_allow_when(hook, tool, when)
        if allowed is None:
            return None
        rules = hook.setdefault("rules", [])
        for rule in rules:
            exact = max(pattern_specificity(p, tool) for p in rule.get("tools") or ["*"]) == 3
            if rule["effect"] == "ask" and exact:  # an exact ask beats an exact allow: it leaves these calls
                rule["when"] = _and_not(rule.get("when"), allowed)
        rules.append({"effect": "allow", "tools": [tool], "when": allowed, "reason": reason})
        return hooks, f"{asker} (policy): an allow rule for {tool}"
    if hook["kind"] == "approval_gate":
        hook["when"] = _and_not(hook.get("when"), f"tool == {cel_string(tool)} && ({when})")
        return hooks, f"{asker} (approval_gate): its `when` leaves these {tool} calls out"
    return None


def _policy_allow_when(policy: dict[str, Any], tool: str, when: str) -> str | None:
    """The `when` of a policy's learned allow rule: `when`, except where any of the policy's deny rules
    naming the tool holds (a learned allow never outranks a deny), and — under `default: deny` — only
    where one of its ask rules naming the tool holds (a call no rule matched stays denied). None if a
    deny rule always applies."""
    naming = [r for r in policy.get("rules") or [] if max(pattern_specificity(p, tool) for p in r.get("tools") or ["*"])]
    denies = [r.get("when") for r in naming if r["effect"] == "deny"]
    if any(w is None for w in denies):
        return None
    allowed = f"({when})"
    if denies:
        allowed += " && !(" + " || ".join(f"({w})" for w in denies) + ")"
    if policy.get("default") == "deny":
        asks = [r.get("when") for r in naming if r["effect"] == "ask"]
        if not asks:
            return None
        if all(w is not None for w in asks):
            allowed += " && (" + " || ".join(f"({w})" for w in asks) + ")"
    return allowed


def _agent_suggestions(
    *, agent: Agent, patterns: list[_Pattern], since: dt.datetime, found: PolicySuggestions
) -> dict[str, Any] | None:
    """Each pattern of `agent` tried on its recorded calls, one after the other; the agent's config
    entry with those that would allow something, or None if none would."""
    current = agent.current_config
    try:
        running = _stored(current.hooks if current is not None else [])
    except ConfigError:
        return None  # stored under an older schema: nothing can be offered on top of it
    calls = list(recorded_calls(agent=agent, since=since))
    accepted = 0
    with replay_only():
        before = _outcomes(agent, running, calls)
        for pattern in patterns:
            when = pattern_when(pattern.keys, pattern.approved, pattern.masked)
            number = len(found.suggestions) + 1
            reason = (
                f"learned [{number}]: approved {len(pattern.approved)} times, none rejected, "
                f"{pattern.first:%Y-%m-%d}..{pattern.last:%Y-%m-%d} (suggest_policies)"
            )
            program = compile_expression(when)
            askers = sorted(
                {
                    before[call.pk][1]
                    for call in calls
                    if call.tool_name == pattern.tool and before[call.pk][0] == "ask" and _holds(program, agent, call)
                }
            )
            candidate, changes = running, []
            for asker in askers:
                carved = _carved(candidate, asker, pattern.tool, when, reason)
                if carved is None:
                    break
                candidate, change = carved
                changes.append(change)
            if not askers or len(changes) != len(askers):
                continue
            try:
                candidate = _stored(candidate)
            except ConfigError:
                continue
            after = _outcomes(agent, candidate, calls)
            moved = {pk: (before[pk][0], after[pk][0]) for pk in before if before[pk][0] != after[pk][0]}
            if not moved or any(move != ("ask", "allow") for move in moved.values()):
                continue  # it would allow nothing, or change more than asks into allows
            found.suggestions.append(
                Suggestion(
                    number=number, agent=agent.name, tool=pattern.tool, keys=pattern.keys, when=when,
                    approvals=len(pattern.approved), first=pattern.first, last=pattern.last,  # type: ignore[arg-type]
                    would_allow=len(moved), changes=tuple(changes),
                )  # fmt: skip
            )
            running, before, accepted = candidate, after, accepted + 1
    if not accepted:
        return None
    compact = [h.model_dump(mode="json", exclude_defaults=True) for h in validate_agent_hooks(running, check_outbound=False)]
    return {"name": agent.name, "team": agent.team.name, "read_only": agent.read_only, "hooks": compact}


def _stored(hooks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A hook list validated (names filled in) and in its stored form; raises ConfigError."""
    return [h.model_dump(mode="json") for h in validate_agent_hooks(hooks, check_outbound=False)]


def _outcomes(agent: Agent, hooks: list[dict[str, Any]], calls: list[Any]) -> dict[Any, tuple[str, str]]:
    """{call id: (allow|ask|deny, the deciding hook)} under `hooks`."""
    configs = validate_agent_hooks(hooks, check_outbound=False)
    decided = Replay(agent_name=agent.name, hooks=configs, read_only=agent.read_only).run(calls)
    return {call.pk: (new_outcome(outcome), outcome.decided_by) for call, outcome in decided}


def _holds(program: Any, agent: Agent, call: Any) -> bool:
    try:
        return evaluate(program, call_context(call, agent_name=agent.name, read_only=False).cel_variables())
    except ValueError:
        return False


def _comment_rule(lines: list[str], suggestion: Suggestion) -> None:
    """Put the suggestion's comment above its allow rule in the dumped YAML (none for a gate's change)."""
    marker = f"learned [{suggestion.number}]:"
    at = next((i for i, line in enumerate(lines) if line.lstrip().startswith("reason:") and marker in line), None)
    if at is None:
        return
    start = next((i for i in range(at, -1, -1) if lines[i].lstrip().startswith("- effect:")), at)
    indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
    lines.insert(
        start,
        f"{indent}# [{suggestion.number}] approved {suggestion.approvals} times, none rejected; "
        f"would have allowed {suggestion.would_allow} past call(s)",
    )
