"""`--ask-human`: the tool `ask_human` offered beside the upstream's (added to each `tools/list` answer),
and answered by the proxy itself — a person, through the gateway (a question, docs/asking.md) — never by
the upstream."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from mcp_types import JSONRPCResponse

from gateway_client.asking import TOOL_NAME as ASK_HUMAN, HumanAsker, describe, params_schema
from gateway_client.gating import ToolGate
from gateway_client.mcp_proxy.protocol import HeldCall, text_result

logger = logging.getLogger("gateway_client.mcp_proxy")


def with_ask_human(message: JSONRPCResponse) -> JSONRPCResponse:
    """A `tools/list` answer with the `ask_human` tool added (once, last)."""
    result = dict(message.result or {})
    tools = list(result.get("tools") or [])
    if not any(isinstance(t, dict) and t.get("name") == ASK_HUMAN for t in tools):
        tools.append({"name": ASK_HUMAN, "description": describe(None), "inputSchema": params_schema(None)})
    return JSONRPCResponse(jsonrpc="2.0", id=message.id, result={**result, "tools": tools})


class AsksHuman:
    """The proxy's answer to a call of `ask_human` (mixed into `McpGatewayProxy`, whose state it reads)."""

    asker: HumanAsker | None
    gate: ToolGate
    calls: dict[Any, HeldCall]

    async def _answer(self, call: HeldCall, response: Any) -> None:  # McpGatewayProxy's
        raise NotImplementedError

    async def _ask_human(self, call: HeldCall) -> None:
        """--ask-human: the tool is answered here, by a person through the gateway (docs/asking.md)."""
        assert self.asker is not None
        arguments = call.params.get("arguments") or {}
        try:
            with call.scope:
                if not isinstance(arguments, dict) or not str(arguments.get("question") or "").strip():
                    await self._answer(call, text_result("ask_human needs a question", is_error=True))
                    return
                output = await self.asker.aask(arguments, session_id=self.gate.session_id)
                await self._answer(call, text_result(output, is_error=output.startswith("No answer")))
        except Exception as exc:
            logger.exception("ask_human failed")
            with contextlib.suppress(Exception):
                await self._answer(call, text_result(f"ask_human failed: {exc}", is_error=True))
        finally:
            self.calls.pop(call.request.id, None)
