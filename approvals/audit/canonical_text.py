"""The canonical text of a value: what every chained row and every decision row is hashed and signed
through (docs/audit.md). Its text must never change, or every stored entry and MAC stops verifying."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid
from collections.abc import Callable, Mapping
from json.encoder import encode_basestring_ascii as _string  # (C) what json.dumps makes of a str
from typing import Any

import orjson


def canonical(value: Any) -> str:
    """`value` as one canonical JSON text: keys sorted, no spaces, ASCII, and numbers as
    normalised decimals — so a row hashes the same before it is stored and after
    PostgreSQL's jsonb has rewritten its numbers (`1e20` comes back as `100000000000000000000`).

    Every chained row and every decision row is hashed through here — several times per request
    created, decided or expired, and once per waiter woken — so the common types are dispatched by
    exact type first (`_EXACT`); anything else (a `str` or `int` subclass, a tuple, a Decimal) takes
    `_canonical_other`. Both give the same text for the same value."""
    write = _EXACT.get(type(value))
    return write(value) if write is not None else _canonical_other(value)


def _canonical_other(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (int, float, decimal.Decimal)):
        return _number(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, dt.datetime):
        return _moment(value)
    if isinstance(value, uuid.UUID):
        return f'"{value}"'
    if isinstance(value, Mapping):
        return _mapping(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join([canonical(v) for v in value]) + "]"
    raise TypeError(f"cannot hash a {type(value).__name__}")


def _mapping(value: Mapping[Any, Any]) -> str:
    keys = list(value)
    if all(type(k) is str for k in keys):  # (the common case: distinct text keys sort as themselves)
        keys.sort()
        return "{" + ",".join([_string(k) + ":" + canonical(value[k]) for k in keys]) + "}"
    items = sorted((_key(k), v) for k, v in value.items())
    return "{" + ",".join([_string(k) + ":" + canonical(v) for k, v in items]) + "}"


def _int(value: int) -> str:
    if value % 10:  # no trailing zero: normalising changes nothing (`_number` keeps every digit)
        return str(value)
    return _number(value)


def _moment(value: dt.datetime) -> str:
    return '"' + value.astimezone(dt.timezone.utc).isoformat(timespec="microseconds") + '"'


_EXACT: dict[type, Callable[[Any], str]] = {
    str: _string,
    dict: _mapping,
    list: lambda value: "[" + ",".join([canonical(v) for v in value]) + "]",
    type(None): lambda value: "null",
    bool: lambda value: "true" if value else "false",
    int: _int,
    dt.datetime: _moment,
    uuid.UUID: lambda value: f'"{value}"',
}


def _key(key: Any) -> str:
    """A mapping key as JSON makes it (what the stored row will have)."""
    if isinstance(key, str):
        return key
    return json.dumps(key)  # True -> "true", 1 -> "1", None -> "null", as json.dumps does for keys


def _number(value: int | float | decimal.Decimal) -> str:
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return json.dumps(repr(value))
        number = decimal.Decimal(repr(value))
    else:
        number = decimal.Decimal(value)
    if number.is_zero():
        return "0"
    digits = len(number.as_tuple().digits)
    return str(number.normalize(decimal.Context(prec=max(28, digits))))


def as_json_writes_it(value: Any) -> bytes:
    """The text a JSON writer makes of a value `json.loads` made, keys sorted and no spaces (orjson: one call,
    ~7x json's) — `canonical`'s text where every string is ASCII and no number is one `canonical` writes
    otherwise (an integer ending in 0: `100` is `1E+2`; a float: `2.0` is `2`, `1e+20` is `1E+20`). So
    where it is a text a MAC signs, it is the value's canonical text: a faithful writer's text that is a
    canonical text is that of the one value it reads back as. (A notification's state is checked through
    it first: `signing.told_decision_verifies`.) TypeError for what orjson does not write (an integer
    past 64 bits)."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


_ORJSON_INTS = range(-(2**63), 2**64)  # the integers orjson writes (past them: TypeError)
_WRITTEN_ALIKE = frozenset({str, type(None), bool})  # what orjson and `canonical` write alike (ASCII text)


def with_canonical_numbers(value: Any) -> Any:
    """`value` (as `json.loads` made it) with each number `as_json_writes_it` writes otherwise than
    `canonical` — an integer ending in 0, one past 64 bits, a float — standing in as its canonical text (an
    `orjson.Fragment`, written as it is): `as_json_writes_it` of the result is then `canonical`'s text of
    `value` wherever every string is ASCII, still in one call. Returns `value` itself if it holds no such
    number. (So a notification whose request has an amount of 100, or an agent whose id is 10, is checked
    without `canonical`'s walk: `signing.told_decision_verifies`.)"""
    kind = type(value)
    if kind is dict:
        fixed = None
        for key, item in value.items():
            if type(item) in _WRITTEN_ALIKE:
                continue
            new = with_canonical_numbers(item)
            if new is not item:
                if fixed is None:
                    fixed = dict(value)
                fixed[key] = new
        return value if fixed is None else fixed
    if kind is int:
        if (value % 10 or not value) and value in _ORJSON_INTS:
            return value
        return orjson.Fragment(canonical(value))
    if kind is float:
        return orjson.Fragment(canonical(value))
    if kind is list:
        items = [item if type(item) in _WRITTEN_ALIKE else with_canonical_numbers(item) for item in value]
        return value if all(new is old for new, old in zip(items, value)) else items
    return value
