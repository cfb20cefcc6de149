"""The hook kinds, and the validation and building of an agent's hook list.

`HOOK_KINDS` is the one list of kinds: a kind is one module under
`hooks/builtin/` (its config model and its hook class) plus one line here.
Everything else that names kinds — the config file's schema, the error
messages, the admin — is derived from it. Each class is checked when it is
loaded (Django-checks style), so a broken kind fails at import, not at the
first tool call.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Annotated, Any, Union

from django.utils.module_loading import import_string
from pydantic import BaseModel, Field

from gateway_utils.configfile import ConfigError, ConfigProblem, check_unique_names, validate_tagged
from gateway_utils.outbound import OutboundRefused, check_url
from hooks.base import EVENTS, Hook
from hooks.config import HookConfigBase

# kind -> dotted path of its hook class. File order is the order kinds are listed in messages.
HOOK_KINDS: dict[str, str] = {
    "approval_gate": "hooks.builtin.approval_gate.ApprovalGate",
    "policy": "hooks.builtin.policy.PolicyHook",
    "readonly_guard": "hooks.builtin.readonly_guard.ReadonlyGuard",
    "rate_limit": "hooks.builtin.rate_limit.RateLimit",
    "redact": "hooks.builtin.redact.Redact",
    "command": "hooks.builtin.command.CommandHook",
    "webhook": "hooks.builtin.webhook.WebhookHook",
    "truncate_result": "hooks.builtin.truncate_result.TruncateResult",
    "inject_tool_result": "hooks.builtin.inject_tool_result.InjectToolResult",
    "retry_on_error": "hooks.builtin.retry_on_error.RetryOnError",
    "turn_limit": "hooks.builtin.turn_limit.TurnLimit",
}


def _checked(kind: str, cls: Any) -> type[Hook]:
    """Refuse a class that cannot be a hook kind, naming what is wrong."""
    name = getattr(cls, "__name__", repr(cls))
    if not isinstance(cls, type) or not issubclass(cls, Hook):
        raise TypeError(f"hook kind {kind!r}: {name} is not a Hook subclass")
    if getattr(cls, "kind", None) != kind:
        raise TypeError(f"hook kind {kind!r}: {name}.kind must be {kind!r}")
    events = getattr(cls, "events", ())
    if not events or any(e not in EVENTS for e in events):
        raise TypeError(f"hook kind {kind!r}: {name}.events must be a non-empty tuple of {EVENTS}")
    model = getattr(cls, "config_model", None)
    if not isinstance(model, type) or not issubclass(model, HookConfigBase):
        raise TypeError(f"hook kind {kind!r}: {name}.config_model must be a HookConfigBase model")
    if tuple(model.EVENTS) != tuple(events):
        raise TypeError(f"hook kind {kind!r}: {name}.events must be the events its config_model allows")
    if cls.run is Hook.run:
        raise TypeError(f"hook kind {kind!r}: {name} must implement run()")
    return cls


HOOK_CLASSES: dict[str, type[Hook]] = {kind: _checked(kind, import_string(path)) for kind, path in HOOK_KINDS.items()}
HOOK_CONFIG_MODELS: dict[str, type[HookConfigBase]] = {kind: cls.config_model for kind, cls in HOOK_CLASSES.items()}
KNOWN_KINDS: tuple[str, ...] = tuple(HOOK_KINDS)
# Kinds that can suspend a call for a human; a `gate` reference must name one of these.
ASKING_KINDS: tuple[str, ...] = tuple(kind for kind, cls in HOOK_CLASSES.items() if cls.ask_spec is not Hook.ask_spec)

# One hook of any kind, told apart by `kind` (for the config file's JSON Schema).
HookConfig = Annotated[Union[tuple(HOOK_CONFIG_MODELS.values())], Field(discriminator="kind")]  # type: ignore[misc]


def build(configs: list[BaseModel]) -> list[Hook]:
    """Instantiate validated hook configs, sorted by priority (stable: file order on ties)."""
    built = [HOOK_CLASSES[config.kind](config) for config in configs]  # type: ignore[attr-defined]
    return sorted(built, key=lambda hook: hook.priority)


# --------------------------------------------------------------------------- validation


def validate_agent_hooks(
    hooks: Any,
    *,
    channel_names: Collection[str] | None = None,
    path_prefix: str = "hooks",
    check_outbound: bool = True,
) -> list[HookConfigBase]:
    """Validate one agent's hook list and fill in default names; raise ConfigError naming every problem.

    `channel_names` are the channels the hooks may name; None skips that check.
    Problems have paths under `path_prefix` (`agents[0].hooks` inside a whole file).
    `check_outbound` refuses URLs the outbound guard refuses and values this deployment
    cannot honour (`deployment_problems`) — a hook list being applied; a stored list being
    built skips both (the guard checks every call).
    """
    if not isinstance(hooks, list):
        raise ConfigError([ConfigProblem(path_prefix, "must be a list")])
    problems: list[ConfigProblem] = []
    validated = collect_hooks(hooks, path_prefix, channel_names, problems, check_outbound=check_outbound)
    if problems:
        raise ConfigError(problems)
    return validated


def collect_hooks(
    raw_hooks: list[Any],
    path: str,
    channel_names: Collection[str] | None,
    problems: list[ConfigProblem],
    *,
    check_outbound: bool = True,
) -> list[HookConfigBase]:
    """Validate each hook, name the unnamed, then check the references between one agent's hooks
    and (with `check_outbound`) the URLs they will call.

    Problems are appended to `problems`; the valid hooks are returned.
    """
    hooks: list[tuple[str, HookConfigBase]] = []
    for index, raw in enumerate(raw_hooks):
        hook_path = f"{path}[{index}]"
        hook = validate_tagged(raw, hook_path, HOOK_CONFIG_MODELS, "hook", problems)
        if hook is not None:
            hook.name = hook.name or f"{hook.kind}-{index + 1}"
            hooks.append((hook_path, hook))
    check_unique_names(((hook_path, hook.name) for hook_path, hook in hooks), problems)
    if len(hooks) == len(raw_hooks):  # else the gate a reference names may be the invalid hook
        _check_gate_references(hooks, problems)
    if channel_names is not None:
        _check_channel_references(hooks, channel_names, problems)
    if check_outbound:
        _check_outbound_urls(hooks, problems)
        for hook_path, hook in hooks:
            problems.extend(ConfigProblem(f"{hook_path}.{key}", message) for key, message in hook.deployment_problems())
    return [hook for _, hook in hooks]


def _check_outbound_urls(hooks: list[tuple[str, HookConfigBase]], problems: list[ConfigProblem]) -> None:
    for hook_path, hook in hooks:
        for key, url in hook.outbound_urls():
            try:
                check_url(url)
            except OutboundRefused as exc:
                problems.append(ConfigProblem(f"{hook_path}.{key}", f"refused: {exc.message}"))


def _check_gate_references(hooks: list[tuple[str, HookConfigBase]], problems: list[ConfigProblem]) -> None:
    gates = sorted(hook.name for _, hook in hooks if hook.kind in ASKING_KINDS)
    known = f"its approval gates: {', '.join(gates)}" if gates else "it has none"
    kinds = " or ".join(ASKING_KINDS)
    for hook_path, hook in hooks:
        for reference in hook.references():
            if reference.to == "gate" and reference.name not in gates:
                message = f"no {kinds} named {reference.name!r} in this agent; {known}"
                problems.append(ConfigProblem(f"{hook_path}.{reference.path}", message))


def _check_channel_references(
    hooks: list[tuple[str, HookConfigBase]], channel_names: Collection[str], problems: list[ConfigProblem]
) -> None:
    known = f"known channels: {', '.join(sorted(channel_names))}" if channel_names else "no channels are configured"
    for hook_path, hook in hooks:
        for reference in hook.references():
            if reference.to == "channel" and reference.name not in channel_names:
                problems.append(
                    ConfigProblem(f"{hook_path}.{reference.path}", f"unknown channel {reference.name!r}; {known}")
                )
