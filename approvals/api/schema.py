"""What the OpenAPI document (`GET /api/v1/schema/`) says beyond what drf-spectacular infers,
so that it describes what the server really does (docs/reference/api.md):

- every error an operation can answer, in the contract's one error shape (`Error`): each view names its
  own (`error_responses`), and `api_wide_answers` adds what the ASGI layer answers for every route
  (413 for a body over the limit, 415 for one that is not JSON);
- the links between operations (`api_wide_answers`): the `confirmation_id` a pre-tool-use answers is the
  request the confirmation operations take — what schemathesis' stateful phase follows;
- request bodies refuse unknown fields (`additionalProperties: false`), and a pair of fields given
  together where only one may be (`StrictSerializer.exclusive`: `not: {required: [a, b]}`);
- strings never contain NUL (U+0000), which PostgreSQL cannot store.

The extensions register themselves when this module is imported (`approvals.api.views` does);
`api_wide_answers` is a drf-spectacular postprocessing hook (SPECTACULAR_SETTINGS).
"""

from __future__ import annotations

import ipaddress
from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension, OpenApiSerializerFieldExtension
from drf_spectacular.plumbing import ResolvedComponent
from drf_spectacular.utils import OpenApiResponse, extend_schema_field, inline_serializer
from rest_framework import serializers

from gateway_utils.outbound import allow_list

NO_NUL_PATTERN = "^[^\\x00]*$"
# For a field that may be blank: drf-spectacular offers "" as its own `oneOf` branch, so this one must not match it.
NO_NUL_NONEMPTY_PATTERN = "^[^\\x00]+$"


def callback_url_pattern() -> str:
    """What a non-empty `callback_url` may be, as the OpenAPI document states it and the server checks
    it: an http(s) URL naming its host by a DNS name — or, where GATEWAY_OUTBOUND_ALLOW
    allows loopback (`make run`, the tests), `localhost`, `127.0.0.1` or `[::1]`. Any name is
    checked again, by what it resolves to, when the webhook connects (gateway_utils.outbound)."""
    label = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    hosts = [f"(?:{label}\\.)+[A-Za-z]{{2,63}}"]
    if allow_list().allows_address(ipaddress.ip_address("127.0.0.1")):
        hosts += ["localhost", "127\\.0\\.0\\.1", "\\[::1\\]"]
    port = "(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
    return f"^https?://(?:{'|'.join(hosts)})(?::{port})?(?:[/?#][!-~]*)?$"


ERROR_DESCRIPTIONS = {
    400: "The request is not valid: `invalid` (details name each field, unknown fields too), `malformed` "
    "(the body is not JSON) or `invalid_config` (details: `[{path, message}]`). Nothing was changed.",
    401: "`unauthorized`: the key (or, for staff paths, the login) is missing, unknown or revoked.",
    403: "`permission_denied`: signed in, but not as staff.",
    404: "`not_found`: no such record for this caller (another agent's request is a 404 too).",
    409: "`already_decided` or `conflict` (e.g. a post-tool-use for a call that was never allowed).",
    422: "`idempotency_key_reused`: the same idempotency_key with a different body.",
    413: "`payload_too_large`: the body is over GATEWAY_MAX_BODY_BYTES (1 MiB by default); refused before "
    "it was read, and nothing was changed. `details.max_bytes` is the limit.",
    415: "`unsupported_media_type`: the body was not sent as `application/json` (or, for a config file, "
    "YAML); refused before it was read, and nothing was changed. `details.accepted` lists what is.",
}


@extend_schema_field(
    {"description": "Any JSON value, or null: more about the error (e.g. each field's problems, by field)."}
)
class AnyJsonField(serializers.JSONField):
    pass


ERROR = inline_serializer(
    "Error",
    {
        "error": inline_serializer(
            "ErrorDetail",
            {
                "code": serializers.CharField(help_text="Stable, for programs: see the response's description."),
                "message": serializers.CharField(help_text="For people."),
                "details": AnyJsonField(),
            },
        )
    },
)


def error_responses(*statuses: int) -> dict[int, OpenApiResponse]:
    """The error answers an operation documents, each in the contract's shape."""
    return {status: OpenApiResponse(ERROR, description=ERROR_DESCRIPTIONS[status]) for status in statuses}


class StrictSerializerSchema(OpenApiSerializerExtension):
    """`StrictSerializer` bodies refuse unknown fields, and both fields of an `exclusive` pair: they say so."""

    target_class = "approvals.api.views.StrictSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        schema["additionalProperties"] = False
        if direction == "request":
            refused = [{"required": list(pair)} for pair in self.target.exclusive]
            if len(refused) == 1:
                schema["not"] = refused[0]
            elif refused:
                schema["not"] = {"anyOf": refused}
        return schema


class StrictCharFieldSchema(OpenApiSerializerFieldExtension):
    """`StrictCharField`s: strings without NUL."""

    target_class = "approvals.api.views.StrictCharField"
    match_subclasses = True

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        schema = auto_schema._map_serializer_field(self.target, direction, bypass_extensions=True)
        schema["pattern"] = NO_NUL_NONEMPTY_PATTERN if self.target.allow_blank else NO_NUL_PATTERN
        return schema


def json_value_component(auto_schema: Any) -> dict[str, Any]:
    """`JsonValue`: any JSON value whose strings (keys and values, at any depth) have no NUL."""
    text = {"type": "string", "pattern": NO_NUL_PATTERN}
    ref = {"$ref": "#/components/schemas/JsonValue"}
    component = ResolvedComponent(
        name="JsonValue",
        type=ResolvedComponent.SCHEMA,
        object="JsonValue",
        schema={
            "description": "Any JSON value; no string in it, key or value, contains NUL (U+0000).",
            "anyOf": [
                text,
                {"type": ["number", "boolean", "null"]},
                {"type": "array", "items": ref},
                {"type": "object", "propertyNames": text, "additionalProperties": ref},
            ],
        },
    )
    auto_schema.registry.register_on_missing(component)
    return component.ref


class JsonObjectFieldSchema(OpenApiSerializerFieldExtension):
    """`JsonObjectField`s: a JSON object whose strings have no NUL."""

    target_class = "approvals.api.views.JsonObjectField"
    match_subclasses = True

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        return {
            "type": "object",
            "propertyNames": {"type": "string", "pattern": NO_NUL_PATTERN},
            "additionalProperties": json_value_component(auto_schema),
        }


class JsonValueFieldSchema(OpenApiSerializerFieldExtension):
    """`JsonValueField`s: any JSON value whose strings have no NUL."""

    target_class = "approvals.api.views.JsonValueField"
    match_subclasses = True

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        return {"anyOf": [json_value_component(auto_schema)]}  # where the field may be null, null joins here


class CallbackUrlFieldSchema(OpenApiSerializerFieldExtension):
    """`callback_url`: the pattern the server checks (`approvals.api.views.callback_url_pattern`)."""

    target_class = "approvals.api.views.CallbackUrlField"
    priority = 1  # before StrictCharFieldSchema, which matches it too

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        return {  # drf-spectacular adds the empty string as a `oneOf` branch: "" means no webhook
            "type": "string",
            "maxLength": 2000,
            "pattern": callback_url_pattern(),
            "description": "Where the final decision is POSTed, signed (docs/reference/api.md). "
            "Its host must be a DNS name that resolves to a public address when the webhook is sent "
            "(or one GATEWAY_OUTBOUND_ALLOW allows).",
        }


BODY_METHODS = ("post", "put", "patch")
# The operations on one confirmation request, which a pre-tool-use answer names (`confirmation_id`: null
# when nothing was asked). Only pre-tool-use links to them: it is where a request comes from.
ASK_OPERATION = "hooks_pre_tool_use_create"
CONFIRMATION_OPERATIONS = ("confirmations_retrieve", "confirmations_wait_retrieve", "confirmations_cancel_create")
# The operations on one question, which the question's creation answers with (`id`).
QUESTION_OPERATION = "questions_create"
QUESTION_OPERATIONS = ("questions_retrieve", "questions_wait_retrieve", "questions_cancel_create")


def api_wide_answers(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: what every operation can answer beyond its view's own errors
    (the body gate of `approvals.api.asgi`), and the links from a pre-tool-use answer to the operations on
    the confirmation request it names."""
    error = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    for operations in result.get("paths", {}).values():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            statuses = (413, 415) if method in BODY_METHODS else (413,)
            for status in statuses:
                responses.setdefault(str(status), {**error, "description": ERROR_DESCRIPTIONS[status]})
            if operation.get("operationId") == ASK_OPERATION:
                responses["200"]["links"] = {
                    target: {
                        "operationId": target,
                        "parameters": {"confirmation_id": "$response.body#/confirmation_id"},
                        "description": "The confirmation request this answer names (when it is `pending`).",
                    }
                    for target in CONFIRMATION_OPERATIONS
                }
            if operation.get("operationId") == QUESTION_OPERATION:
                responses["201"]["links"] = {
                    target: {
                        "operationId": target,
                        "parameters": {"question_id": "$response.body#/id"},
                        "description": "The question just asked.",
                    }
                    for target in QUESTION_OPERATIONS
                }
    return result
