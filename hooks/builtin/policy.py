"""`policy`: allow, deny or ask per tool, by rules in the config (CONTRACT §3b)."""

from __future__ import annotations

import dataclasses

import cel

from hooks.base import Hook, HookContext, HookResult
from hooks.cel import compile_expression, evaluate
from hooks.registry import register
from hooks.schema import HOOK_CONFIG_MODELS

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

    def specificity(self, tool_name: str) -> int:
        """The most specific of this rule's patterns that names the tool (0: the rule does not apply)."""
        return max(pattern_specificity(pattern, tool_name) for pattern in self.tools)


@register
class PolicyHook(Hook):
    """Invariant: a call gets the effect of the strongest rule that matches it, and that rule's reason.

    Precedence is exactly CONTRACT §3b's: the rule naming the tool most
    specifically wins (exact name > `prefix__*` > `*`); among rules equally
    specific, deny > ask > allow; among equal rules, file order. A rule whose
    `when` is false does not match. No match: `default`. An `ask` is routed by
    the chain runner to the approval gate named by `ask_via`.

    `when` expressions are evaluated lazily, strongest candidate first, so a
    call costs at most one CEL evaluation per rule that names its tool and
    usually one.
    """

    kind = "policy"
    events = HOOK_CONFIG_MODELS["policy"].EVENTS
    config_model = HOOK_CONFIG_MODELS["policy"]

    def __init__(self, config):
        super().__init__(config)
        self.rules = tuple(
            _Rule(
                index=index,
                effect=rule.effect,
                tools=tuple(rule.tools),
                when=compile_expression(rule.when) if rule.when else None,
                reason=rule.reason,
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
            return HookResult(decision="ask", reason=reason, ask_via=self.config.ask_via or "")
        return HookResult.allow(reason)

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
