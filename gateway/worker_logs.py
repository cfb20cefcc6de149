"""The Celery worker's and beat's lines in the gateway's logging (docs/operating.md, "Logs").

Left to itself, Celery replaces the root logger's handler with its own (`worker_hijack_root_logger`):
the gateway's lines lose their format and the fields bound to them. Here:

- a `setup_logging` receiver is connected, so Celery configures no logging at all: the gateway's
  (`settings.LOGGING`, through `gateway_utils.logs.configure`) applies, and `--loglevel` sets the level of
  Celery's own loggers (`celery.*`); the gateway's follow GATEWAY_LOG_LEVEL. The worker applies it
  already when it starts (`celeryd_init`), before it warns of anything (running as root);
- with GATEWAY_LOG_FORMAT=json, what Celery prints besides its logging is a JSON line too: the worker's
  and beat's start-up banners become one record each (`gateway.celery`, "celery worker starting" /
  "celery beat starting", the banner's facts as fields), and what the worker says from a signal handler
  ("worker: Warm shutdown (MainProcess)") is written as a JSON object (with `os.write`, as Celery does,
  since a signal may arrive in the middle of a logging call).

`gateway.celery` makes its app's `Worker` and `Beat` these classes.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from celery import signals
from celery.apps import beat as celery_beat
from celery.apps import worker as celery_worker
from celery.utils.imports import qualname

from gateway_utils import logs

logger = logging.getLogger("gateway.celery")


def _configure(loglevel: int | str | None = None) -> None:
    from django.conf import settings
    from django.utils.log import configure_logging

    configure_logging(settings.LOGGING_CONFIG, settings.LOGGING)
    if loglevel:
        logging.getLogger("celery").setLevel(loglevel)


@signals.setup_logging.connect
def _celery_sets_up_logging(loglevel: int | str | None = None, **kwargs: Any) -> None:
    """With a receiver of this signal, Celery leaves the root logger alone: the gateway's logging applies."""
    _configure(loglevel)


@signals.celeryd_init.connect
def _worker_starts(**kwargs: Any) -> None:
    """Sent before the worker checks its privileges, whose warning (running as root) would be written
    before its logging is set up."""
    _configure()


def _json() -> bool:
    from django.conf import settings

    return settings.GATEWAY_LOG_FORMAT == "json"


def _say_as_json(msg: str, f: Any = sys.__stderr__) -> None:
    """`celery.apps.worker.safe_say`, one JSON object per message: written with one `os.write` from a
    signal handler, so formatted here without any lock."""
    record = logging.LogRecord("celery.apps.worker", logging.WARNING, __file__, 0, msg.strip(), None, None)
    try:
        os.write(f.fileno(), (_SAY_FORMATTER.format(record) + "\n").encode())
    except (AttributeError, OSError, ValueError):
        pass  # as Celery's: losing the notice must never stop the shutdown


_SAY_FORMATTER = logs.json_formatter()


class Worker(celery_worker.Worker):
    """`celery worker`, whose banner and shutdown notices are JSON lines when the logs are."""

    def emit_banner(self) -> None:
        if not _json():
            return super().emit_banner()
        pool = self.pool_cls if isinstance(self.pool_cls, str) else self.pool_cls.__module__
        queues = self.app.amqp.queues
        logger.info(
            "celery worker starting",
            extra={
                "hostname": self.hostname,
                "broker": self.app.connection().as_uri(),  # the password masked
                "pool": pool.split(".")[-1],
                "concurrency": self.concurrency,
                "queues": sorted(queues.consume_from or queues),  # those it consumes (-Q), else all
                "tasks": sorted(name for name in self.app.tasks if not name.startswith("celery.")),
            },
        )

    def install_platform_tweaks(self, worker: Any) -> None:
        if _json():
            # Read as a global by the signal handlers Celery installs here.
            celery_worker.safe_say = _say_as_json
        super().install_platform_tweaks(worker)


class Beat(celery_beat.Beat):
    """`celery beat`, whose banner is one JSON record when the logs are JSON."""

    def __init__(self, *args: Any, quiet: bool = False, **kwargs: Any) -> None:
        self.as_record = _json() and not quiet
        super().__init__(*args, quiet=quiet or self.as_record, **kwargs)

    def setup_logging(self, colorize: bool | None = None) -> None:
        """Where beat starts scheduling: just after the banner it would have printed."""
        super().setup_logging(colorize)
        if self.as_record:
            scheduler = self.scheduler_cls
            logger.info(
                "celery beat starting",
                extra={
                    "broker": self.app.connection().as_uri(),
                    "scheduler": scheduler if isinstance(scheduler, str) else qualname(scheduler),
                    "schedule": self.schedule,
                },
            )
