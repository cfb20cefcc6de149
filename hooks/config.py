"""What every hook kind's config model shares: the common keys and value types.

Each kind declares its own model, beside its hook class, in its module under
`hooks/builtin/`; `hooks.registry` gathers them and validates an agent's hook
list. Unknown keys are errors everywhere (docs/reference/config.md).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Annotated, Any, ClassVar, Literal, get_args
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from hooks.cel import VARIABLES, compile_expression

# --- value types ----------------------------------------------------------------

_GLOB_CHARS = re.compile(r"[*?\[\]]")


def _check_tool_pattern(value: str) -> str:
    prefix = value.removesuffix("__*")
    if value == "*" or (prefix and not _GLOB_CHARS.search(prefix)):
        return value
    raise ValueError("must be an exact tool name, 'prefix__*' or '*'")


def _check_regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"is not a valid regular expression: {exc}") from None
    return value


def _check_http_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("must be an http or https URL")
    return value


def _check_cel(value: str) -> str:
    compile_expression(value)  # raises ValueError with a one-line reason
    return value


ToolPattern = Annotated[str, Field(min_length=1), AfterValidator(_check_tool_pattern)]
ToolPatterns = Annotated[
    list[ToolPattern],
    Field(min_length=1, description="Tools this applies to: exact names, 'prefix__*' or '*'."),
]
Regex = Annotated[str, AfterValidator(_check_regex)]
HttpUrl = Annotated[str, AfterValidator(_check_http_url)]
CelExpression = Annotated[
    str,
    AfterValidator(_check_cel),
    Field(description=f"A CEL expression over {', '.join(VARIABLES)}; the rule or hook applies only where it is true."),
]
PositiveInt = Annotated[int, Field(gt=0)]
Event = Literal["session_start", "pre_turn", "pre_tool_use", "post_tool_use", "tool_error", "post_turn", "session_end"]


class Strict(BaseModel):
    """Unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")


@dataclasses.dataclass(frozen=True)
class Reference:
    """A name a hook's config refers to, checked against the rest of the file.

    `to` is `gate` (another hook of the same agent that can ask a human) or
    `channel` (a channel of the file); `path` is the key, relative to the hook.
    """

    path: str
    to: Literal["gate", "channel"]
    name: str


class HookConfigBase(Strict):
    """Keys every hook kind has. Each kind narrows `event` to the events it can run at."""

    EVENTS: ClassVar[tuple[str, ...]]  # the events this kind can run at; the first is its default

    kind: str
    name: str = Field(
        default="",  # filled in as '<kind>-<n>' by the validator, which knows the position
        min_length=1,
        max_length=64,
        description="Unique within the agent; default '<kind>-<n>', n being the hook's 1-based position.",
    )
    event: str
    priority: int = Field(default=100, description="Lower runs first; equal priorities keep file order.")
    tools: ToolPatterns = ["*"]
    when: CelExpression | None = None
    on_error: Literal["fail_closed", "fail_open"] = Field(
        default="fail_closed",
        description="fail_closed: an error or timeout of this hook denies; fail_open: logged, no opinion.",
    )

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls.EVENTS = get_args(cls.model_fields["event"].annotation)

    def references(self) -> list[Reference]:
        """The names this hook refers to (gates, channels); checked by `hooks.registry.validate_agent_hooks`."""
        return []

    def deployment_problems(self) -> list[tuple[str, str]]:
        """(key, message) of each value this deployment cannot honour (e.g. a time finer than its timers
        run); checked by `hooks.registry.validate_agent_hooks` when a hook list is applied, not when a
        stored one is built (a stored gate keeps working if the deployment changes under it)."""
        return []

    def outbound_urls(self) -> list[tuple[str, str]]:
        """(key path, URL) of each URL this hook will call on the agent's behalf; checked by
        `hooks.registry.validate_agent_hooks` against the outbound guard (`gateway_utils.outbound.check_url`)."""
        return []
