"""With GATEWAY_LOG_FORMAT=json, every line the documented processes write is one JSON object, each record
once (docs/operating.md, "Logs"): the ASGI server (uvicorn's own lines too: start-up, warnings, access
lines), the Celery worker (Celery's lines, its start-up banner and its shutdown notice; a card's delivery
line names the confirmation request and the channel) and Celery beat.

Each is started as docs/operating.md ("The processes") runs it, as a real process of its own on this test's
database and broker; the worker consumes a queue no other test uses. Both its standard output and its
standard error are read, line by line, as they come."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from django.db import connection

from approvals.models import Outbox, OutboxKind
from gateway.celery import app
from tests.conftest import apply_config, make_agent_client
from tests.fakes.slack_api import FakeSlack
from tests.support import wait_until

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 90  # a process loads Django, the apps and the vendor SDKs first; on a busy machine, slowly

pytestmark = pytest.mark.django_db(transaction=True)



def slack_config(fake_slack: FakeSlack) -> str:
    """A gate whose cards go to Slack (FakeSlack): a card the worker really delivers."""
    return f"""
channels:
  - {{name: logs-slack, kind: slack, bot_token: xoxb-1-2-logs, signing_secret: logs-secret, channel_id: C0LOGS,
     api_base_url: "{fake_slack.base_url}"}}
agents:
  - name: logs-bot
    hooks:
      - {{kind: approval_gate, tools: ["pay__*"], channel: logs-slack, timeout_seconds: 1800}}
"""


def command(name: str, *args: str) -> list[str]:
    """A documented command, run from this virtualenv's own scripts (`uvicorn`, `celery`)."""
    return [shutil.which(name, path=os.path.dirname(sys.executable)) or name, *args]


class Process:
    """A documented command in a process of its own, logging JSON, on this test's database and broker."""

    def __init__(self, argv: list[str]) -> None:
        db = connection.settings_dict
        login = quote(db["USER"]) + (f":{quote(db['PASSWORD'])}" if db.get("PASSWORD") else "")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DJANGO_", "GATEWAY_LOG_"))}
        env.update(
            DATABASE_URL=f"postgres://{login}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
            DJANGO_SETTINGS_MODULE="gateway.settings",
            GATEWAY_LOG_FORMAT="json",
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self.proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )  # fmt: skip
        self.readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.out), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, self.err), daemon=True),
        ]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _read(stream: Any, lines: list[str]) -> None:
        for line in stream:
            lines.append(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float = 30) -> str:
        """The first line (of either stream) holding `text`, once it is written."""

        def written() -> str | None:
            found = next((line for line in self.out + self.err if text in line), None)
            assert found or self.proc.poll() is None, f"exited with {self.proc.returncode}:\n{self.transcript()}"
            return found

        try:
            return wait_until(written, timeout=timeout, what=repr(text))
        except AssertionError as failed:
            raise AssertionError(f"{failed}\n{self.transcript()}") from None

    def stop(self) -> int:
        """SIGTERM (what a process manager sends), then every line it wrote until it exited."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        for reader in self.readers:
            reader.join(timeout=10)
        return code

    def transcript(self) -> str:
        return "\n".join(["--- stdout", *self.out, "--- stderr", *self.err])

    def records(self) -> list[dict[str, Any]]:
        """Each line of both streams as the JSON object it must be; each record written once."""
        lines = self.out + self.err
        assert lines, "nothing was written"
        records = []
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                raise AssertionError(f"not a JSON line: {line!r}\n{self.transcript()}") from None
            assert isinstance(record, dict), line
            assert {"time", "level", "logger", "message"} <= set(record), line
            records.append(record)
        twice = sorted({line for line in lines if lines.count(line) > 1})
        assert not twice, f"written twice: {twice}"
        return records


@pytest.fixture
def started():
    processes: list[Process] = []

    def start(argv: list[str]) -> Process:
        processes.append(Process(argv))
        return processes[-1]

    yield start
    for process in processes:
        process.stop()


def test_the_asgi_server_writes_only_json_its_access_lines_and_warnings_too(started):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = started(
        command("uvicorn", "gateway.asgi:application", "--host", "127.0.0.1", "--port", str(port),
                "--lifespan", "off", "--proxy-headers", "--forwarded-allow-ips", "127.0.0.1")
    )  # fmt: skip
    server.wait_for("Uvicorn running on", timeout=START_TIMEOUT)
    url = f"http://127.0.0.1:{port}"

    assert httpx.get(f"{url}/healthz", headers={"X-Request-ID": "req-json-1"}).status_code == 200
    assert httpx.get(f"{url}/no/such/page", headers={"X-Request-ID": "req-json-2"}).status_code == 404
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        raw.sendall(b"NOT HTTP AT ALL\r\n\r\n")  # uvicorn's warning: "Invalid HTTP request received."
        assert raw.recv(1024).startswith(b"HTTP/1.1 400")
    server.wait_for("Invalid HTTP request received.")
    server.stop()  # (uvicorn stops gracefully, then ends as the signal asks: -SIGTERM)
    records = server.records()

    messages = [(r["logger"], r["level"], r["message"]) for r in records]
    assert ("uvicorn.error", "WARNING", "Invalid HTTP request received.") in messages
    assert ("uvicorn.error", "INFO", "Finished server process [%d]" % server.proc.pid) in messages
    (healthz,) = [r for r in records if r["logger"] == "uvicorn.access" and "/healthz" in r["message"]]
    assert healthz["message"].endswith('"GET /healthz HTTP/1.1" 200')
    assert healthz["request_id"] == "req-json-1"  # the access line names the request, as every line does
    (missing,) = [r for r in records if r["logger"] == "uvicorn.access" and "/no/such/page" in r["message"]]
    assert missing["request_id"] == "req-json-2"
    assert not any("color_message" in r for r in records)  # uvicorn's coloured copy of a message is no field
    assert server.out == []  # uvicorn writes its access lines to stdout: now they are the gateway's, on stderr


def test_the_worker_writes_only_json_its_banner_too_and_a_delivery_line_names_the_request(
    live_gateway, fake_slack, started
):
    apply_config(slack_config(fake_slack))
    agent = make_agent_client(live_gateway, "logs-bot")
    confirmation_id = agent.pre_tool_use("pay__invoice", {"amount": 3}).json()["confirmation_id"]
    card = Outbox.objects.get(confirmation_id=confirmation_id, kind=OutboxKind.CARD)
    queue, name = f"test-{uuid.uuid4().hex}", f"logs-test-{uuid.uuid4().hex[:8]}"
    worker = started(
        command("celery", "-A", "gateway", "worker", "--pool", "threads", "--concurrency", "8",
                "--without-gossip", "--without-mingle", "--loglevel", "INFO", "-Q", queue, "-n", f"{name}@%h")
    )  # fmt: skip
    worker.wait_for(f"{name}@", timeout=START_TIMEOUT)
    worker.wait_for("ready.")

    app.send_task("approvals.tasks.deliver_outbox", args=[card.pk], queue=queue)
    worker.wait_for("card sent")
    assert worker.stop() == 0, worker.transcript()
    records = worker.records()

    (banner,) = [r for r in records if r["message"] == "celery worker starting"]
    assert banner["hostname"].startswith(f"{name}@") and banner["queues"] == [queue]
    assert "approvals.tasks.deliver_outbox" in banner["tasks"] and banner["pool"] == "thread"
    assert any(r["logger"] == "celery.apps.worker" and r["message"].endswith("ready.") for r in records)
    (sent,) = [r for r in records if r["message"].startswith(f"outbox {card.pk}: card sent")]
    assert sent["confirmation_id"] == confirmation_id and sent["channel"] == "logs-slack"
    assert sent["logger"] == "approvals.services"
    (succeeded,) = [r for r in records if "succeeded" in r["message"]]
    assert succeeded["logger"] == "celery.app.trace"  # Celery's own lines at its --loglevel
    # What Celery says from its signal handler as it stops, on stdout, is a JSON line too.
    assert [json.loads(line)["message"] for line in worker.out] == ["worker: Warm shutdown (MainProcess)"]
    agent.http.close()


def test_beat_stopped_while_it_sends_the_tick_sends_it_and_exits_0(started, tmp_path, monkeypatch):
    """A stop (SIGTERM) that comes while beat is sending a task is handled once the task is sent
    (`gateway.beat.Scheduler.apply_async`): Celery's handler used to close the schedule and raise in the middle
    of the send — a read from a closed socket, the tick not sent, exit status 1. Beat here uses a Redis of
    its own, told to hold every write for a few seconds (CLIENT PAUSE) once beat has started: the tick's
    send waits in it, and the stop comes then."""
    import redis

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        own = redis.Redis(port=port)
        wait_until(lambda: _answers(own), what="the test's own Redis")
        monkeypatch.setenv("CELERY_BROKER_URL", f"redis://127.0.0.1:{port}/0")
        schedule = str(tmp_path / "schedule")
        beat = started(command("celery", "-A", "gateway", "beat", "-s", schedule, "--loglevel", "INFO"))
        beat.wait_for("beat: Starting...", timeout=START_TIMEOUT)
        own.execute_command("CLIENT", "PAUSE", "5000", "WRITE")
        beat.wait_for("Scheduler: Sending due task gateway-tick")
        assert own.llen("celery") == 0  # (held: the send has not gone through)
        assert beat.stop() == 0, beat.transcript()
        assert own.llen("celery") == 1, beat.transcript()  # the tick, sent
        assert not [r for r in beat.records() if r["level"] in ("ERROR", "CRITICAL")], beat.transcript()
    finally:
        server.terminate()
        server.wait(timeout=10)


def _answers(client: Any) -> bool:
    try:
        return bool(client.ping())
    except Exception:
        return False


def test_beat_writes_only_json_its_banner_too(started, tmp_path):
    beat = started(
        command("celery", "-A", "gateway", "beat", "-s", str(tmp_path / "celerybeat-schedule"), "--loglevel", "INFO")
    )
    beat.wait_for("beat: Starting...", timeout=START_TIMEOUT)
    beat.wait_for("Scheduler: Sending due task gateway-tick")
    assert beat.stop() == 0, beat.transcript()
    records = beat.records()
    app.control.purge()  # what beat queued names nothing of this test's; no worker of a later test should run it

    (banner,) = [r for r in records if r["message"] == "celery beat starting"]
    assert banner["logger"] == "gateway.celery"
    assert banner["schedule"] == str(tmp_path / "celerybeat-schedule")
    assert banner["broker"].startswith("redis://")
    assert beat.out == []  # the banner Celery prints on stdout is that one record
