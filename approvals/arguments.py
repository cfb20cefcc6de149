"""Argument paths: what an approver may edit, and edits applied over arguments (docs/approving.md).

A path names a value inside a call's arguments by its keys joined with dots
(`amount`, `shipping.address.city`); list items are named by their index
(`items.0`). Edits are `{path: new value}` and are applied over the agent's
own arguments, so a masked (redacted) value the gateway never stored is kept
as the agent sent it — which is why no path at, above or below a masked value
is ever editable.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
from collections.abc import Iterable
from typing import Any

from django.conf import settings

_MISSING = object()


def get_path(args: Any, path: str) -> Any:
    """The value at `path`, or `_MISSING`."""
    value = args
    for key in path.split("."):
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            return _MISSING
    return value


def has_path(args: Any, path: str) -> bool:
    return get_path(args, path) is not _MISSING


def with_edits(args: dict[str, Any], edits: dict[str, Any]) -> dict[str, Any]:
    """A copy of `args` with each edited path set to its new value (missing objects on the way are made)."""
    if not edits:
        return args
    result = copy.deepcopy(args)
    for path, new in edits.items():
        keys = path.split(".")
        parent: Any = result
        for key in keys[:-1]:
            if isinstance(parent, list) and key.isdigit() and int(key) < len(parent):
                parent = parent[int(key)]
                continue
            if not isinstance(parent.get(key) if isinstance(parent, dict) else None, (dict, list)):
                parent[key] = {}
            parent = parent[key]
        last = keys[-1]
        if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
            parent[int(last)] = copy.deepcopy(new)
        else:
            parent[last] = copy.deepcopy(new)
    return result


def masked_paths(real: Any, stored: Any, prefix: str = "") -> set[str]:
    """The paths whose stored value differs from the real one: what a mask (redact) replaced."""
    if isinstance(real, dict) and isinstance(stored, dict) and set(real) == set(stored):
        found: set[str] = set()
        for key in real:
            found |= masked_paths(real[key], stored[key], f"{prefix}{key}.")
        return found
    if isinstance(real, list) and isinstance(stored, list) and len(real) == len(stored):
        found = set()
        for index, (a, b) in enumerate(zip(real, stored, strict=True)):
            found |= masked_paths(a, b, f"{prefix}{index}.")
        return found
    return set() if real == stored else {prefix.rstrip(".") or "*"}


def _touches(path: str, masked: str) -> bool:
    return masked == "*" or path == masked or masked.startswith(path + ".") or path.startswith(masked + ".")


def editable_paths(
    allow_edit: bool | Iterable[str], *, stored_args: dict[str, Any], masked: set[str]
) -> list[str]:
    """The paths an approver of this call may change: the gate's `allow_edit` (true: every top-level
    argument), limited to paths the call has, minus any at, above or below a masked value."""
    if allow_edit is False or not allow_edit:
        return []
    candidates = sorted(k for k in stored_args if "." not in k) if allow_edit is True else list(allow_edit)
    return [
        path
        for path in candidates
        if has_path(stored_args, path) and not any(_touches(path, m) for m in masked)
    ]


def args_fingerprint(tool_name: str, args: dict[str, Any]) -> str:
    """A keyed hash of a call's arguments, for a grant on "the same arguments". Keyed with the
    SECRET_KEY, so a stored fingerprint cannot be used to guess a redacted value offline."""
    canonical = json.dumps([tool_name, args], sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    key = hashlib.sha256(("grant-fingerprint:" + settings.SECRET_KEY).encode()).digest()
    return hmac.new(key, canonical.encode(), hashlib.sha256).hexdigest()
