"""Structured logs: what a log line is about, carried with the work, and the JSON formatter.

A leaf module. The ways in bind what they know (`bind(request_id=…)` in the ASGI layer; agent,
session, tool and call id in `services.tool_call_pre`; confirmation and channel in the outbox
worker) into a context variable; `ContextFilter`, on the console handler, copies the bound fields
onto every record logged while they are bound — in the same task or thread, and in threads that
`sync_to_async` and `asyncio` start from it (they copy the context). `GATEWAY_LOG_FORMAT=json`
writes each record as one JSON object per line (python-json-logger); `text`, the default and what
`make run` prints, stays the plain line it was. docs/operating.md ("Logs") lists the fields.

`configure` is Django's LOGGING_CONFIG: every process that sets Django up (the ASGI server, the
management commands) and the Celery worker and beat (`gateway.worker_logs`) log through the root's one
handler, uvicorn's own lines and Python's warnings included.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import logging.config
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
    from pythonjsonlogger.core import RESERVED_ATTRS
    from pythonjsonlogger.json import JsonFormatter

    return JsonFormatter(
        "%(asctime)s %(levelname)s %(name)s %(message)s",
        rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
        datefmt="%Y-%m-%dT%H:%M:%S%z",
        # uvicorn passes its message again with terminal colours (`extra={"color_message": …}`): not a field.
        reserved_attrs=[*RESERVED_ATTRS, "color_message"],
    )


# The loggers uvicorn gives handlers of its own (its LOGGING_CONFIG) before it imports the application.
SERVER_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")


def configure(config: dict[str, Any]) -> None:
    """Django's LOGGING_CONFIG (settings.LOGGING_CONFIG): `config` applied (`dictConfig`), then
    - uvicorn's loggers hand their records to the root's handler instead of writing them with uvicorn's
      own (plain text, access lines on stdout): its start-up, warnings and access lines come out in the
      gateway's format, once each. A logger uvicorn silenced (`--no-access-log`: no handler, not
      propagating) stays silent, and its levels (`--log-level`) stay as uvicorn set them;
    - Python's warnings (a library's `warnings.warn`, written straight to stderr otherwise) are logged
      (`py.warnings`), in the same format."""
    logging.config.dictConfig(config)
    for name in SERVER_LOGGERS:
        logger = logging.getLogger(name)
        if logger.handlers:
            for handler in list(logger.handlers):
                logger.removeHandler(handler)
            logger.propagate = True
    logging.captureWarnings(True)
