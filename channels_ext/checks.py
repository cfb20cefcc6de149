"""System checks for configured chat channels (`manage.py check --database default`, `migrate`).

Channels live in the database (written by `apply_config` or the admin), so
this is a `database`-tagged check: Django runs it only when it is given
databases to inspect, and it skips a database whose tables do not exist yet
(`migrate` runs checks before it migrates). Every kind is validated the same
way, against its kind's config model, exactly as `get_adapter` will at
delivery time. Messages name the channel and the key, never a value.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.core.checks import CheckMessage, Error
from pydantic import BaseModel, ValidationError

from approvals import selectors
from gateway_contract import CHANNEL_KINDS, get_config_model, missing_requirement

E001 = "channels_ext.E001"  # a key of a channel's config is missing, empty or invalid
E002 = "channels_ext.E002"  # a channel's kind has no adapter
E003 = "channels_ext.E003"  # a channel's kind needs a vendor SDK that is not installed

# Channels are read-only in the admin: the config file is where they change.
_FIX = "in the config file and run `python manage.py apply_config FILE`"


def check_channel_configs(
    app_configs: Sequence[Any] | None = None, databases: Iterable[str] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Report every configured channel whose config its adapter would refuse."""
    if not databases:
        return []
    messages: list[CheckMessage] = []
    for alias in databases:
        for channel in selectors.channel_configs(using=alias):  # (none in a database not migrated yet)
            messages.extend(_channel_problems(channel.name, channel.kind, channel.config, obj=channel))
    return messages


def _channel_problems(name: str, kind: str, config: Any, *, obj: Any) -> list[CheckMessage]:
    try:
        model = get_config_model(kind)
    except ValueError:
        return [
            Error(
                f"Channel {name!r} has kind {kind!r}, which no adapter handles.",
                hint=f"Use one of: {', '.join(sorted(CHANNEL_KINDS))}.",
                obj=obj,
                id=E002,
            )
        ]
    missing = missing_requirement(kind)
    sdk = [
        Error(
            f"Channel {name!r} has kind {kind!r}, whose adapter needs {missing}, which is not installed.",
            hint=f"Install it: `pip install -r requirements-channels.txt` pins {missing}.",
            obj=obj,
            id=E003,
        )
    ] if missing is not None else []  # fmt: skip
    return sdk + _key_problems(name, kind, model, config, obj=obj)


def _key_problems(name: str, kind: str, model: type[BaseModel], config: Any, *, obj: Any) -> list[CheckMessage]:
    if not isinstance(config, dict):
        return [
            Error(
                f"Channel {name!r} has a config that is not a mapping of keys.",
                hint=f"Set the channel's keys {_FIX}.",
                obj=obj,
                id=E001,
            )
        ]
    data = {"name": name, "kind": kind, **config}  # as get_adapter() builds it
    try:
        validated = model.model_validate(data)
    except ValidationError as err:
        return [_key_problem(name, kind, model, problem, obj=obj) for problem in err.errors()]
    problems = [
        _empty(name, kind, key, obj=obj)
        for key, field in model.model_fields.items()
        if field.is_required() and isinstance(getattr(validated, key), str) and not getattr(validated, key).strip()
    ]
    return problems


def _key_problem(name: str, kind: str, model: type[BaseModel], problem: Any, *, obj: Any) -> CheckMessage:
    key = ".".join(str(part) for part in problem["loc"]) or "(config)"
    kind_of_problem = problem["type"]
    if kind_of_problem == "missing":
        return Error(
            f"Channel {name!r} is missing key {key!r}.",
            hint=f"Add `{key}` to channel {name!r} {_FIX}.",
            obj=obj,
            id=E001,
        )
    if kind_of_problem == "string_too_short" and isinstance(problem.get("input"), str) and not problem["input"].strip():
        return _empty(name, kind, key, obj=obj)
    if kind_of_problem == "extra_forbidden":
        known = ", ".join(k for k in model.model_fields if k not in ("name", "kind"))
        return Error(
            f"Channel {name!r} has key {key!r}, which a {kind} channel does not take.",
            hint=f"Remove it; a {kind} channel takes: {known or 'no keys'}.",
            obj=obj,
            id=E001,
        )
    # pydantic's own sentence ("Input should be a valid string"); the input itself is never shown.
    return Error(
        f"Channel {name!r} has an invalid key {key!r}: {problem['msg']}.",
        hint=f"Correct `{key}` for channel {name!r} {_FIX}.",
        obj=obj,
        id=E001,
    )


def _empty(name: str, kind: str, key: str, *, obj: Any) -> CheckMessage:
    return Error(
        f"Channel {name!r} has an empty key {key!r}.",
        hint=(
            f"Give `{key}` a value {_FIX}; if the file says `${{NAME}}`, "
            "check that the environment variable NAME is set and not blank."
        ),
        obj=obj,
        id=E001,
    )
