"""`--elicitation gateway`: an upstream's `elicitation/create` (a form) is not passed to the client, which
may have no person at the keyboard: the proxy asks it as a question through the gateway and answers the
upstream `accept` with the person's answer (`decline` when nobody answered or the form cannot be asked as
a question; URL-mode elicitation too). Up to 2025-11-25 the upstream sends the request; from 2026-07-28 a
`tools/call` answers `input_required` and is retried with the answers (`_input_responses`)."""

from __future__ import annotations

import logging
import re
from typing import Any

from mcp_types import JSONRPCRequest, JSONRPCResponse

from gateway_client.asking import HumanAsker
from gateway_client.client import NoAnswer
from gateway_client.gating import ToolGate

logger = logging.getLogger("gateway_client.mcp_proxy")

_ELICIT_MAX_FIELDS = 8


def with_form_elicitation(capabilities: Any) -> dict[str, Any]:
    """Client capabilities that declare form elicitation (what --elicitation gateway answers)."""
    declared = dict(capabilities) if isinstance(capabilities, dict) else {}
    elicitation = dict(declared.get("elicitation") or {})
    elicitation.setdefault("form", {})
    declared["elicitation"] = elicitation
    return declared


def elicitation_schema(params: dict[str, Any]) -> dict[str, Any] | None:
    """An `elicitation/create` form as a question's answer schema (docs/asking.md); None if it cannot be one
    (URL mode, more than 8 fields, a field of another shape)."""
    if params.get("mode", "form") != "form":
        return None
    requested = params.get("requestedSchema") or {}
    properties = requested.get("properties") or {}
    if not isinstance(properties, dict) or not 0 < len(properties) <= _ELICIT_MAX_FIELDS:
        return None
    fields: dict[str, Any] = {}
    for name, prop in properties.items():
        field = _elicit_field(prop) if isinstance(prop, dict) else None
        if field is None or not re.match(r"^[A-Za-z_][A-Za-z0-9_]{0,39}$", name):
            return None
        fields[name] = field
    required = [n for n in requested.get("required") or [] if n in fields]
    return {"type": "object", "properties": fields, "required": required}


def _elicit_field(prop: dict[str, Any]) -> dict[str, Any] | None:
    titled = {k: str(prop[k])[:200 if k == "title" else 1000] for k in ("title", "description") if prop.get(k)}
    kind = prop.get("type")
    options = prop.get("enum") or [o.get("const") for o in prop.get("oneOf") or [] if isinstance(o, dict)]
    if kind == "string" and options:
        return {"type": "string", "enum": [str(o) for o in options], **titled}
    if kind == "string":
        limit = min(int(prop.get("maxLength") or 2000), 3000)
        field = {"type": "string", "maxLength": limit, **titled}
        if prop.get("minLength"):
            field["minLength"] = min(int(prop["minLength"]), limit)
        return field
    if kind in ("number", "integer"):
        bounds = {k: prop[k] for k in ("minimum", "maximum") if isinstance(prop.get(k), int | float)}
        return {"type": kind, **bounds, **titled}
    if kind == "boolean":
        return {"type": "boolean", **titled}
    if kind == "array":
        items = prop.get("items") or {}
        choices = items.get("enum") or [o.get("const") for o in items.get("anyOf") or [] if isinstance(o, dict)]
        if choices:
            return {"type": "array", "items": {"type": "string", "enum": [str(c) for c in choices]}, "uniqueItems": True,
                    **{k: prop[k] for k in ("minItems", "maxItems") if isinstance(prop.get(k), int)}, **titled}  # fmt: skip
    return None


class AnswersElicitations:
    """The proxy's answers to an upstream's elicitations (mixed into `McpGatewayProxy`, whose state it reads)."""

    asker: HumanAsker | None
    gate: ToolGate
    max_wait: float

    async def _to_upstream(self, message: Any) -> None:  # McpGatewayProxy's
        raise NotImplementedError

    async def _elicit(self, request: JSONRPCRequest) -> None:
        """--elicitation gateway, up to 2025-11-25: the upstream's `elicitation/create` request answered here."""
        result = await self._elicitation_answer(request.params or {})
        await self._to_upstream(JSONRPCResponse(jsonrpc="2.0", id=request.id, result=result))

    async def _elicitation_answer(self, params: dict[str, Any]) -> dict[str, Any]:
        """An elicitation's form asked of a person as a question (docs/asking.md): `accept` with their answer,
        `decline` when nobody answered or it cannot be asked as a question, `cancel` when it was withdrawn."""
        try:
            schema = elicitation_schema(params)
            if schema is None:
                logger.warning("an elicitation the gateway cannot ask as a question (mode %s): declined", params.get("mode"))
                return {"action": "decline"}
            question = str(params.get("message") or "The tool needs your input.")
            where = self.asker.options if self.asker is not None else {}
            try:
                value = await self.gate.client.ask(
                    question, schema, session_id=self.gate.session_id, max_wait=self.max_wait,
                    channel=where.get("channel"), user_id=where.get("user_id"),
                )  # fmt: skip
            except NoAnswer as exc:
                return {"action": "cancel" if exc.answer.status == "cancelled" else "decline"}
            return {"action": "accept", "content": value}
        except Exception:
            logger.exception("the elicitation could not be asked through the gateway: declined")
            return {"action": "decline"}

    async def _input_responses(self, result: dict[str, Any]) -> dict[str, Any] | None:
        """--elicitation gateway, 2026-07-28: the answers to an `InputRequiredResult`'s elicitations, keyed as
        its `inputRequests`; None if it asks for anything else (sampling, roots: the client's business)."""
        requests = result.get("inputRequests") or {}
        if not isinstance(requests, dict) or not requests:
            return None
        if any(not isinstance(r, dict) or r.get("method") != "elicitation/create" for r in requests.values()):
            return None
        return {key: await self._elicitation_answer(r.get("params") or {}) for key, r in requests.items()}
