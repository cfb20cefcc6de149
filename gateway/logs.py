"""Structured logs: what a log line is about, carried with the work, and the JSON formatter.

A leaf module. The ways in bind what they know (`bind(request_id=…)` in the ASGI layer; agent,
session, tool and call id in `services.tool_call_pre`; confirmation and channel in the outbox
worker) into a context variable; `ContextFilter`, on the console handler, copies the bound fields
onto every record logged while they are bound — in the same task or thread, and in threads that
`sync_to_async` and `asyncio` start from it (they copy the context). `GATEWAY_LOG_FORMAT=json`
writes each record as one JSON object per line (python-json-logger); `text`, the default and what
`make run` prints, stays the plain line it was. docs/operating.md ("Logs") lists the fields.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import re
import uuid
from collections.abc import Iterator
from typing import Any

# The fields a line may carry, in the order a reader looks for them.
FIELDS = (
    "request_id",
    "agent",
    "session_id",
    "tool_name",
    "tool_call_id",
    "confirmation_id",
    "channel",
)

_bound: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar(
    "gateway_log_context", default={}
)  # noqa: B039 never mutated
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def bind(**fields: Any) -> contextvars.Token:
    """Add `fields` (empty ones left out) to what every record logged from here on carries;
    `unbind(token)` restores what was bound before."""
    merged = {
        **_bound.get(),
        **{key: value for key, value in fields.items() if value not in (None, "")},
    }
    return _bound.set(merged)


def unbind(token: contextvars.Token) -> None:
    _bound.reset(token)


@contextlib.contextmanager
def bound(**fields: Any) -> Iterator[None]:
    token = bind(**fields)
    try:
        yield
    finally:
        unbind(token)


def current() -> dict[str, Any]:
    """What is bound now."""
    return dict(_bound.get())


def request_id(given: str | None) -> str:
    """The request's id: the caller's `X-Request-ID` if it is a sane token, else a new one."""
    if given and _REQUEST_ID.match(given):
        return given
    return uuid.uuid4().hex


class ContextFilter(logging.Filter):
    """Copies the bound fields onto each record (a field the call passed in `extra=` wins)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _bound.get().items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


def json_formatter() -> logging.Formatter:
    """One JSON object per record: time, level, logger, message, the bound fields and any `extra=`."""
    from pythonjsonlogger.json import JsonFormatter

    return JsonFormatter(
        "%(asctime)s %(levelname)s %(name)s %(message)s",
        rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
        datefmt="%Y-%m-%dT%H:%M:%S%z",
    )
