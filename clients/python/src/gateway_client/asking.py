"""`ask_human`: a tool any agent framework can offer its model, to ask a person and get the answer (docs/asking.md).

What the model sees and sends, written once for the adapters (OpenAI Agents SDK, LangChain, the MCP
proxy): with no schema fixed by the developer, the model gives a `question` and, optionally, `choices`
(one of them is the answer; several with `several: true`); without choices the answer is free text.
A developer may fix the answer's schema instead (a form: `answer_schema=`), and the model gives only the
question. The tool's output is the answer as JSON text, or a sentence saying why there is none.
"""

from __future__ import annotations

import json
from typing import Any

from gateway_client.client import Answer, AsyncGatewayClient, GatewayClient

TOOL_NAME = "ask_human"
FREE_TEXT_LIMIT = 2000
DESCRIPTION = (
    "Ask a human a question and wait for their answer. Use it when you need a decision, a fact or a "
    "preference only a person can give. Give `choices` when the answer is one of a few options (or several "
    "of them, with `several: true`); leave them out for a free-text answer."
)
FIXED_DESCRIPTION = "Ask a human and wait for their answer, given in a form: {fields}. Say what you need in `question`."


def params_schema(answer_schema: dict[str, Any] | None) -> dict[str, Any]:
    """The tool's parameters as a JSON Schema (strict: every key required, nullable where optional)."""
    properties: dict[str, Any] = {"question": {"type": "string", "description": "What to ask, in plain words."}}
    if answer_schema is None:
        properties["choices"] = {
            "type": ["array", "null"],
            "items": {"type": "string"},
            "description": "The options to choose from; null for a free-text answer.",
        }
        properties["several"] = {"type": ["boolean", "null"], "description": "true: several choices may be picked."}
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def describe(answer_schema: dict[str, Any] | None) -> str:
    if answer_schema is None:
        return DESCRIPTION
    if answer_schema.get("type") == "object":
        fields = ", ".join(answer_schema.get("properties", {}))
    else:
        fields = answer_schema.get("title") or "one answer"
    return FIXED_DESCRIPTION.format(fields=fields)


def schema_for(arguments: dict[str, Any], fixed: dict[str, Any] | None) -> dict[str, Any]:
    """The answer schema of one call: the fixed one, or what the model's `choices` / `several` say.

    (The gateway's own `/mcp` tool reads choices the same way, in `gateway_contract.answers.schema_from_choices`:
    this package needs no server code, so the few lines are written twice.)"""
    if fixed is not None:
        return fixed
    choices = [str(c) for c in (arguments.get("choices") or []) if str(c)]
    choices = list(dict.fromkeys(choices))  # unique, in order
    if not choices:
        return {"type": "string", "maxLength": FREE_TEXT_LIMIT, "minLength": 1}
    if arguments.get("several"):
        return {"type": "array", "items": {"type": "string", "enum": choices}, "uniqueItems": True, "minItems": 1}
    return {"type": "string", "enum": choices}


def output_for_model(answer: Answer) -> str:
    """What the model is told: the answer as JSON, or why there is none (never an invented answer)."""
    if answer.answered:
        value = json.dumps(answer.value, ensure_ascii=False)
        who = answer.answered_by_name or answer.answered_by
        if answer.defaulted:
            return f"{value} (nobody answered in time; this is the default answer)"
        return f"{value} (answered by {who})" if who else value
    return f"No answer: {answer.reason or answer.status}"


class HumanAsker:
    """One configured `ask_human` tool: where questions go and how long to wait; the adapters call it."""

    def __init__(
        self,
        client: GatewayClient | AsyncGatewayClient,
        *,
        answer_schema: dict[str, Any] | None = None,
        channel: str | None = None,
        gate: str | None = None,
        approvers: list[str] | None = None,
        timeout_seconds: int | None = None,
        default_answer: Any = None,
        user_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        max_wait: float | None = None,
    ):
        self.client = client
        self.answer_schema = answer_schema
        self.options = {
            "channel": channel, "gate": gate, "approvers": approvers, "timeout_seconds": timeout_seconds,
            "default_answer": default_answer, "user_id": user_id, "metadata": metadata, "max_wait": max_wait,
        }  # fmt: skip

    def _call(self, arguments: dict[str, Any], session_id: str | None) -> tuple[str, dict[str, Any], dict[str, Any]]:
        question = str(arguments.get("question") or "").strip()
        if not question:
            raise ValueError("ask_human needs a question")
        return question, schema_for(arguments, self.answer_schema), {**self.options, "session_id": session_id}

    def ask(self, arguments: dict[str, Any], *, session_id: str | None = None) -> str:
        """Ask with a blocking client; the tool's output."""
        if not isinstance(self.client, GatewayClient):
            raise TypeError("HumanAsker.ask needs a GatewayClient; use aask with an AsyncGatewayClient")
        question, schema, options = self._call(arguments, session_id)
        return output_for_model(self.client.ask_question(question, schema, **options))

    async def aask(self, arguments: dict[str, Any], *, session_id: str | None = None) -> str:
        """Ask with either client (a blocking one runs in a thread); the tool's output."""
        import asyncio

        question, schema, options = self._call(arguments, session_id)
        if isinstance(self.client, AsyncGatewayClient):
            answer = await self.client.ask_question(question, schema, **options)
        else:
            answer = await asyncio.to_thread(self.client.ask_question, question, schema, **options)
        return output_for_model(answer)
