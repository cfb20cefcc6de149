"""The gateway's own MCP server at `/mcp` (streamable HTTP): the tool `ask_human` (docs/asking.md).

Any MCP client can ask a person through the gateway: `ask_human(question, choices?, several?)` creates a
question of the agent whose key is the bearer token (`Authorization: Bearer <agent key>`), sent where the
agent's first approval gate asks (its channel and approvers), and answers once it is final — the answer
as JSON, or why there is none. The wait is a coroutine on `approvals.waiting` (no thread, no held
connection), as for the long-poll.

`McpEndpoint` routes `/mcp` to the MCP SDK's streamable HTTP transport (stateless: every request stands
alone, so any server process can serve it) and everything else to the app it wraps. A request without a
live key is refused with 401 before the transport sees it. The SDK's session manager runs inside a task of
the serving event loop, started on the first request (the ASGI servers here run without lifespan).
"""

from __future__ import annotations

import asyncio
import json
import weakref
from typing import Any

from asgiref.sync import sync_to_async
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from approvals import selectors, services
from approvals.api.auth import bearer_token
from approvals.errors import GatewayError
from approvals.models import Agent
from approvals.waiting import agent_id_for_key, wait_for_final
from gateway_contract.answers import schema_from_choices

PATH = "/mcp"
TOOL_DESCRIPTION = (
    "Ask a human a question and wait for their answer. Use it when you need a decision, a fact or a "
    "preference only a person can give. Give `choices` when the answer is one of a few options (or several "
    "of them, with `several: true`); leave them out for a free-text answer."
)
QUESTION_TIMEOUT_SECONDS = 3600  # a question asked over MCP expires after an hour unanswered

server = MCPServer(
    name="approval-gateway",
    instructions="Ask the people behind this agent through the approval gateway: the ask_human tool.",
)


def _ask(agent_id: int, question: str, schema: dict[str, Any], session_id: str) -> str:
    agent = Agent.objects.get(pk=agent_id)
    created = services.question_create(
        agent=agent,
        text=question,
        answer_schema=schema,
        timeout_seconds=QUESTION_TIMEOUT_SECONDS,
        session_id=session_id,
        metadata={"source": "mcp"},
    )
    return str(created.pk)


def answer_text(question: dict[str, Any]) -> tuple[str, bool]:
    """(what the tool answers, whether it is an error) for a final question."""
    if question["status"] == "answered" or (question["defaulted"] and question["answer"] is not None):
        value = json.dumps(question["answer"], ensure_ascii=False)
        if question["defaulted"]:
            return f"{value} (nobody answered in time; this is the default answer)", False
        return f"{value} (answered by {question['answered_by_name'] or question['answered_by']})", False
    return f"No answer: the question ended {question['status']}" + (
        f" ({question['reason']})" if question["reason"] else ""
    ), True


@server.tool(name="ask_human", description=TOOL_DESCRIPTION)
async def ask_human(
    question: str, choices: list[str] | None = None, several: bool | None = None, ctx: Context | None = None
) -> str:
    """Ask a person; the answer as JSON text, or a sentence saying why there is none."""
    headers = (ctx.headers if ctx is not None else None) or {}
    agent_id = await agent_id_for_key(bearer_token(headers.get("authorization")))
    if agent_id is None:  # (refused before the transport; a key revoked since is refused here)
        raise ToolError("unknown or revoked API key")
    session_id = (headers.get("mcp-session-id") or "")[:200]
    try:
        question_id = await sync_to_async(_ask, thread_sensitive=False)(
            agent_id, question, schema_from_choices(choices, several=bool(several)), session_id
        )
    except GatewayError as exc:
        raise ToolError(exc.message) from None
    state = None
    while state is None or not state.is_final:  # the question's own deadline ends this
        state = await wait_for_final(confirmation_id=question_id, agent_id=agent_id, timeout=QUESTION_TIMEOUT_SECONDS)
        if state is None:
            raise ToolError("the question is gone")
    text, failed = answer_text(selectors.question_as_dict(state))
    if failed:  # (a ToolError's text reaches the model; any other exception's stays in the log)
        raise ToolError(text)
    return text


class McpEndpoint:
    """ASGI: `/mcp` to the MCP transport (agent key required), anything else to `app`."""

    def __init__(self, app):
        self.app = app
        # One session manager per event loop (a manager runs once, in one loop).
        self._managers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, StreamableHTTPSessionManager] = (
            weakref.WeakKeyDictionary()
        )
        self._started: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Event] = weakref.WeakKeyDictionary()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or (scope["path"] != PATH and not scope["path"].startswith(PATH + "/")):
            return await self.app(scope, receive, send)
        key = ""
        for name, value in scope.get("headers", ()):
            if name.lower() == b"authorization":
                key = bearer_token(value)
        if not key or await agent_id_for_key(key) is None:
            body = json.dumps({"error": {"code": "unauthorized", "message": "give an agent's API key as the bearer token",
                                         "details": None}}).encode()  # fmt: skip
            await send({"type": "http.response.start", "status": 401, "headers": [
                (b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})  # fmt: skip
            await send({"type": "http.response.body", "body": body})
            return
        manager = await self._manager()
        await manager.handle_request(scope, receive, send)

    async def _manager(self) -> StreamableHTTPSessionManager:
        loop = asyncio.get_running_loop()
        manager = self._managers.get(loop)
        if manager is None:
            # `MCPServer.streamable_http_app()` would build the same manager inside a Starlette app whose
            # lifespan runs it; the ASGI servers here run without lifespan, so it is built and run here.
            manager = self._managers[loop] = StreamableHTTPSessionManager(
                app=server._lowlevel_server, stateless=True, json_response=True
            )
            started = self._started[loop] = asyncio.Event()

            async def keep_running() -> None:
                async with manager.run():
                    started.set()
                    await asyncio.Event().wait()  # for the life of the loop

            loop.create_task(keep_running())
        await self._started[loop].wait()
        return manager
