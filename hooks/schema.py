"""The gateway's config file (CONTRACT §3, §3b): its pydantic models and its one validator.

`manage.py apply_config`, the admin and the API all validate through here:
`parse_config_text` / `load_config_file` for a whole file, `validate_agent_hooks`
for one agent's hook list. Every problem found is reported at once, each as a
`ConfigProblem(path, message)` such as
`agents[0].hooks[1].timeout_seconds: must be > 0`.

`${NAME}` in any string value is replaced by the environment variable NAME; a
missing one is a problem at that value's path. `${NAME:-fallback}` uses
`fallback` when NAME is unset or empty, as in a shell.

The models check one hook (or channel) at a time; references between them
(`ask_via`, `channel`, unique names) are checked by the functions below, which
also fill in each hook's default name. Build configs through them, not through
`GatewayConfig.model_validate`.
"""

from __future__ import annotations

import difflib
import os
import re
import types
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal, NamedTuple, TypeVar, Union, get_args, get_origin
from urllib.parse import urlsplit

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from channels_ext.configs import (
    CHANNEL_CONFIG_MODELS,
    SLUG,
    FeishuChannelConfig,
    SlackChannelConfig,
    WebChannelConfig,
)
from hooks.cel import VARIABLES, compile_expression

FILE = "<file>"  # the path of problems with the file as a whole

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


# --- hook kinds (CONTRACT §3b) ------------------------------------------------------


class _Strict(BaseModel):
    """Unknown keys are errors (CONTRACT §3b)."""

    model_config = ConfigDict(extra="forbid")


class HookConfigBase(_Strict):
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


class EscalateTo(_Strict):
    """Where a still-pending request goes after `escalate_after_seconds`."""

    channel: str = Field(min_length=1)
    approvers: list[str] = []


class ApprovalGateConfig(HookConfigBase):
    """Suspend the call until enough approvers decide in a chat channel."""

    kind: Literal["approval_gate"]
    event: Literal["pre_tool_use"] = "pre_tool_use"
    channel: str = Field(min_length=1, description="Name of a channel in this file.")
    approvers: list[str] = Field(default=[], description="Channel-native user ids; empty = any member.")
    approvals_required: int = Field(default=1, ge=1)
    timeout_seconds: PositiveInt | None = Field(default=1800, description="null = never expires.")
    on_timeout: Literal["deny", "allow"] = "deny"
    remind_after_seconds: PositiveInt | None = None
    escalate_after_seconds: PositiveInt | None = None
    escalate_to: EscalateTo | None = Field(default=None, validate_default=True)
    allow_self_approval: bool = Field(
        default=False, description="false: an approver whose id equals the call's user_id cannot approve it."
    )

    @field_validator("approvals_required")
    @classmethod
    def _at_most_the_approvers(cls, value: int, info: ValidationInfo) -> int:
        approvers = info.data.get("approvers")
        if approvers and value > len(approvers):
            raise ValueError(f"must be <= the number of approvers ({len(approvers)})")
        return value

    @field_validator("escalate_to")
    @classmethod
    def _with_escalate_after(cls, value: EscalateTo | None, info: ValidationInfo) -> EscalateTo | None:
        if "escalate_after_seconds" not in info.data:  # invalid itself, and reported there
            return value
        escalates = info.data["escalate_after_seconds"] is not None
        if escalates and value is None:
            raise ValueError("is required when escalate_after_seconds is set")
        if not escalates and value is not None:
            raise ValueError("needs escalate_after_seconds")
        return value


class PolicyRule(_Strict):
    """One rule of a policy hook."""

    effect: Literal["allow", "deny", "ask"]
    tools: ToolPatterns = ["*"]
    when: CelExpression | None = None
    reason: str = ""


class PolicyConfig(HookConfigBase):
    """Allow, deny or ask per tool. Precedence: exact name > 'prefix__*' > '*'; then deny > ask > allow."""

    kind: Literal["policy"]
    event: Literal["pre_tool_use"] = "pre_tool_use"
    rules: list[PolicyRule] = []
    default: Literal["allow", "deny", "ask"] = "allow"
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


class ReadonlyGuardConfig(HookConfigBase):
    """Block the write tools (`tools`) while the agent is read-only or `metadata[flag]` is true."""

    kind: Literal["readonly_guard"]
    event: Literal["pre_tool_use"] = "pre_tool_use"
    flag: str = Field(default="read_only", min_length=1)


class RateLimitConfig(HookConfigBase):
    """Deny beyond `limit` calls per `window_seconds`, counted per user, session or agent."""

    kind: Literal["rate_limit"]
    event: Literal["pre_tool_use"] = "pre_tool_use"
    limit: int = Field(ge=1)
    window_seconds: int = Field(ge=1)
    per: Literal["user", "session", "agent"] = "user"


class RedactConfig(HookConfigBase):
    """Mask argument values in what is stored, shown and logged (never in what the agent gets)."""

    kind: Literal["redact"]
    event: Literal["pre_tool_use"] = "pre_tool_use"
    keys: list[str] = Field(default=[], description="Argument names, matched at any depth.")
    patterns: list[Regex] = []
    replacement: str = "[redacted]"

    @model_validator(mode="after")
    def _redacts_something(self) -> RedactConfig:
        if not self.keys and not self.patterns:
            raise ValueError("needs keys or patterns (or both)")
        return self


class CommandConfig(HookConfigBase):
    """Run a command with the event as JSON on stdin; exit 2 denies with stderr as the reason."""

    kind: Literal["command"]
    event: Event
    command: list[str] = Field(min_length=1, description="argv")
    timeout_ms: int = Field(default=5000, gt=0)


class WebhookConfig(HookConfigBase):
    """POST the event, signed, to a URL; it answers like a command hook."""

    kind: Literal["webhook"]
    event: Event
    url: HttpUrl
    secret: str = ""
    timeout_ms: int = Field(default=3000, gt=0)


class TruncateResultConfig(HookConfigBase):
    """Cut a tool's result to `max_chars`."""

    kind: Literal["truncate_result"]
    event: Literal["post_tool_use"] = "post_tool_use"
    max_chars: int = Field(ge=1)


class McpServer(_Strict):
    """An MCP server, started as a command or reached at a URL."""

    command: list[str] | None = Field(default=None, min_length=1)
    url: HttpUrl | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError("needs exactly one of command or url")
        return self


class InjectSource(_Strict):
    """Where an injected tool result comes from: an HTTP `url`, or an `mcp` server."""

    url: HttpUrl | None = None
    method: Literal["GET", "POST"] = "GET"
    headers: dict[str, str] = {}
    mcp: McpServer | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> InjectSource:
        if (self.url is None) == (self.mcp is None):
            raise ValueError("needs exactly one of url or mcp")
        # Compare with the defaults, not model_fields_set: stored configs are re-validated with defaults filled in.
        if self.mcp is not None and (self.method != "GET" or self.headers):
            raise ValueError("method and headers apply only to a url source")
        return self


class Refresh(_Strict):
    """Fetch the injected result again once it is older than `ttl_minutes`."""

    ttl_minutes: int = Field(ge=1)


class InjectToolResultConfig(HookConfigBase):
    """Add a tool call and its result to the agent's history at session start or before a turn."""

    kind: Literal["inject_tool_result"]
    event: Literal["session_start", "pre_turn"] = "session_start"
    toolset_name: str | None = None
    tool_name: str = Field(min_length=1)
    arguments: dict[str, Any] = {}
    source: InjectSource
    frequency: Literal["always", "once", "append_if_changed"] = "always"
    refresh: Refresh | None = None


class RetryOnErrorConfig(HookConfigBase):
    """Retry a failed tool call with doubling backoff."""

    kind: Literal["retry_on_error"]
    event: Literal["tool_error"] = "tool_error"
    max_attempts: int = Field(default=3, ge=1)
    backoff_seconds: float = Field(default=1, ge=0, description="Doubles after each attempt.")
    max_total_seconds: float = Field(default=60, gt=0)
    errors: list[Regex] = Field(default=[], description="Regexes the error must match; empty = any error.")


class TurnLimitConfig(HookConfigBase):
    """Deny further turns once a session has had `max_turns`."""

    kind: Literal["turn_limit"]
    event: Literal["pre_turn"] = "pre_turn"
    max_turns: int = Field(ge=1)


HookConfig = Annotated[
    ApprovalGateConfig
    | PolicyConfig
    | ReadonlyGuardConfig
    | RateLimitConfig
    | RedactConfig
    | CommandConfig
    | WebhookConfig
    | TruncateResultConfig
    | InjectToolResultConfig
    | RetryOnErrorConfig
    | TurnLimitConfig,
    Field(discriminator="kind"),
]
HOOK_CONFIG_MODELS: dict[str, type[HookConfigBase]] = {
    get_args(model.model_fields["kind"].annotation)[0]: model for model in get_args(get_args(HookConfig)[0])
}
KNOWN_KINDS: tuple[str, ...] = tuple(HOOK_CONFIG_MODELS)

ChannelConfig = Annotated[WebChannelConfig | SlackChannelConfig | FeishuChannelConfig, Field(discriminator="kind")]


class AgentConfig(_Strict):
    """One agent and its ordered hooks."""

    name: str = Field(pattern=SLUG, max_length=64)
    hooks: list[HookConfig] = []
    read_only: bool = False


class GatewayConfig(_Strict):
    """The gateway's config file (`manage.py apply_config FILE`)."""

    model_config = ConfigDict(title="Gateway config")

    channels: list[ChannelConfig] = []
    agents: list[AgentConfig] = []


# --- problems ---------------------------------------------------------------------


class ConfigProblem(NamedTuple):
    """One thing wrong with a config, at a path like `agents[0].hooks[1].timeout_seconds`."""

    path: str
    message: str


class ConfigError(Exception):
    """A config refused, with every problem found; `str()` gives one `path: message` per line."""

    def __init__(self, problems: Sequence[ConfigProblem]):
        self.problems = list(problems)
        super().__init__("\n".join(f"{problem.path}: {problem.message}" for problem in self.problems))


# --- entry points -------------------------------------------------------------------


def load_config_file(path: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None) -> GatewayConfig:
    """Read and validate a config file; raise ConfigError if it is unreadable or invalid."""
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError([ConfigProblem(FILE, f"cannot read {os.fspath(path)}: {reason}")]) from None
    return parse_config_text(text, environ=environ)


def parse_config_text(text: str, *, environ: Mapping[str, str] | None = None) -> GatewayConfig:
    """Parse YAML, substitute `${NAME}` from `environ` (default os.environ) and validate it all.

    Raises ConfigError listing every problem found.
    """
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError([ConfigProblem(FILE, f"invalid YAML{where}: {exc.problem or exc.context}")]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([ConfigProblem(FILE, f"invalid YAML: {exc}")]) from None
    env_problems: list[ConfigProblem] = []
    data = _substitute_environment(data, "", os.environ if environ is None else environ, env_problems)
    try:
        config = validate_config(data)
    except ConfigError as exc:
        # A value whose variable is missing is reported once, for the variable.
        missing = {problem.path for problem in env_problems}
        raise ConfigError(env_problems + [p for p in exc.problems if p.path not in missing]) from None
    if env_problems:
        raise ConfigError(env_problems)
    return config


def validate_config(data: Any) -> GatewayConfig:
    """Validate a parsed config file (after `${NAME}` substitution); raise ConfigError listing every problem."""
    if not isinstance(data, Mapping):
        raise ConfigError([ConfigProblem(FILE, "must be a mapping with `channels` and `agents` keys")])
    problems: list[ConfigProblem] = []
    raw_channels = _list_at(data, "channels", "channels", problems)
    raw_agents = _list_at(data, "agents", "agents", problems)
    _validate_model(GatewayConfig, {**data, "channels": [], "agents": []}, "", problems)

    channels: list[Any] = []
    for index, raw in enumerate(raw_channels):
        channel = _validate_tagged(raw, f"channels[{index}]", CHANNEL_CONFIG_MODELS, "channel", problems)
        if channel is not None:
            channels.append(channel)
    _check_unique_names(_raw_names(raw_channels, "channels"), problems)
    # Hooks may name any channel the file defines, even one with problems of its own.
    channel_names = {name for _, name in _raw_names(raw_channels, "channels")}

    agents: list[AgentConfig] = []
    for index, raw in enumerate(raw_agents):
        path = f"agents[{index}]"
        if not isinstance(raw, Mapping):
            problems.append(ConfigProblem(path, "must be a mapping with a `name` key"))
            continue
        raw_hooks = _list_at(raw, "hooks", f"{path}.hooks", problems)
        agent = _validate_model(AgentConfig, {**raw, "hooks": []}, path, problems)
        hooks = _validate_hooks(raw_hooks, f"{path}.hooks", channel_names, problems)
        if agent is not None:
            agent.hooks = hooks
            agents.append(agent)
    _check_unique_names(_raw_names(raw_agents, "agents"), problems)

    if problems:
        raise ConfigError(problems)
    return GatewayConfig(channels=channels, agents=agents)


def validate_agent_hooks(
    hooks: list[dict[str, Any]],
    *,
    channel_kinds: Mapping[str, str] | None = None,
    path_prefix: str = "hooks",
) -> list[HookConfig]:
    """Validate one agent's hook list on its own (admin, API) and fill in default names.

    `channel_kinds` maps the known channel names to their kinds, for checking
    approval gates' channels; None skips that check. Raises ConfigError with
    paths under `path_prefix`.
    """
    if not isinstance(hooks, list):
        raise ConfigError([ConfigProblem(path_prefix, "must be a list")])
    problems: list[ConfigProblem] = []
    validated = _validate_hooks(hooks, path_prefix, None if channel_kinds is None else set(channel_kinds), problems)
    if problems:
        raise ConfigError(problems)
    return validated


def hooks_json_schema() -> dict[str, Any]:
    """The JSON Schema of the whole config file, for editors (`manage.py hooks_schema`)."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **GatewayConfig.model_json_schema()}


# --- validation steps ---------------------------------------------------------------

_Model = TypeVar("_Model", bound=BaseModel)


def _validate_hooks(
    raw_hooks: Sequence[Any], path: str, channel_names: Collection[str] | None, problems: list[ConfigProblem]
) -> list[HookConfig]:
    """Validate each hook, name the unnamed, then check the references between one agent's hooks."""
    hooks: list[tuple[str, Any]] = []
    for index, raw in enumerate(raw_hooks):
        hook_path = f"{path}[{index}]"
        hook = _validate_tagged(raw, hook_path, HOOK_CONFIG_MODELS, "hook", problems)
        if hook is not None:
            hook.name = hook.name or f"{hook.kind}-{index + 1}"
            hooks.append((hook_path, hook))
    _check_unique_names(((hook_path, hook.name) for hook_path, hook in hooks), problems)
    if len(hooks) == len(raw_hooks):  # else the gate that ask_via names may be the invalid hook
        _check_ask_via(hooks, problems)
    if channel_names is not None:
        _check_gate_channels(hooks, channel_names, problems)
    return [hook for _, hook in hooks]


def _check_ask_via(hooks: list[tuple[str, Any]], problems: list[ConfigProblem]) -> None:
    gates = sorted(hook.name for _, hook in hooks if isinstance(hook, ApprovalGateConfig))
    known = f"its approval gates: {', '.join(gates)}" if gates else "it has none"
    for hook_path, hook in hooks:
        if isinstance(hook, PolicyConfig) and hook.ask_via is not None and hook.ask_via not in gates:
            message = f"no approval_gate named {hook.ask_via!r} in this agent; {known}"
            problems.append(ConfigProblem(f"{hook_path}.ask_via", message))


def _check_gate_channels(
    hooks: list[tuple[str, Any]], channel_names: Collection[str], problems: list[ConfigProblem]
) -> None:
    known = f"known channels: {', '.join(sorted(channel_names))}" if channel_names else "no channels are configured"
    for hook_path, hook in hooks:
        if not isinstance(hook, ApprovalGateConfig):
            continue
        references = [(f"{hook_path}.channel", hook.channel)]
        if hook.escalate_to is not None:
            references.append((f"{hook_path}.escalate_to.channel", hook.escalate_to.channel))
        for reference_path, name in references:
            if name not in channel_names:
                problems.append(ConfigProblem(reference_path, f"unknown channel {name!r}; {known}"))


def _validate_tagged(
    raw: Any, path: str, models: Mapping[str, type[_Model]], what: str, problems: list[ConfigProblem]
) -> _Model | None:
    """Validate a mapping with the model its `kind` names; unknown kinds are one problem, not a union's worth."""
    if not isinstance(raw, Mapping):
        problems.append(ConfigProblem(path, "must be a mapping with a `kind` key"))
        return None
    kind = raw.get("kind")
    known = f"known kinds: {', '.join(models)}"
    if kind is None:
        problems.append(ConfigProblem(f"{path}.kind", f"is required; {known}"))
    elif not isinstance(kind, str) or kind not in models:
        problems.append(ConfigProblem(f"{path}.kind", f"unknown {what} kind {kind!r}; {known}"))
    else:
        return _validate_model(models[kind], raw, path, problems)
    return None


def _validate_model(model: type[_Model], raw: Any, path: str, problems: list[ConfigProblem]) -> _Model | None:
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        problems.extend(ConfigProblem(_join_loc(path, error["loc"]), _message(error, model)) for error in exc.errors())
        return None


def _list_at(mapping: Mapping[Any, Any], key: str, path: str, problems: list[ConfigProblem]) -> list[Any]:
    value = mapping.get(key, [])
    if isinstance(value, list):
        return value
    problems.append(ConfigProblem(path, "must be a list"))
    return []


def _raw_names(raw_items: Sequence[Any], path: str) -> list[tuple[str, str]]:
    """(path, name) of each item that has a string name, valid or not."""
    return [
        (f"{path}[{index}]", raw["name"])
        for index, raw in enumerate(raw_items)
        if isinstance(raw, Mapping) and isinstance(raw.get("name"), str)
    ]


def _check_unique_names(named: Iterable[tuple[str, str]], problems: list[ConfigProblem]) -> None:
    """Report each (path, name) whose name an earlier one has, at `<path>.name`."""
    first_path_of: dict[str, str] = {}
    for path, name in named:
        if name in first_path_of:
            problems.append(ConfigProblem(f"{path}.name", f"{name!r} is already used by {first_path_of[name]}"))
        first_path_of.setdefault(name, path)


# --- ${NAME} substitution -------------------------------------------------------------

_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _substitute_environment(value: Any, path: str, environ: Mapping[str, str], problems: list[ConfigProblem]) -> Any:
    """Replace `${NAME}` in every string of a parsed document, recording missing variables by path."""
    if isinstance(value, str):

        def replace(match: re.Match[str]) -> str:
            name, fallback = match.groups()
            found = environ.get(name)
            if fallback is not None and not found:  # `${NAME:-fallback}`: unset or empty
                return fallback
            if found is None:
                problems.append(ConfigProblem(path or FILE, f"environment variable {name} is not set"))
                return match.group(0)
            return found

        return _ENV_REFERENCE.sub(replace, value)
    if isinstance(value, Mapping):
        return {key: _substitute_environment(item, _join(path, key), environ, problems) for key, item in value.items()}
    if isinstance(value, list):
        return [
            _substitute_environment(item, _join(path, index), environ, problems) for index, item in enumerate(value)
        ]
    return value


# --- YAML -------------------------------------------------------------------------------


class _UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that refuses a key given twice in one mapping (PyYAML would keep the last)."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` may be overridden key by key
            continue
        key = loader.construct_object(key_node, deep=True)
        if isinstance(key, Hashable) and key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


# --- pydantic errors as paths and sentences ---------------------------------------------

_FIXED_MESSAGES = {
    "missing": "is required",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
}
_TEMPLATES = {
    "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}",
    "less_than": "must be < {lt}",
    "less_than_equal": "must be <= {le}",
    "string_too_long": "must be at most {max_length} characters",
    "too_long": "must have at most {max_length} items",
    "literal_error": "must be {expected}",
}


def _message(error: ErrorDetails, model: type[BaseModel]) -> str:
    """Pydantic's error as a short sentence about the value at its path."""
    kind, ctx = error["type"], error.get("ctx", {})
    if kind in _FIXED_MESSAGES:
        return _FIXED_MESSAGES[kind]
    if kind in _TEMPLATES:
        return _TEMPLATES[kind].format(**{key: _plain_number(value) for key, value in ctx.items()})
    if kind == "value_error":
        return str(ctx["error"])
    if kind in ("string_too_short", "too_short"):
        unit = "characters" if kind == "string_too_short" else "items"
        return "must not be empty" if ctx["min_length"] == 1 else f"must have at least {ctx['min_length']} {unit}"
    if kind == "string_pattern_mismatch" and ctx["pattern"] == SLUG:
        return "must be a slug: lowercase letters, digits, '-' and '_', starting with a letter or digit"
    if kind == "string_pattern_mismatch":
        return f"must match {ctx['pattern']}"
    if kind == "extra_forbidden":
        return _unknown_key_message(model, error["loc"])
    return error["msg"][:1].lower() + error["msg"][1:]


def _plain_number(value: Any) -> Any:
    """`ge=0` on a float field comes back as 0.0; say 0."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _unknown_key_message(model: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    owner = _model_at(model, loc[:-1])
    if owner is None:
        return "unknown key"
    allowed = list(owner.model_fields)
    close = [repr(key) for key in difflib.get_close_matches(str(loc[-1]), allowed, n=2)]
    return (
        f"unknown key; did you mean {' or '.join(close)}?" if close else f"unknown key; allowed: {', '.join(allowed)}"
    )


def _model_at(model: type[BaseModel], loc: Sequence[int | str]) -> type[BaseModel] | None:
    """The model of the mapping at `loc` inside `model`, if it is a model."""
    current: Any = model
    for part in loc:
        if isinstance(part, int) and get_origin(current) is list:
            current = get_args(current)[0]
        elif isinstance(part, str) and _is_model(current) and part in current.model_fields:
            current = _without_none(current.model_fields[part].annotation)
        else:
            return None
    return current if _is_model(current) else None


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _without_none(annotation: Any) -> Any:
    """`X | None` -> X; anything else unchanged."""
    if get_origin(annotation) in (Union, types.UnionType):
        others = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(others) == 1:
            return others[0]
    return annotation


def _join_loc(path: str, loc: Sequence[int | str]) -> str:
    for part in loc:
        path = _join(path, part)
    return path or FILE


def _join(path: str, part: Any) -> str:
    """`agents` + 0 -> `agents[0]`; `agents[0]` + `name` -> `agents[0].name`."""
    if isinstance(part, int):
        return f"{path}[{part}]"
    return f"{path}.{part}" if path else str(part)
