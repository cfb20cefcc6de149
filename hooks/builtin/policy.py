"""`policy`: allow, deny or ask per tool, by rules in the config (docs/reference/config.md)."""

from __future__ import annotations

import dataclasses
from typing import Literal

import cel
from pydantic import Field, ValidationInfo, field_validator

from hooks.base import Hook, HookContext, HookResult
from hooks.cel import compile_expression, evaluate
from hooks.config import CelExpression, HookConfigBase, Reference, Strict, ToolPatterns
from hooks.risk import RiskSetting, resolve_risk


class PolicyRule(Strict):
    """One rule of a policy hook."""

    effect: Literal["allow", "deny", "ask"]
    tools: ToolPatterns = ["*"]
    when: CelExpression | None = None
    reason: str = ""
    risk: RiskSetting | None = Field(
        default=None, description="The risk of a call this rule asks about (default: the policy's)."
    )


class PolicyConfig(HookConfigBase):
    """Allow, deny or ask per tool. Precedence: exact name > 'prefix__*' > '*'; then deny > ask > allow."""

    kind: Literal["policy"]
    event: Literal["pre_tool_use"] = "pre_tool_use"
    rules: list[PolicyRule] = []
    default: Literal["allow", "deny", "ask"] = "allow"
    risk: RiskSetting | None = Field(
        default=None, description="The risk of a call this policy asks about (default: the ask_via gate's)."
    )
    ask_via: str | None = Field(
        default=None,
        validate_default=True,
        description="Name of an approval_gate of the same agent; required if anything can ask.",
    )

    @field_validator("ask_via")
    @classmethod
    def _required_to_ask(cls, value: str | None, info: ValidationInfo) -> str | None:
        rules = info.data.get("rules", [])  # absent when invalid: reported there
        can_ask = info.data.get("default") == "ask" or any(rule.effect == "ask" for rule in rules)
        if value is None and can_ask:
            raise ValueError("is required when a rule or the default can ask: name an approval_gate of this agent")
        return value

    def references(self) -> list[Reference]:
        return [Reference("ask_via", "gate", self.ask_via)] if self.ask_via is not None else []

# The nine buckets, strongest first: specificity of the tool pattern, then the effect.
SPECIFICITY = {"exact": 3, "prefix": 2, "global": 1}
EFFECT_STRENGTH = {"deny": 3, "ask": 2, "allow": 1}


def pattern_specificity(pattern: str, tool_name: str) -> int:
    """How specifically `pattern` names `tool_name`: 3 exact, 2 `prefix__*`, 1 `*`, 0 no match."""
    if pattern == "*":
        return SPECIFICITY["global"]
    if pattern.endswith("*"):
        return SPECIFICITY["prefix"] if tool_name.startswith(pattern[:-1]) else 0
    return SPECIFICITY["exact"] if pattern == tool_name else 0


@dataclasses.dataclass(frozen=True)
class _Rule:
    index: int
    effect: str
    tools: tuple[str, ...]
    when: cel.Program | None
    reason: str
    risk: str | None

    def specificity(self, tool_name: str) -> int:
        """The most specific of this rule's patterns that names the tool (0: the rule does not apply)."""
        return max(pattern_specificity(pattern, tool_name) for pattern in self.tools)


class PolicyHook(Hook):
    """Invariant: a call gets the effect of the strongest rule that matches it, and that rule's reason.

    Precedence is exactly docs/reference/config.md's: the rule naming the tool most
    specifically wins (exact name > `prefix__*` > `*`); among rules equally
    specific, deny > ask > allow; among equal rules, file order. A rule whose
    `when` is false does not match. No match: `default`. An `ask` is routed by
    the chain runner to the approval gate named by `ask_via`.

    `when` expressions are evaluated lazily, strongest candidate first, so a
    call costs at most one CEL evaluation per rule that names its tool and
    usually one.
    """

    kind = "policy"
    events = PolicyConfig.EVENTS
    config_model = PolicyConfig
    config: PolicyConfig

    def __init__(self, config):
        super().__init__(config)
        self.rules = tuple(
            _Rule(
                index=index,
                effect=rule.effect,
                tools=tuple(rule.tools),
                when=compile_expression(rule.when) if rule.when else None,
                reason=rule.reason,
                risk=rule.risk,
            )
            for index, rule in enumerate(config.rules)
        )

    def run(self, ctx: HookContext) -> HookResult:
        rule = self.matching_rule(ctx)
        if rule is None:
            effect = self.config.default
            reason = f"no rule of {self.name} matched; default: {effect}"
        else:
            effect = rule.effect
            reason = rule.reason or f"{effect} by {self.name} rules[{rule.index}]"
        if effect == "deny":
            return HookResult.deny(reason)
        if effect == "ask":
            setting = (rule.risk if rule is not None else None) or self.config.risk
            risk = resolve_risk(setting, ctx.cel_variables()) or ""
            return HookResult(decision="ask", reason=reason, ask_via=self.config.ask_via or "", risk=risk)
        return HookResult.allow(reason)

    def ask_targets(self) -> frozenset[str]:
        """The gate named by `ask_via` runs only when this policy asks."""
        return frozenset({self.config.ask_via}) if self.config.ask_via else frozenset()

    def matching_rule(self, ctx: HookContext) -> _Rule | None:
        """The strongest rule that names the tool and whose `when` holds."""
        candidates = []
        for rule in self.rules:
            specificity = rule.specificity(ctx.tool_name)
            if specificity:
                candidates.append((-specificity, -EFFECT_STRENGTH[rule.effect], rule.index, rule))
        candidates.sort(key=lambda candidate: candidate[:3])
        variables = None
        for *_, rule in candidates:
            if rule.when is None:
                return rule
            if variables is None:
                variables = ctx.cel_variables()
            if evaluate(rule.when, variables):
                return rule
        return None
