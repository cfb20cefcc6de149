"""How risky a gated call is: `low`, `medium` or `high` (docs/policies.md, "Risk").

An `approval_gate` or a `policy` (or one of its rules) says it, as one of the three words or as a CEL
expression over the call that gives one of them (`args.amount > 10000 ? "high" : "low"`). The request
carries the risk it was given: cards and the inbox show it, channels route by it (a digest for the low
ones), it is signed with the request and counted in the metrics.

An expression that fails when a call is judged (a missing key, a value that is not one of the three)
gives `high`: a call nobody could rate is shown to people as the riskiest, never hidden in a digest.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, Field

from hooks.cel import VARIABLES, compile_expression

Risk = Literal["low", "medium", "high"]
RISKS: tuple[str, ...] = get_args(Risk)
DEFAULT_RISK: Risk = "medium"
# When the expression cannot say: shown as the riskiest.
UNRATED_RISK: Risk = "high"


def _check_risk(value: str) -> str:
    if value not in RISKS:
        try:
            compile_expression(value)
        except ValueError as exc:
            raise ValueError(f"must be low, medium, high or a CEL expression giving one of them ({exc})") from None
    return value


RiskSetting = Annotated[
    str,
    AfterValidator(_check_risk),
    Field(
        description=(
            "low, medium or high; or a CEL expression over "
            f"{', '.join(VARIABLES)} giving one of them, e.g. 'args.amount > 10000 ? \"high\" : \"low\"'."
        )
    ),
]


def resolve_risk(setting: str | None, variables: dict[str, Any] | None) -> Risk | None:
    """The risk `setting` gives a call (None: the setting says nothing). `variables` are the call's CEL
    variables (`HookContext.cel_variables()`); without them (no call to judge) an expression gives the default."""
    if setting is None:
        return None
    if setting in RISKS:
        return setting  # type: ignore[return-value]
    if variables is None:
        return DEFAULT_RISK
    program = compile_expression(setting)
    try:
        value = program.execute(dict(variables))
    except Exception:  # a missing key, a type mismatch: the call cannot be rated
        return UNRATED_RISK
    return value if value in RISKS else UNRATED_RISK  # type: ignore[return-value]

