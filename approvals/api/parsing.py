"""What the API accepts as a request body (docs/reference/api.md, "Limits"): its media types, and JSON read
strictly — the same rules on the ASGI hot path (`approvals.api.asgi`), in DRF's views (`JsonParser`, the
default parser) and in Claude Code's hook view.

Python's `json` accepts more than JSON: `NaN`, `Infinity` and `-Infinity`, and numbers such as `1e400`
that overflow to infinity. None of them can be stored (PostgreSQL's `jsonb` refuses them) or sent on to a
webhook as JSON, so they are refused here, as a 400, before anything is stored. So is nesting deeper than
`MAX_DEPTH`, which would otherwise exhaust the stack of whatever walks the value next.
"""

from __future__ import annotations

import json
import math
from typing import Any

from django.conf import settings
from rest_framework import parsers
from rest_framework.exceptions import ParseError

MAX_DEPTH = 100  # arrays and objects inside each other; real tool arguments stay far below it

JSON_MEDIA_TYPES = frozenset({"application/json"})
YAML_MEDIA_TYPES = frozenset({"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"})


def media_type(content_type: str) -> str:
    """`application/json` of `Application/JSON; charset=utf-8`: the type without its parameters, lower case."""
    return content_type.partition(";")[0].strip().lower()


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (JSON has no NaN, Infinity or -Infinity)")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text} is too large a number: numbers must be finite (at most about 1.8e308)")
    return value


def _too_deep(value: Any, text: str) -> bool:
    """Whether arrays and objects nest more than MAX_DEPTH levels (walked without recursion). A text with
    no more brackets than that cannot, whatever its strings hold: almost every body is settled by a count."""
    if not isinstance(value, (dict, list)) or text.count("[") + text.count("{") <= MAX_DEPTH:
        return False
    level, depth = [value], 1
    while level:
        if depth > MAX_DEPTH:
            return True
        level = [
            child
            for container in level
            for child in (container.values() if isinstance(container, dict) else container)
            if isinstance(child, (dict, list))
        ]
        depth += 1
    return False


# One decoder for every body: `json.loads` with arguments builds a new one (and its scanner) per call.
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite)


def json_loads(raw: bytes | str) -> Any:
    """A request body's JSON, strictly; ValueError saying what is wrong (the API answers 400 `malformed`)."""
    if isinstance(raw, (bytes, bytearray)):
        raw = raw.decode(json.detect_encoding(raw), "surrogatepass")  # as json.loads decodes bytes
    try:
        value = _DECODER.decode(raw)
    except RecursionError:
        raise ValueError(f"the JSON is nested more than {MAX_DEPTH} levels deep") from None
    if _too_deep(value, raw):
        raise ValueError(f"the JSON is nested more than {MAX_DEPTH} levels deep")
    return value


class JsonParser(parsers.JSONParser):
    """DRF's JSON parser with the API's reading of JSON (`json_loads`): the default of every DRF view."""

    def parse(self, stream, media_type=None, parser_context=None):
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            return json_loads(stream.read().decode(encoding))
        except ValueError as exc:  # UnicodeDecodeError is one
            raise ParseError(f"JSON parse error - {exc}") from None
