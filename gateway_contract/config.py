"""What every channel's config model has, and how a kind marks its secrets."""

from __future__ import annotations

from typing import Any

from django.utils.module_loading import import_string
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo
from pydantic_core import PydanticCustomError, PydanticUndefined

from gateway_contract.registry import kind_spec
from gateway_utils.configfile import SLUG


def secret(default: Any = PydanticUndefined, **kwargs: Any) -> Any:
    """A config key that holds a secret (a token, a signing key): masked wherever a channel is shown."""
    return Field(default, json_schema_extra={"secret": True}, **kwargs)


def _no_null_defaults(schema: dict[str, Any]) -> None:
    """JSON Schema: keys whose default is None (mode-dependent, see `needed_in_mode`) show no `default: null`."""
    for prop in schema.get("properties", {}).values():
        if "default" in prop and prop["default"] is None:
            del prop["default"]


class ChannelConfigBase(BaseModel):
    """Keys every channel has; each kind adds its own. Unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_no_null_defaults)
    name: str = Field(pattern=SLUG, max_length=64)
    kind: str
    # The team the channel belongs to (docs/approving.md, "Teams"); left out: the default team.
    team: str = Field(default="default", pattern=SLUG, max_length=64)


def needed_in_mode(value: Any, info: ValidationInfo, mode: str) -> Any:
    """Before-validator of a key that channels in `mode` must have and others may leave out.

    The key's default is None (not given): "is required" in `mode`, "" elsewhere. `mode`
    is declared before these keys, so `info.data` already holds it (absent if invalid).
    """
    if value is None:
        if info.data.get("mode") == mode:
            raise PydanticCustomError("missing", "Field required")
        return ""
    return value


def not_blank_in_mode(value: str, info: ValidationInfo, mode: str) -> str:
    """After-validator: in `mode` the key must not be blank."""
    if info.data.get("mode") == mode and not value.strip():
        raise PydanticCustomError("string_too_short", "String should have at least 1 character", {"min_length": 1})
    return value


def secret_keys(model: type[BaseModel]) -> frozenset[str]:
    """The keys of a channel config model marked with `secret(...)`."""
    return frozenset(
        name
        for name, field in model.model_fields.items()
        if isinstance(field.json_schema_extra, dict) and field.json_schema_extra.get("secret")
    )


def get_config_model(kind: str) -> type[ChannelConfigBase]:
    """The config model of a channel kind (without importing its adapter)."""
    return import_string(kind_spec(kind).config)
