"""Trying a config on the past (docs/policies.md, "Trying a config on the past"): the recorded tool
calls replayed through a draft's pre-tool-use chains, and each call whose outcome would change.

The replay runs the real chain (`hooks.chain.run_chain`) on hooks the one validator built from the
draft, and only decides:

- it runs in a transaction that is always rolled back, with the hooks' store in replay mode
  (`hooks.state.replaying`): a rate limit counts in memory, over the calls in the order they were
  made, each at its own time; any other write of the store refuses;
- nothing is asked, no request, card or grant is made or used: a call the draft would ask a human
  about is `ask` (a grant might have answered it; a human would have decided it);
- a hook that reaches outside the gateway (`Hook.calls_out`: `command`, `webhook`) is not called: it
  answers what the hook of its name and kind answered when the call was recorded, or nothing (and
  the report counts it as not replayed).

Calls are replayed as they are stored: a value a `redact` hook masked is seen as its mask, as an
approver's edit judged again sees it. The agent's read-only switch is the draft's `read_only`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from django.db import transaction
from django.db.models import QuerySet

from approvals.config_schema import GatewayConfig
from approvals.models import Agent, ToolCall
from hooks import state as hook_state
from hooks.base import Hook, HookContext, HookResult, pre_tool_use_context
from hooks.chain import ChainOutcome, run_chain
from hooks.config import HookConfigBase
from hooks.registry import build

OUTCOMES = ("allow", "ask", "deny")


@dataclasses.dataclass(frozen=True)
class ChangedCall:
    """A recorded call whose outcome the draft changes."""

    id: str
    agent: str
    tool: str
    created_at: dt.datetime
    old: str  # allow | ask | deny, as recorded
    new: str  # allow | ask | deny, under the draft
    reason: str  # the draft's reason
    decided_by: str  # the draft's hook that decided

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "created_at": self.created_at.isoformat()}


@dataclasses.dataclass
class SimulationReport:
    """What a draft config would have made of the calls recorded since `since`."""

    since: dt.datetime
    agents: list[str]  # the agents of the draft whose calls were replayed
    replayed: int = 0
    changed: list[ChangedCall] = dataclasses.field(default_factory=list)
    # {tool: {"replayed": n, "changed": n, "allow → ask": n, …}}
    per_tool: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    # {hook name: calls it applied to but had not answered when recorded} (hooks that call out)
    not_replayed: dict[str, int] = dataclasses.field(default_factory=dict)
    # agents the draft names that have no calls to replay here (unknown, or not of the reader's teams)
    without_calls: list[str] = dataclasses.field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "since": self.since.isoformat(),
            "agents": self.agents,
            "replayed": self.replayed,
            "changed": [change.as_dict() for change in self.changed],
            "per_tool": self.per_tool,
            "not_replayed": self.not_replayed,
            "without_calls": self.without_calls,
        }

    def lines(self) -> list[str]:
        """The report as `simulate_config` prints it: the changed calls, then the counts per tool."""
        out = [f"replayed {self.replayed} call(s) since {self.since:%Y-%m-%d %H:%M} UTC; {len(self.changed)} would change"]
        if self.changed:
            out += ["", f"{'call':36}  {'agent':20}  {'tool':28}  change"]
            for c in self.changed:
                out.append(f"{c.id:36}  {c.agent:20}  {c.tool:28}  {c.old} → {c.new}  ({c.reason})")
        if self.per_tool:
            out += ["", f"{'tool':28}  {'replayed':>8}  {'changed':>7}  changes"]
            for tool, counts in self.per_tool.items():
                moves = ", ".join(f"{k}: {v}" for k, v in counts.items() if "→" in k) or "—"
                out.append(f"{tool:28}  {counts['replayed']:>8}  {counts['changed']:>7}  {moves}")
        for name, count in self.not_replayed.items():
            out.append(f"not replayed: hook {name} (it calls out) had not answered {count} of these calls; taken as no opinion")
        for name in self.without_calls:
            out.append(f"no recorded calls of agent {name} to replay")
        return out


def recorded_outcome(call: ToolCall) -> str:
    """What the chain said when the call was made: `ask` if a gate asked (a human decided, or a grant
    answered it), else `allow` or `deny`."""
    if call.confirmation_id is not None or call.grant_id is not None or call.decision == "pending":
        return "ask"
    return "deny" if call.decision == "deny" else "allow"


class _Recorded(Hook):
    """Stands in, in a replay, for a hook that calls out: answers what the hook of its name and kind
    answered when the call was recorded (its decision and reason), or no opinion if it had not."""

    def __init__(self, hook: Hook) -> None:
        super().__init__(hook.config)
        self.kind = hook.kind  # type: ignore[misc]
        self.events = hook.events  # type: ignore[misc]
        self.answer: dict[str, Any] | None = None
        self.missing = 0

    def run(self, ctx: HookContext) -> HookResult:
        if self.answer is None:
            self.missing += 1
            return HookResult.no_opinion(reason=f"{self.name} not replayed: it had not answered this call")
        return HookResult(decision=self.answer.get("decision", "none"), reason=self.answer.get("reason", ""))


@contextlib.contextmanager
def replay_only() -> Iterator[None]:
    """A block that decides and keeps nothing: its transaction is rolled back whatever happens in it,
    and the hooks' store counts in memory (`hooks.state.replaying`)."""
    with transaction.atomic(), hook_state.replaying():
        try:
            yield
        finally:
            transaction.set_rollback(True)


class Replay:
    """A draft's chain for one agent, replaying recorded calls: `run(calls)` yields each call (in the
    order given, oldest first) with what the chain decides about it; `not_replayed()` names the hooks
    that call out with how many calls they had not answered. Use inside `replay_only()`."""

    def __init__(self, *, agent_name: str, hooks: Sequence[HookConfigBase], read_only: bool = False) -> None:
        built = build(list(hooks))  # fresh instances: the served chains' cached hooks are never touched
        self.stand_ins = {hook.name: _Recorded(hook) for hook in built if hook.calls_out}
        self.chain = [self.stand_ins.get(hook.name, hook) for hook in built]
        self.agent_name, self.read_only = agent_name, read_only

    def run(self, calls: Iterable[ToolCall]) -> Iterator[tuple[ToolCall, ChainOutcome]]:
        with hook_state.replaying():  # each run counts its own windows from nothing
            for call in calls:
                for stand_in in self.stand_ins.values():
                    stand_in.answer = next(
                        (d for d in call.hook_decisions or [] if d.get("hook") == stand_in.name and d.get("kind") == stand_in.kind),
                        None,
                    )
                yield call, run_chain(self.chain, call_context(call, agent_name=self.agent_name, read_only=self.read_only))

    def not_replayed(self) -> dict[str, int]:
        return {name: s.missing for name, s in self.stand_ins.items() if s.missing}


def call_context(call: ToolCall, *, agent_name: str, read_only: bool) -> HookContext:
    """The pre-tool-use context of a recorded call as it was made (its arguments as stored, its time)."""
    session = {"user_id": call.user_id, "metadata": dict(call.metadata or {}), "turn_id": call.turn_id}
    return pre_tool_use_context(
        agent=agent_name,
        tool_args=dict(call.tool_args or {}),
        session=session,
        session_id=call.session_id,
        user_id=call.user_id,
        metadata=dict(call.metadata or {}),
        tool_name=call.tool_name,
        tool_call_id=call.tool_call_id,
        turn_id=call.turn_id,
        agent_read_only=read_only,
        now=call.created_at,
    )


def new_outcome(outcome: ChainOutcome) -> str:
    return outcome.decision if outcome.decision in OUTCOMES else "allow"


def recorded_calls(*, agent: Agent, since: dt.datetime) -> QuerySet:
    """The agent's calls made since `since`, oldest first (the order a rate limit counts them in)."""
    return ToolCall.objects.filter(agent=agent, created_at__gte=since).order_by("created_at", "id")


def config_simulate(*, config: GatewayConfig, since: dt.datetime, agents: QuerySet | None = None) -> SimulationReport:
    """Replay the calls recorded since `since` of each agent `config` names through that agent's hooks
    in `config`, and report each call whose outcome would change (docs/policies.md). `agents`: the
    agents whose calls may be replayed (the admin's teams'); None: all. Writes nothing."""
    visible = agents if agents is not None else Agent.objects.all()
    report = SimulationReport(since=since, agents=[])
    per_tool: dict[str, Counter[str]] = defaultdict(Counter)
    with replay_only():
        for agent_cfg in config.agents:
            agent = visible.filter(name=agent_cfg.name).first()
            replaying = Replay(agent_name=agent_cfg.name, hooks=agent_cfg.hooks, read_only=agent_cfg.read_only)
            calls = recorded_calls(agent=agent, since=since).iterator(chunk_size=2000) if agent is not None else ()
            replayed = 0
            for call, outcome in replaying.run(calls):
                replayed += 1
                old, new = recorded_outcome(call), new_outcome(outcome)
                counts = per_tool[call.tool_name]
                counts["replayed"] += 1
                if old != new:
                    counts["changed"] += 1
                    counts[f"{old} → {new}"] += 1
                    report.changed.append(
                        ChangedCall(
                            id=str(call.pk), agent=agent_cfg.name, tool=call.tool_name, created_at=call.created_at,
                            old=old, new=new, reason=outcome.reason, decided_by=outcome.decided_by,
                        )  # fmt: skip
                    )
            if not replayed:
                report.without_calls.append(agent_cfg.name)
                continue
            report.agents.append(agent_cfg.name)
            report.replayed += replayed
            for name, count in replaying.not_replayed().items():
                report.not_replayed[f"{agent_cfg.name}/{name}"] = count
    report.per_tool = {
        tool: {"replayed": c["replayed"], "changed": c["changed"], **{k: c[k] for k in sorted(c) if "→" in k}}
        for tool, c in sorted(per_tool.items())
    }
    return report
