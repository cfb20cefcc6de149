"""A Celery worker killed while it delivers a card: the card goes out within 15 s of its death (docs/operating.md,
"Scaling each"; the outbox lease in approvals/services/delivery.py).

Real processes, as in production: a worker (`celery -A gateway worker --pool threads`) takes the card's task
and is stuck posting it (the Slack fake holds its answer), a second worker and beat run beside it, and the
first is killed with SIGKILL. Its lease went with its database session, so beat's relay hands the card to the
second worker at once — not once the lease's 60 s are up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from django.db import connection

from approvals.models import Outbox
from tests.conftest import apply_config, make_agent_client
from tests.fakes.slack_api import FakeSlack
from tests.support import wait_until

ROOT = Path(__file__).resolve().parents[2]
TOOL = "oa__purchase_pay"

pytestmark = pytest.mark.django_db(transaction=True)


class CeleryProcess:
    """`celery -A gateway <args>` in a process of its own, on this test's database and broker."""

    def __init__(self, *args: str, ready: str, name: str = "") -> None:
        self.name = name or f"gateway-test-{uuid.uuid4().hex[:8]}"
        self.lines: list[str] = []
        db = connection.settings_dict
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DJANGO_"))}
        env.update(
            DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
            DJANGO_SETTINGS_MODULE="gateway.settings",
            PGAPPNAME=self.name,  # libpq's application_name: its connections told apart in pg_stat_activity
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "gateway", *args, "--loglevel", "INFO"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        threading.Thread(target=self._read, daemon=True).start()
        wait_until(lambda: any(ready in line for line in self.lines) or self.proc.poll() is not None,
                   timeout=90, what=f"celery {args[0]} to start")  # fmt: skip
        assert self.proc.poll() is None, "\n".join(self.lines[-30:])

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line.rstrip())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def worker() -> CeleryProcess:
    """A worker as docs/operating.md runs it (threads); its Celery node name is its `name`."""
    name = f"test-{uuid.uuid4().hex[:8]}@dbdrop"
    return CeleryProcess(
        "worker", "--pool", "threads", "--concurrency", "2", "-n", name,
        "--without-heartbeat", "--without-gossip", "--without-mingle", ready="ready.", name=name,
    )  # fmt: skip


def consuming(process: CeleryProcess, on: bool) -> None:
    """The worker takes tasks from the default queue, or stops taking them (Celery's remote control)."""
    from gateway.celery import app

    change = app.control.add_consumer if on else app.control.cancel_consumer
    replies = change("celery", destination=[process.name], reply=True, timeout=10)
    assert replies, f"the worker {process.name} did not answer"


@pytest.fixture
def processes():
    started: list[CeleryProcess] = []
    yield started
    for process in started:
        process.stop()


def test_a_card_whose_worker_is_killed_while_posting_it_goes_out_within_15_s(
    fake_slack: FakeSlack, live_gateway, processes, tmp_path
):
    from gateway.celery import app

    app.control.purge()  # tasks queued by earlier tests name rows that no longer exist
    apply_config(
        f"""
channels:
  - name: ops-slack
    kind: slack
    bot_token: xoxb-1111-2222-killTokenValue
    signing_secret: a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6
    channel_id: C0APPROVALS
    api_base_url: {fake_slack.base_url}
agents:
  - name: purchasing-bot
    hooks:
      - kind: approval_gate
        name: finance-gate
        tools: ["{TOOL}"]
        channel: ops-slack
        approvers: ["U0ALICE"]
"""
    )
    agent = make_agent_client(live_gateway, "purchasing-bot")
    # Two workers and beat, as in production. The second takes no task until the first has the card's.
    doomed, survivor = worker(), worker()
    processes.extend([doomed, survivor])
    processes.append(CeleryProcess("beat", "-s", str(tmp_path / "celerybeat-schedule"), ready="beat: Starting"))
    consuming(survivor, False)
    fake_slack.fail_next("chat.postMessage", delay=12)  # its post hangs (then fails): the worker is stuck in it

    answer = agent.pre_tool_use(TOOL, {"amount": 80000})
    assert answer.json()["decision"] == "pending"
    wait_until(lambda: fake_slack.calls("chat.postMessage"), what="the first worker to be posting the card")
    card = Outbox.objects.get(kind="card")
    assert (card.status, card.attempts) == ("pending", 1)  # claimed: leased by the first worker
    assert card.locked_until is not None
    consuming(survivor, True)

    doomed.proc.send_signal(signal.SIGKILL)  # while its post is in flight (the fake holds it 12 s)
    doomed.proc.wait(timeout=10)
    died = time.monotonic()
    assert len(fake_slack.calls("chat.postMessage")) == 1 and not fake_slack.messages

    wait_until(lambda: fake_slack.messages, timeout=15, what="the card to go out after its worker's death")
    assert time.monotonic() - died < 15
    wait_until(lambda: Outbox.objects.get(pk=card.pk).status == "sent", what="the delivery to be recorded")
    assert len(fake_slack.calls("chat.postMessage")) == 2  # the lost attempt and the one that went out
    agent.http.close()


def test_a_lease_is_held_while_its_session_lives_and_free_once_it_is_gone(agent):
    from approvals import services
    from approvals.models import ConfirmationRequest

    cid = agent.pre_tool_use(TOOL, {"amount": 1}).json()["confirmation_id"]
    row = Outbox.objects.create(confirmation=ConfirmationRequest.objects.get(pk=cid), kind="webhook", dedupe_key="lease")
    held, give_back = threading.Event(), threading.Event()
    holder: dict = {}

    def take_the_lease() -> None:  # a worker's thread, on a connection of its own
        try:
            holder["row"] = services.outbox_claim(outbox_id=row.pk)
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                holder["pid"] = cursor.fetchone()[0]
            held.set()
            give_back.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=take_the_lease, daemon=True)
    thread.start()
    try:
        assert held.wait(30)
        assert holder["row"] is not None
        assert Outbox.objects.get(pk=row.pk).locked_by == holder["pid"]
        # Held: nobody else takes it, the relay leaves it alone.
        assert services.outbox_claim(outbox_id=row.pk) is None
        assert row.pk not in services.outbox_due_ids()

        with connection.cursor() as cursor:  # the holder's session ends, as its worker's death ends it
            cursor.execute("SELECT pg_terminate_backend(%s)", [holder["pid"]])
        wait_until(lambda: row.pk in services.outbox_due_ids(), timeout=10, what="the relay to see the lease gone")
        again = services.outbox_claim(outbox_id=row.pk)
        assert again is not None and again.attempts == 2
        assert services.outbox_claim(outbox_id=row.pk) is None  # and held again, by this session now
    finally:
        give_back.set()
        thread.join(30)
