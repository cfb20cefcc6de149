"""Argument paths: what an approver may edit, and edits applied over arguments (docs/approving.md).

A path names a value inside a call's arguments by its keys joined with dots
(`amount`, `shipping.address.city`); list items are named by their index
(`items.0`). Edits are `{path: new value}` and are applied over the agent's
own arguments, so a masked (redacted) value the gateway never stored is kept
as the agent sent it — which is why no path at, above or below a masked value
is ever editable.

A repeat ask (the same idempotency key) is answered from what was stored: the
arguments as the hooks rewrote them, with masks. `mask_record` notes, when the
call is first asked, which paths hold masks (the paths, never the values) and
whether each masked value is the agent's own — then `replayed_args` puts it
back from the agent's repeated call — or one a hook rewrote or added, which
the gateway kept no copy of and cannot give back.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
from collections.abc import Iterable, Sequence
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


# How each JSON type an edited value can have (`hooks.base.EDIT_TYPES`) is asked for.
_LIKE = {
    "string": "text",
    "integer": "a whole number, like 1200",
    "number": "a number, like 12.5",
    "boolean": "true or false",
    "object": 'a JSON object, like {"key": "value"}',
    "array": "a JSON list, like [1, 2]",
    "any": 'JSON (text needs quotes: "like this")',
}


def json_type(value: Any) -> str:
    """The JSON type an edit of `value` must keep (`hooks.base.EDIT_TYPES`): a whole number is an `integer`, any
    other number a `number`; null, or a path the call does not have, takes `any` value."""
    return next((name for kind, name in _JSON_TYPES if isinstance(value, kind)), "any")


_JSON_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (dict, "object"), (list, "array"))


def edit_from_text(path: str, text: str, *, expected: str) -> Any:
    """The value an approver's typed `text` stands for, as JSON type `expected`; ValueError with a
    sentence for the approver if it cannot be one (docs/approving.md, "Types").

    Text for a `string` is the text itself — quotes are optional, and digits stay text; a JSON string
    (`"ACME"`, as the forms show the value) is its content. Anything else is read as JSON: `1200`
    for an `integer`, never `12.5` or `"1200"`; `true`/`false` (any case) for a `boolean`.
    """
    if expected == "string":
        try:
            parsed = _strict_json(text)
        except ValueError:
            return text
        return parsed if isinstance(parsed, str) else text
    candidate = text.strip()
    if expected == "boolean":
        candidate = candidate.lower()
    try:
        value = _strict_json(candidate)
    except ValueError:
        value = _UNREADABLE
    return checked_edit_value(path, value, expected=expected, shown=text)


def checked_edit_value(path: str, value: Any, *, expected: str, shown: str | None = None) -> Any:
    """`value` if it is of JSON type `expected`, else ValueError with a sentence for the approver."""
    if value is not _UNREADABLE and _is_json_type(value, expected):
        return value
    if shown is None:
        shown = json.dumps(value, ensure_ascii=False, default=str)
    shown = shown if len(shown) <= 60 else shown[:59] + "…"
    raise ValueError(f"The value for {path} must be {_LIKE[expected]}; {shown} is not.")


_UNREADABLE = object()


def _is_json_type(value: Any, expected: str) -> bool:
    if expected == "any":
        return True
    if expected == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return json_type(value) == expected


def _not_finite(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text} is too large")
    return value


def _strict_json(text: str) -> Any:
    """JSON as the API takes it: no NaN or Infinity, no number too large for a double."""
    return json.loads(text, parse_constant=_not_finite, parse_float=_finite_float)


KeyPath = tuple[str | int, ...]  # exact keys (list items by int index); () is the whole arguments


def masked_key_paths(real: Any, stored: Any, prefix: KeyPath = ()) -> list[KeyPath]:
    """The exact key paths whose stored value differs from the real one: what a mask (redact) replaced."""
    if isinstance(real, dict) and isinstance(stored, dict) and set(real) == set(stored):
        return [path for key in real for path in masked_key_paths(real[key], stored[key], (*prefix, key))]
    if isinstance(real, list) and isinstance(stored, list) and len(real) == len(stored):
        return [
            path
            for index, (a, b) in enumerate(zip(real, stored, strict=True))
            for path in masked_key_paths(a, b, (*prefix, index))
        ]
    return [] if real == stored else [prefix]


def dotted(path: KeyPath) -> str:
    """A key path as the dotted path people and `allow_edit` use (`*`: the whole arguments)."""
    return ".".join(str(key) for key in path) or "*"


def masked_paths(real: Any, stored: Any) -> set[str]:
    """The dotted paths whose stored value differs from the real one: what a mask (redact) replaced."""
    return {dotted(path) for path in masked_key_paths(real, stored)}


def _value_at(args: Any, path: Sequence[str | int]) -> Any:
    """The value at an exact key path, or `_MISSING`."""
    value = args
    for key in path:
        if isinstance(value, dict) and isinstance(key, str) and key in value:
            value = value[key]
        elif isinstance(value, list) and isinstance(key, int) and 0 <= key < len(value):
            value = value[key]
        else:
            return _MISSING
    return value


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON (`1` is not `1.0` nor `true`)."""
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def mask_record(
    *, own: dict[str, Any], answered: dict[str, Any], stored: dict[str, Any]
) -> dict[str, list[list[Any]]]:
    """Where the stored arguments hold masks, for a repeat ask to rebuild what runs: `agent`, the
    paths whose real value is the agent's own (`own`, as sent) and comes back from its repeated call;
    `hook`, those whose value a hook rewrote or added (`answered`), which nothing can give back.
    Paths only, never values."""
    record: dict[str, list[list[Any]]] = {"agent": [], "hook": []}
    for path in masked_key_paths(answered, stored):
        mine = _value_at(own, path)
        kept = mine is not _MISSING and _same(mine, _value_at(answered, path))
        record["agent" if kept else "hook"].append(list(path))
    return record


def replayed_args(
    stored: dict[str, Any], *, own: dict[str, Any], record: dict[str, list[list[Any]]]
) -> tuple[dict[str, Any], list[str]]:
    """The arguments a repeat ask answers: `stored` (as the hooks rewrote them, masked) with every
    masked value of the agent's own put back from `own` (the repeated call, the same body as the first:
    the idempotency check sees to it); and the dotted paths that stay masked (`record["hook"]`)."""
    result = copy.deepcopy(stored)
    for path in record.get("agent", []):
        value = _value_at(own, path)
        if value is _MISSING:  # cannot be: the body is the first one; keep the mask rather than guess
            continue
        if not path:
            result = copy.deepcopy(value)
            continue
        parent = _value_at(result, path[:-1])
        if isinstance(parent, dict | list):
            parent[path[-1]] = copy.deepcopy(value)
    return result, sorted(dotted(tuple(path)) for path in record.get("hook", []))


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
