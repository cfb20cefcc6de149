"""Helpers shared by the config validator's tests (tests/hooks/test_schema_*.py)."""

import textwrap
from typing import Any

import pytest

from approvals.config_schema import parse_config_text
from gateway_utils.configfile import ConfigError, ConfigProblem
from hooks.registry import validate_agent_hooks


def problems_of(text: str, environ: dict[str, str] | None = None) -> list[ConfigProblem]:
    with pytest.raises(ConfigError) as excinfo:
        parse_config_text(textwrap.dedent(text), environ=environ or {})
    return excinfo.value.problems


def hook_problems(*hooks: Any) -> list[ConfigProblem]:
    with pytest.raises(ConfigError) as excinfo:
        validate_agent_hooks(list(hooks), channel_names={"web"})
    return excinfo.value.problems


def gate(**keys: Any) -> dict[str, Any]:
    return {"kind": "approval_gate", "channel": "web", **keys}
