"""Questions' answer schemas: the allowed subset of JSON Schema, its fields, and answers read and checked.

A question (docs/asking.md) carries an answer schema in a small subset of JSON Schema:

- one choice of N: `{"type": "string", "enum": [...]}`
- several choices: `{"type": "array", "items": {"type": "string", "enum": [...]}, "uniqueItems": true}`
- free text with a length limit: `{"type": "string", "maxLength": N}`
- a number with bounds: `{"type": "number" | "integer", "minimum": A, "maximum": B}`
- yes / no: `{"type": "boolean"}`
- a form of up to `MAX_FORM_FIELDS` of those: `{"type": "object", "properties": {...}, "required": [...]}`

The schema itself is checked against `META_SCHEMA` (and by `jsonschema` as a schema); an answer is
checked against it by `jsonschema`, on every channel, by the gateway (`approvals.services.questions`).

The core and every channel's cards share this module (a contract sits below both): the cards ask it
which fields to draw and read what a person typed (`answer_from_inputs`) — text as typed, turned into a
number or a yes/no where the field says so — and the gateway then validates the result. No I/O.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

MAX_FORM_FIELDS = 8
MAX_OPTIONS = 50
MAX_TEXT_LENGTH = 3000
# One answer without a form is read from the input of this name.
SINGLE_FIELD = "answer"
# A stored form's field names in the order they were asked (an annotation JSON Schema ignores).
ORDER_KEY = "x-field-order"

_TITLED = {"title": {"type": "string", "maxLength": 200}, "description": {"type": "string", "maxLength": 1000}}
_OPTIONS = {
    "type": "array",
    "minItems": 1,
    "maxItems": MAX_OPTIONS,
    "uniqueItems": True,
    "items": {"type": "string", "minLength": 1, "maxLength": 75},
}
_BOUND = {"type": "number"}

META_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$defs": {
        "choice": {
            "type": "object",
            "properties": {"type": {"const": "string"}, "enum": _OPTIONS, **_TITLED},
            "required": ["type", "enum"],
            "additionalProperties": False,
        },
        "choices": {
            "type": "object",
            "properties": {
                "type": {"const": "array"},
                "items": {
                    "type": "object",
                    "properties": {"type": {"const": "string"}, "enum": _OPTIONS},
                    "required": ["type", "enum"],
                    "additionalProperties": False,
                },
                "uniqueItems": {"const": True},
                "minItems": {"type": "integer", "minimum": 0, "maximum": MAX_OPTIONS},
                "maxItems": {"type": "integer", "minimum": 1, "maximum": MAX_OPTIONS},
                **_TITLED,
            },
            "required": ["type", "items"],
            "additionalProperties": False,
        },
        "text": {
            "type": "object",
            "properties": {
                "type": {"const": "string"},
                "maxLength": {"type": "integer", "minimum": 1, "maximum": MAX_TEXT_LENGTH},
                "minLength": {"type": "integer", "minimum": 0, "maximum": MAX_TEXT_LENGTH},
                **_TITLED,
            },
            "required": ["type", "maxLength"],
            "additionalProperties": False,
        },
        "number": {
            "type": "object",
            "properties": {
                "type": {"enum": ["number", "integer"]},
                "minimum": _BOUND,
                "maximum": _BOUND,
                **_TITLED,
            },
            "required": ["type"],
            "additionalProperties": False,
        },
        "yesno": {
            "type": "object",
            "properties": {"type": {"const": "boolean"}, **_TITLED},
            "required": ["type"],
            "additionalProperties": False,
        },
        "field": {
            "oneOf": [
                {"$ref": "#/$defs/choice"},
                {"$ref": "#/$defs/choices"},
                {"$ref": "#/$defs/text"},
                {"$ref": "#/$defs/number"},
                {"$ref": "#/$defs/yesno"},
            ]
        },
        "form": {
            "type": "object",
            "properties": {
                "type": {"const": "object"},
                "properties": {
                    "type": "object",
                    "minProperties": 1,
                    "maxProperties": MAX_FORM_FIELDS,
                    "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]{0,39}$"},
                    "additionalProperties": {"$ref": "#/$defs/field"},
                },
                "required": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
                "additionalProperties": {"const": False},
                **_TITLED,
            },
            "required": ["type", "properties"],
            "additionalProperties": False,
        },
    },
    "oneOf": [{"$ref": "#/$defs/field"}, {"$ref": "#/$defs/form"}],
}
_META = Draft202012Validator(META_SCHEMA)
# Each shape's own check, for a message about the shape a schema's `type` says it is.
# (A form's own check takes each field as an object: each field is then checked on its own, to name it.)
_LOOSE_DEFS = {
    **META_SCHEMA["$defs"],
    "form": json.loads(json.dumps(META_SCHEMA["$defs"]["form"]).replace('{"$ref": "#/$defs/field"}', '{"type": "object"}')),
}
_SHAPES = {
    shape: Draft202012Validator({"$ref": f"#/$defs/{shape}", "$defs": _LOOSE_DEFS})
    for shape in ("choice", "choices", "text", "number", "yesno", "form")
}


def openapi_schema() -> dict[str, Any]:
    """The allowed subset as one self-contained JSON Schema (references inlined), for the OpenAPI document."""

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            if set(node) == {"$ref"}:
                return inline(META_SCHEMA["$defs"][node["$ref"].rsplit("/", 1)[1]])
            return {key: inline(value) for key, value in node.items()}
        if isinstance(node, list):
            return [inline(item) for item in node]
        return node

    return {"oneOf": inline(META_SCHEMA["oneOf"])}

KINDS = ("choice", "choices", "text", "number", "yesno")


@dataclasses.dataclass(frozen=True)
class Field:
    """One thing a person fills in: the whole answer, or one field of a form."""

    name: str  # `SINGLE_FIELD` for an answer without a form
    kind: str  # choice | choices | text | number | yesno
    title: str
    schema: dict[str, Any]
    required: bool = True

    @property
    def options(self) -> tuple[str, ...]:
        """The choices offered (choice, choices), in order."""
        if self.kind == "choice":
            return tuple(self.schema["enum"])
        if self.kind == "choices":
            return tuple(self.schema["items"]["enum"])
        return ()

    @property
    def integer(self) -> bool:
        return self.schema.get("type") == "integer"

    @property
    def max_length(self) -> int | None:
        return self.schema.get("maxLength")


class SchemaError(ValueError):
    """An answer schema outside the allowed subset; the message says where and why."""


def schema_problem(schema: Any) -> str | None:
    """Why `schema` is not an answer schema this gateway takes (one sentence), or None if it is one."""
    if not isinstance(schema, dict):
        return "the answer schema must be a JSON object"
    if schema.get("type") == "object":
        problem = _shape_problem(schema, "form")
        if problem is None:
            for name, sub in schema["properties"].items():
                inner = "a form cannot hold another form" if sub.get("type") == "object" else _field_problem(sub)
                if inner:
                    return f"field {name!r}: {inner}"
            unknown = sorted(set(schema.get("required", ())) - set(schema["properties"]))
            if unknown:
                return f"required names fields the form does not have: {', '.join(unknown)}"
        return problem
    return _field_problem(schema)


def _field_problem(schema: Any) -> str | None:
    if not isinstance(schema, dict):
        return "a field's schema must be a JSON object"
    kind = schema.get("type")
    if kind == "string":
        shape = "choice" if "enum" in schema else "text"
        if shape == "text" and "maxLength" not in schema:
            return f"free text needs maxLength (at most {MAX_TEXT_LENGTH}); a choice needs enum"
    elif kind in ("array", "number", "integer", "boolean"):
        shape = {"array": "choices", "boolean": "yesno"}.get(kind, "number")
    else:
        return (
            "type must be one of string (a choice with enum, or text with maxLength), array (several choices), "
            "number, integer, boolean (yes/no) or object (a form)"
        )
    problem = _shape_problem(schema, shape)
    if problem:
        return problem
    if "minimum" in schema and "maximum" in schema and schema["minimum"] > schema["maximum"]:
        return "minimum is greater than maximum"
    if schema.get("minLength", 0) > schema.get("maxLength", MAX_TEXT_LENGTH):
        return "minLength is greater than maxLength"
    if schema.get("minItems", 0) > schema.get("maxItems", MAX_OPTIONS):
        return "minItems is greater than maxItems"
    return None


def _shape_problem(schema: dict[str, Any], shape: str) -> str | None:
    error = best_match(_SHAPES[shape].iter_errors(schema))
    if error is None:
        return None
    if error.validator == "additionalProperties" and not error.path:
        allowed = sorted(META_SCHEMA["$defs"][shape]["properties"])
        return f"{error.message}; a {shape} takes {', '.join(allowed)}"
    return _message(error)


def check_schema(schema: Any) -> dict[str, Any]:
    """The schema as stored (a form's `additionalProperties: false` made explicit); SchemaError if refused."""
    problem = schema_problem(schema)
    if problem:
        raise SchemaError(problem)
    if schema.get("type") == "object":
        # PostgreSQL's jsonb keeps an object's keys in its own order: the form's order is kept beside them.
        return {**schema, "additionalProperties": False, ORDER_KEY: list(schema["properties"])}
    return dict(schema)


def _message(error: Any) -> str:
    where = ".".join(str(p) for p in error.absolute_path)
    return f"{where}: {error.message}" if where else error.message


def field_kind(schema: dict[str, Any]) -> str:
    """Which of `KINDS` a (checked) field schema is."""
    kind = schema.get("type")
    if kind == "string":
        return "choice" if "enum" in schema else "text"
    if kind == "array":
        return "choices"
    if kind in ("number", "integer"):
        return "number"
    return "yesno"


def is_form(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "object"


def fields(schema: dict[str, Any]) -> list[Field]:
    """What a person fills in to answer: one field, or each of a form's, in order."""
    if not is_form(schema):
        return [Field(SINGLE_FIELD, field_kind(schema), schema.get("title", ""), schema)]
    required = set(schema.get("required", ()))
    properties = schema["properties"]
    order = [name for name in schema.get(ORDER_KEY, ()) if name in properties]
    order += [name for name in properties if name not in order]
    return [
        Field(name, field_kind(properties[name]), properties[name].get("title") or name, properties[name],
              required=name in required)
        for name in order
    ]  # fmt: skip


def answer_problem(schema: dict[str, Any], answer: Any) -> str | None:
    """Why `answer` does not fit `schema` (one sentence naming the field), or None if it does."""
    error = best_match(Draft202012Validator(schema).iter_errors(answer))
    if error is None:
        return None
    return _message(error)


_YES = {"yes", "y", "true", "on", "1"}
_NO = {"no", "n", "false", "off", "0"}


def _typed(field: Field, value: Any) -> Any:
    """One input's value as the field's JSON type, where the text reads as one; else as it came
    (the schema's validation then says what is wrong with it)."""
    if field.kind == "number" and isinstance(value, str):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            pass
        try:
            number = float(text)
        except ValueError:
            return value
        return int(number) if field.integer and number.is_integer() else number
    if field.kind == "yesno" and isinstance(value, str):
        text = value.strip().lower()
        return True if text in _YES else False if text in _NO else value
    if field.kind == "choices" and isinstance(value, str):
        return [value] if value else []
    return value


def answer_from_inputs(schema: dict[str, Any], inputs: Mapping[str, Any]) -> Any:
    """The answer a form's inputs make: `inputs[name]` per field (text, a list of choices, a bool), or
    `inputs[SINGLE_FIELD]` without a form. An input left empty is left out of a form (so a required
    field is refused by the validation) and is the empty text of a single text answer."""
    if not is_form(schema):
        (field,) = fields(schema)
        value = inputs.get(SINGLE_FIELD)
        return _typed(field, value) if value not in (None, "") or field.kind == "text" else value
    answer: dict[str, Any] = {}
    for field in fields(schema):
        value = inputs.get(field.name)
        if value is None or value == "":
            continue
        answer[field.name] = _typed(field, value)
    return answer


def answer_text(answer: Any, schema: dict[str, Any] | None = None) -> str:
    """An answer as one line a card shows: `Acme`, `yes`, `a, b`, `vendor: Acme · budget: 1200`."""

    def one(value: Any) -> str:
        if isinstance(value, bool):
            return "yes" if value else "no"
        if isinstance(value, list):
            return ", ".join(one(v) for v in value) or "(none)"
        if value is None:
            return "(none)"
        return str(value)

    if isinstance(answer, dict):
        asked = fields(schema) if schema and is_form(schema) else []
        titles = {f.name: f.title for f in asked}
        order = [f.name for f in asked if f.name in answer] + [k for k in answer if k not in titles]
        return " · ".join(f"{titles.get(k) or k}: {one(answer[k])}" for k in order)
    return one(answer)


def schema_from_choices(choices: list[str] | None, *, several: bool = False, max_length: int = 2000) -> dict[str, Any]:
    """The answer schema of a question asked as "these choices" (one, or `several`), or free text without
    choices — what an `ask_human` tool's caller gives (docs/asking.md)."""
    options = list(dict.fromkeys(str(c) for c in (choices or []) if str(c)))  # unique, in order
    if not options:
        return {"type": "string", "maxLength": max_length, "minLength": 1}
    if several:
        return {"type": "array", "items": {"type": "string", "enum": options}, "uniqueItems": True, "minItems": 1}
    return {"type": "string", "enum": options}
