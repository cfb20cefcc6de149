"""The Celery app `gateway` (`celery -A gateway worker`, `celery -A gateway beat`): Celery's Django
fix-up keeping a prefork child's connection pool, the worker's and beat's lines in the gateway's
logging (`gateway.worker_logs`), and their CPU priority below the server's (`yield_the_cpu`)."""

import logging
import os
from functools import cached_property
from typing import Any

from celery import Celery, bootsteps, signals
from celery.fixups.django import DjangoFixup, DjangoWorkerFixup

from gateway import worker_logs
from gateway_utils import tracing

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway.settings")


class WorkerFixupKeepingThePool(DjangoWorkerFixup):
    """Celery's Django fix-up for a worker, except that a task gives its database connection back to
    Django's psycopg pool when it ends instead of closing the pool (celery/celery#10554).

    The stock fix-up closes every pool before and after each task of a prefork child, so every task
    opened a new PostgreSQL connection and a new pool: ~7 ms of the worker's CPU and a backend started
    in PostgreSQL, every 2 s for the expiry sweep alone, beside the server on a small machine. Here the
    pools are closed where the stock fix-up closes them except around a task: in the parent, in a child
    as it starts (it inherited its parent's) and, added, as it exits. A connection kept between tasks
    may have died (a restart, a failover): the pool lends none the server has closed, in a worker as in a
    server (gateway/postgresql/base.py).
    """

    _in_a_task = False

    def install(self) -> "WorkerFixupKeepingThePool":
        signals.worker_process_shutdown.connect(self.on_worker_process_shutdown, weak=False)
        return super().install()

    def on_task_prerun(self, sender: Any, **kwargs: Any) -> None:
        self._keeping_the_pool(super().on_task_prerun, sender, **kwargs)

    def on_task_postrun(self, sender: Any, **kwargs: Any) -> None:
        self._keeping_the_pool(super().on_task_postrun, sender, **kwargs)

    def on_worker_process_shutdown(self, **kwargs: Any) -> None:
        self._close_database()

    def _keeping_the_pool(self, close: Any, *args: Any, **kwargs: Any) -> None:
        self._in_a_task = True
        try:
            close(*args, **kwargs)
        finally:
            self._in_a_task = False

    def _is_prefork(self) -> bool:
        # The stock `_close_database` closes the pools of a prefork worker whenever this is true.
        return not self._in_a_task and super()._is_prefork()


class DjangoFixupKeepingThePool(DjangoFixup):
    """Celery's Django fix-up, with `WorkerFixupKeepingThePool` for the worker."""

    @property
    def worker_fixup(self) -> DjangoWorkerFixup:
        if self._worker_fixup is None:
            self._worker_fixup = WorkerFixupKeepingThePool(self.app)
        return self._worker_fixup

    @worker_fixup.setter
    def worker_fixup(self, value: DjangoWorkerFixup) -> None:
        self._worker_fixup = value


def django_fixup(app: Celery) -> DjangoFixupKeepingThePool:
    return DjangoFixupKeepingThePool(app).install()


class GatewayCelery(Celery):
    """A Celery app whose `celery worker` and `celery beat` log as the gateway does (`gateway.worker_logs`)."""

    @cached_property
    def Worker(self) -> Any:  # noqa: N802 (Celery's name)
        return self.subclass_with_self(worker_logs.Worker)

    @cached_property
    def Beat(self) -> Any:  # noqa: N802 (Celery's name)
        return self.subclass_with_self(worker_logs.Beat)


def yield_the_cpu(**kwargs: Any) -> None:
    """`celery worker` (before its pool starts: the children inherit it) and `celery beat` lower their CPU
    priority by GATEWAY_WORKER_NICE (10): housekeeping and deliveries never need the CPU as urgently as a
    waiting agent or approver. Beside the server on a small machine, beat's tick (~15 ms of CPU every 12 s
    at rest) landing on a click made that click the run's slowest (docs/benchmarks.md); at a lower
    priority it waits the few milliseconds the click takes. The worker still has the whole CPU whenever
    the server does not want it. Only in those commands' own processes (a worker run inside a test process
    never renices it)."""
    from django.conf import settings

    wanted = settings.GATEWAY_WORKER_NICE
    if wanted <= 0:
        return
    try:
        now = os.nice(0)
        if now < wanted:
            os.nice(wanted - now)
    except OSError as exc:  # (a platform without nice, or a limit: the priority stays)
        logging.getLogger("gateway.celery").warning("could not lower the worker's CPU priority: %s", exc)


class QuietBrokerTimers(bootsteps.StartStopStep):
    """A worker at rest wakes when something is due, not every second.

    kombu's Redis transport (5.7) adds to the worker's event loop a timer firing every second to refresh
    the binding tables of queues that expire (`x-expires`); the gateway's queues never expire, so each
    firing does nothing but wake the worker — two thirds of an idle worker's wakes. Here that timer fires
    every BINDING_REFRESH_SECONDS instead, as each time the consumer (re)registers with the event loop. Its
    own schedule is unchanged: a binding is refreshed every third of its TTL (an hour at least) and swept
    every minute, both now up to this much later. The loop then wakes for the broker's BRPOP
    (`polling_interval`, 5 s) and kombu's 10 s timers. A kombu whose transport keeps no such timer is left as
    it is (tests/gateway/test_worker_at_rest.py fails then, to look again)."""

    BINDING_REFRESH_SECONDS = 30.0
    requires = ("celery.worker.consumer.connection:Connection",)

    def register_with_event_loop(self, consumer: Any, hub: Any) -> None:
        cycle = getattr(consumer.connection.transport, "cycle", None)
        every_second = getattr(cycle, "_binding_expiry_tref", None)
        if every_second is None:
            return
        every_second.cancel()
        refresh = cycle.maybe_refresh_binding_expiry
        cycle._binding_expiry_tref = hub.call_repeatedly(self.BINDING_REFRESH_SECONDS, refresh)


signals.celeryd_init.connect(yield_the_cpu, weak=False)
signals.beat_init.connect(yield_the_cpu, weak=False)


app = GatewayCelery("gateway", fixups=[django_fixup])
app.config_from_object("django.conf:settings", namespace="CELERY")
app.steps["consumer"].add(QuietBrokerTimers)
app.autodiscover_tasks()
tracing.configure()  # off unless OTEL_* variables ask for traces


def prepare_embedded_broker() -> bool:
    """Make the embedded broker's tables and queues (kombu's SQLAlchemy transport on SQLite: `make run`'s
    default) in this one process, before the server, worker and beat start. Each makes what is missing as it
    first connects, and two making them at once is a race one loses — `table kombu_message already exists`,
    then `UNIQUE constraint failed: kombu_queue.name`, which the worker takes for an unrecoverable error: it
    exits, and `approval-gateway run` stops everything. True if there was such a broker; any other (Redis)
    needs nothing."""
    if not str(app.conf.broker_url).startswith(("sqla+", "sqlalchemy+")):
        return False
    with app.connection_for_write() as connection:
        channel = connection.default_channel  # (opening it makes the tables)
        for queue in app.amqp.queues.values():
            queue.bind(channel).declare()
    return True
