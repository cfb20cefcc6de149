"""`inject_tool_result`: put a tool call and its result into the agent's history (docs/reference/config.md).

At session_start or pre_turn the hook calls the configured tool — an HTTP
endpoint, or a tool on an MCP server through the `mcp` package's client — and
answers the call as OpenAI-style messages: an assistant message with
`tool_calls` and the matching `tool` message.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import re
import uuid
from typing import Any, Literal

import httpx
from django.utils import timezone
from pydantic import Field, model_validator

from gateway_utils.outbound import OutboundRefused, guarded_async_client, guarded_client
from hooks import state
from hooks.base import Hook, HookContext, HookResult
from hooks.config import HookConfigBase, HttpUrl, Strict

logger = logging.getLogger("hooks")

HTTP_TIMEOUT_SECONDS = 10.0
MCP_TIMEOUT_SECONDS = 30.0  # starting a stdio server is part of it
_NOT_A_NAME_CHAR = re.compile(r"[^a-zA-Z0-9_-]")


def function_name(tool_name: str, toolset_name: str | None = None) -> str:
    """The name function-calling APIs will accept: `<toolset>_<tool>` reduced to
    `^[a-zA-Z0-9_-]{1,64}$`; without a toolset, `tool_name` verbatim."""
    if not toolset_name:
        return tool_name
    return _NOT_A_NAME_CHAR.sub("_", f"{toolset_name}_{tool_name}")[:64]


def tool_call_messages(*, name: str, arguments: dict[str, Any], content: str) -> list[dict[str, Any]]:
    """One synthetic call: the assistant's `tool_calls` message and the `tool` message answering it."""
    call_id = f"call_{uuid.uuid4().hex[:24]}"
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": content},
    ]


class McpServer(Strict):
    """An MCP server, started as a command or reached at a URL."""

    command: list[str] | None = Field(default=None, min_length=1)
    url: HttpUrl | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError("needs exactly one of command or url")
        return self


class InjectSource(Strict):
    """Where an injected tool result comes from: an HTTP `url`, or an `mcp` server."""

    url: HttpUrl | None = None
    method: Literal["GET", "POST"] = "GET"
    headers: dict[str, str] = {}
    mcp: McpServer | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> InjectSource:
        if (self.url is None) == (self.mcp is None):
            raise ValueError("needs exactly one of url or mcp")
        # Compare with the defaults, not model_fields_set: stored configs are re-validated with defaults filled in.
        if self.mcp is not None and (self.method != "GET" or self.headers):
            raise ValueError("method and headers apply only to a url source")
        return self


class Refresh(Strict):
    """Fetch the injected result again once it is older than `ttl_minutes`."""

    ttl_minutes: int = Field(ge=1)


class InjectToolResultConfig(HookConfigBase):
    """Add a tool call and its result to the agent's history at session start or before a turn."""

    kind: Literal["inject_tool_result"]
    event: Literal["session_start", "pre_turn"] = "session_start"
    toolset_name: str | None = None
    tool_name: str = Field(min_length=1)
    arguments: dict[str, Any] = {}
    source: InjectSource
    frequency: Literal["always", "once", "append_if_changed"] = "always"
    refresh: Refresh | None = None

    def outbound_urls(self) -> list[tuple[str, str]]:
        if self.source.url is not None:
            return [("source.url", self.source.url)]
        if self.source.mcp is not None and self.source.mcp.url is not None:
            return [("source.mcp.url", self.source.mcp.url)]
        return []


class InjectionFailed(Exception):
    """The tool could not be called, or answered with an error."""


def fetch_http(source: Any, arguments: dict[str, Any]) -> str:
    """GET with the arguments as query parameters, or POST them as JSON; the body's text."""
    try:
        with guarded_client(timeout=HTTP_TIMEOUT_SECONDS) as client:
            response = client.request(
                source.method,
                source.url,
                headers=source.headers,
                params=arguments if source.method == "GET" else None,
                json=arguments if source.method == "POST" else None,
            )
    except OutboundRefused as exc:
        raise InjectionFailed(f"{source.method} {source.url} refused: {exc}") from None
    except httpx.HTTPError as exc:
        raise InjectionFailed(f"{source.method} {source.url} failed: {exc.__class__.__name__}: {exc}") from None
    if response.status_code >= 400:
        raise InjectionFailed(f"{source.method} {source.url} answered {response.status_code}")
    return response.text


def fetch_mcp(server: Any, tool_name: str, arguments: dict[str, Any]) -> str:
    """Call `tool_name` on an MCP server (a stdio command or a streamable-HTTP URL); its text content."""
    from asgiref.sync import async_to_sync

    try:
        return async_to_sync(_call_mcp_tool)(server, tool_name, arguments)
    except InjectionFailed:
        raise
    except TimeoutError:
        raise InjectionFailed(f"MCP tool {tool_name!r} did not answer within {MCP_TIMEOUT_SECONDS:g} s") from None
    except Exception as exc:  # the SDK's transport and protocol errors, an unstartable command…
        if isinstance(_innermost(exc), OutboundRefused):
            raise InjectionFailed(f"MCP server {server.url} refused: {_innermost(exc)}") from None
        raise InjectionFailed(f"MCP tool {tool_name!r} failed: {_describe(exc)}") from None


async def _call_mcp_tool(server: Any, tool_name: str, arguments: dict[str, Any]) -> str:
    import contextlib

    import anyio
    from mcp import Client, StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client

    async with contextlib.AsyncExitStack() as stack:
        if server.command is not None:
            target: Any = StdioServerParameters(command=server.command[0], args=list(server.command[1:]))
        else:
            # The SDK's HTTP client, through the outbound guard (gateway_utils.outbound): every connection checked.
            http = await stack.enter_async_context(guarded_async_client(timeout=MCP_TIMEOUT_SECONDS))
            target = streamable_http_client(server.url, http_client=http)
        with anyio.fail_after(MCP_TIMEOUT_SECONDS):
            async with Client(target, read_timeout_seconds=MCP_TIMEOUT_SECONDS) as client:
                result = await client.call_tool(tool_name, arguments)
    texts = [block.text for block in result.content if getattr(block, "type", "") == "text"]
    if result.is_error:
        raise InjectionFailed(f"MCP tool {tool_name!r} answered an error: {' '.join(texts)[:300]}")
    if texts:
        return "\n".join(texts)
    if result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    return "\n".join(f"[{getattr(block, 'type', 'unknown')} content]" for block in result.content)


def _innermost(exc: BaseException) -> BaseException:
    """The exception inside the exception groups task groups wrap errors in."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException) -> str:
    """The innermost useful message of an exception (task groups wrap them in groups)."""
    exc = _innermost(exc)
    return f"{exc.__class__.__name__}: {exc}"


class InjectToolResult(Hook):
    """Invariant: the agent's history gets the configured tool's result as a real-looking tool call,
    as often as `frequency` says, and a failing tool never fails the session or the turn.

    - `frequency: always` injects every time the hook runs; `once` the first
      time in a session; `append_if_changed` when the result differs from the
      one last injected in this session.
    - `refresh: {ttl_minutes}` keeps the result (per agent and hook) and reuses
      it without calling the tool until it is that old, by `HookContext.now`.
      Without `refresh` the tool is called every time.
    - A failure skips the injection, says so in `side_effects`
      (`injection_skipped:<hook>: <why>`) and takes no position on the event.
    """

    kind = "inject_tool_result"
    events = InjectToolResultConfig.EVENTS
    config_model = InjectToolResultConfig
    config: InjectToolResultConfig

    def run(self, ctx: HookContext) -> HookResult:
        c = self.config
        now = ctx.now or timezone.now()
        session_scope = state.session_scope(ctx.session_id)
        once_key = f"inject:{self.name}:injected"
        if c.frequency == "once" and not state.claim(agent=ctx.agent, scope=session_scope, key=once_key):
            return HookResult.no_opinion(
                reason="already injected in this session", side_effects=[f"injection_not_repeated:{self.name}"]
            )
        try:
            content, cached = self._content(ctx.agent, now)
        except Exception as exc:  # whatever the tool does, the session or turn goes on
            why = str(exc) if isinstance(exc, InjectionFailed) else _describe(exc)
            if c.frequency == "once":  # nothing was injected: the next event may try again
                state.release(agent=ctx.agent, scope=session_scope, key=once_key)
            logger.warning("inject_tool_result %s skipped: %s", self.name, why)
            return HookResult.no_opinion(
                reason=f"injection skipped: {why}", side_effects=[f"injection_skipped:{self.name}: {why}"]
            )
        side_effects = [f"injection_from_cache:{self.name}"] if cached else []
        if c.frequency == "append_if_changed" and not state.swap(
            agent=ctx.agent,
            scope=session_scope,
            key=f"inject:{self.name}:last",
            value=hashlib.sha256(content.encode()).hexdigest(),
        ):
            return HookResult.no_opinion(
                reason="the result has not changed since it was last injected",
                side_effects=[*side_effects, f"injection_unchanged:{self.name}"],
            )
        messages = tool_call_messages(
            name=function_name(c.tool_name, c.toolset_name), arguments=c.arguments, content=content
        )
        return HookResult.no_opinion(messages=messages, side_effects=[*side_effects, f"injected:{self.name}"])

    def _content(self, agent: str, now: dt.datetime) -> tuple[str, bool]:
        """The tool's result as text, and whether it came from the cache."""
        c = self.config
        cache = {"scope": state.field("inject_cache", self.name), "key": self._cache_key()}
        if c.refresh is not None:
            cached = state.get(agent=agent, now=now, **cache)
            if isinstance(cached, dict) and isinstance(cached.get("content"), str):
                return cached["content"], True
        if c.source.mcp is not None:
            content = fetch_mcp(c.source.mcp, c.tool_name, c.arguments)
        else:
            content = fetch_http(c.source, c.arguments)
        if c.refresh is not None:
            state.put(
                agent=agent,
                value={"content": content, "fetched_at": now.isoformat()},
                expires_at=now + dt.timedelta(minutes=c.refresh.ttl_minutes),
                **cache,
            )
        return content, False

    def _cache_key(self) -> str:
        """Changes with what is called, so an edited hook never serves the old tool's result."""
        c = self.config
        what = {"tool": c.tool_name, "arguments": c.arguments, "source": c.source.model_dump(mode="json")}
        return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()
