"""The gateway rides through a database failover (docs/operating.md, "Database failover").

For real, end to end: a PostgreSQL primary with a synchronous streaming replica made by
pg_basebackup (tests/pg_pair.py, its own clusters on loopback ports), the gateway as its own
uvicorn process on a multi-host DATABASE_URL (`target_session_attrs=read-write`), agents
long-polling over HTTP throughout, decisions made on the web page. The primary is stopped as a
crash would stop it, the replica is promoted, and then:

- the allowed path answers again within seconds of the promotion, and every call after that
  succeeds (no stale pooled connection fails a request);
- while no primary is reachable the agent API (its ASGI hot paths and its DRF views alike)
  answers 503 `database_unavailable` with Retry-After (never a 500), so clients retry;
- the LISTEN connection is re-established on the new primary, and a waiting agent is woken by a
  decision made after the failover at once (the periodic re-check is off: only the notification
  can wake it);
- a request whose deadline passed while the database was down is expired by the gateway's
  expiry queue once it is back (no Celery beat runs here), and its waiter told;
- the decision committed just before the crash is still there, and its waiter gets it.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.pg_pair import PgPair
from tests.support import wait_until

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "correct horse battery staple"
CONFIG = """
channels:
  - {name: web, kind: web}
agents:
  - name: bot
    hooks:
      - kind: approval_gate
        name: pay-gate
        tools: ["pay"]
        channel: web
        approvers: ["alice"]
        timeout_seconds: 1800
      - kind: approval_gate
        name: quick-gate
        tools: ["quick__*"]
        channel: web
        approvers: ["alice"]
        timeout_seconds: 15
"""

pytestmark = pytest.mark.skipif(not Path("/usr/lib/postgresql").exists(), reason="needs PostgreSQL server binaries")


def _run(env: dict, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture
def pg_pair():
    pair = PgPair().start()
    yield pair
    pair.stop()


class Gateway:
    """The gateway as its own process (uvicorn) on the pair's multi-host URL."""

    def __init__(self, pair: PgPair, var_dir: Path) -> None:
        import socket

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "PYTEST_", "DJANGO_"))},
            "DJANGO_SETTINGS_MODULE": "gateway.settings",
            "DATABASE_URL": pair.url(),
            "REDIS_URL": os.environ["REDIS_URL"],
            "CELERY_BROKER_URL": os.environ["CELERY_BROKER_URL"],
            "GATEWAY_CHANNEL_PREFIX": f"failover-{os.getpid()}",
            "GATEWAY_VAR_DIR": str(var_dir),
            "GATEWAY_PUBLIC_URL": self.url,
            "GATEWAY_AUDIT_KEY": os.environ["GATEWAY_AUDIT_KEY"],  # the tests' key (production needs one: docs/audit.md)
            # Waiters are re-checked once an hour only: a wake-up within the test is a notification.
            "GATEWAY_WAIT_RECHECK_SECONDS": "3600",
            "GATEWAY_LOG_LEVEL": "WARNING",
        }
        self.log = var_dir / "gateway.log"
        self.process: subprocess.Popen | None = None

    def prepare(self, config_path: Path) -> tuple[str, str]:
        _run(self.env, "migrate", "--no-input")
        # The rest in one process (each manage.py costs a Django start-up): the config, alice, two keys.
        script = (
            "import io\n"
            "from django.contrib.auth.models import User\n"
            "from django.core.management import call_command\n"
            f"call_command('apply_config', {str(config_path)!r}, stdout=io.StringIO())\n"
            f"User.objects.create_user('alice', password={PASSWORD!r})\n"
            "for _ in range(2):\n"
            "    out = io.StringIO()\n"
            "    call_command('create_api_key', 'bot', stdout=out)\n"
            "    print('KEY', out.getvalue().strip().splitlines()[-1])\n"
        )
        keys = [line.split(" ", 1)[1] for line in _run(self.env, "shell", "-c", script).splitlines() if line.startswith("KEY ")]
        return keys[0], keys[1]

    def start(self) -> None:
        fd = self.sock.fileno()
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "gateway.asgi:application", "--fd", str(fd), "--lifespan", "off",
                 "--log-level", "warning"],
                cwd=ROOT, env=self.env, pass_fds=[fd], stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        wait_until(self._up, timeout=60, what="the gateway to serve /healthz")

    def _up(self) -> bool:
        assert self.process is not None and self.process.poll() is None, self.log.read_text()
        try:
            return httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.sock.close()


class WaitingAgent:
    """An agent long-polling its request until it is final, as a client does: a round that times out
    (pending) or finds the database gone (503) is simply asked again."""

    def __init__(self, url: str, key: str, confirmation_id: str) -> None:
        self.http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=90)
        self.confirmation_id = confirmation_id
        self.final: dict | None = None
        self.final_at: float | None = None
        self.rounds = 0
        self.errors: list[str] = []
        self.unavailable = 0
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"waiter-{confirmation_id[:8]}")
        self.thread.start()

    def _run(self) -> None:
        while self.final is None:
            self.rounds += 1
            try:
                answer = self.http.get(
                    f"/api/v1/confirmations/{self.confirmation_id}/wait",
                    params={"timeout": 60},
                )
            except httpx.TransportError as exc:
                self.errors.append(f"transport: {exc!r}")
                time.sleep(0.2)
                continue
            if answer.status_code == 503:
                assert answer.json()["error"]["code"] == "database_unavailable"
                self.unavailable += 1
                time.sleep(float(answer.headers.get("retry-after", "1")) / 4)
                continue
            if answer.status_code != 200:
                self.errors.append(f"{answer.status_code}: {answer.text[:300]}")
                time.sleep(0.2)
                continue
            body = answer.json()
            if body["status"] != "pending":
                self.final, self.final_at = body, time.monotonic()
        self.http.close()


class Approver:
    """alice on the approval page, signed in through the sign-in form."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=30)
        form = self.http.get("/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
        signed = self.http.post(
            "/login/",
            data={
                "csrfmiddlewaretoken": token,
                "username": "alice",
                "password": PASSWORD,
            },
        )
        assert signed.status_code == 302, signed.text

    def approve(self, confirmation_id: str) -> None:
        page = self.http.get(f"/approvals/{confirmation_id}/")
        assert page.status_code == 200, page.text[:500]
        fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', page.text))
        answer = self.http.post(
            f"/approvals/{confirmation_id}/",
            data={**fields, "decision": "approve", "reason": ""},
        )
        assert answer.status_code == 302, answer.text[:500]


def test_the_gateway_rides_through_a_failover_to_a_promoted_replica(pg_pair, tmp_path):
    config = tmp_path / "gateway.yaml"
    config.write_text(CONFIG)
    gateway = Gateway(pg_pair, tmp_path)
    try:
        key, other_key = gateway.prepare(config)
        gateway.start()
        _failover_scenario(gateway, pg_pair, key, other_key)
    finally:
        gateway.stop()


def _failover_scenario(gateway: Gateway, pair: PgPair, key: str, other_key: str) -> None:
    agent = httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)

    def ask(tool: str, **args) -> httpx.Response:
        return agent.post(
            "/api/v1/hooks/pre-tool-use",
            json={"session_id": "s-1", "tool_name": tool, "tool_args": args},
        )

    def allowed_call_ok() -> bool:
        answer = ask("read_file", path="/etc/motd")
        return answer.status_code == 200 and answer.json()["decision"] == "allow"

    assert allowed_call_ok()
    pending = {}
    for name in ("before", "at_crash", "after"):
        answer = ask("pay", amount=100, name=name)
        assert answer.status_code == 200 and answer.json()["decision"] == "pending", answer.text
        pending[name] = answer.json()["confirmation_id"]
    waiting = {name: WaitingAgent(gateway.url, other_key, cid) for name, cid in pending.items()}
    alice = Approver(gateway.url)

    # Before the failover: a decision wakes its waiter, as always.
    alice.approve(pending["before"])
    wait_until(lambda: waiting["before"].final, timeout=15, what="the first waiter to be told")
    assert waiting["before"].final["status"] == "approved"

    # Busy before the crash: the pool holds a connection per concurrent call, all to the old primary.
    with concurrent.futures.ThreadPoolExecutor(16) as burst:
        assert all(burst.map(lambda _: allowed_call_ok(), range(64)))

    quick = ask("quick__deploy", target="prod")
    assert quick.status_code == 200 and quick.json()["decision"] == "pending", quick.text
    quick_id = quick.json()["confirmation_id"]
    first = agent.get(f"/api/v1/confirmations/{quick_id}/wait", params={"timeout": 0}).json()
    deadline = _moment(first["expires_at"])
    waiting["quick"] = WaitingAgent(gateway.url, other_key, quick_id)

    # The last decision before the crash: answered, so committed on the synchronous replica too.
    alice.approve(pending["at_crash"])
    pair.stop_primary()
    stopped = time.time()

    # No primary: the agent API says so with a 503 the client retries, never a 500.
    down = ask("read_file", path="/etc/motd")
    assert down.status_code == 503, down.text
    assert down.json()["error"]["code"] == "database_unavailable"
    assert down.headers["retry-after"] == "1"
    detail = agent.get(f"/api/v1/confirmations/{pending['after']}")  # a DRF view, served by Django
    assert (detail.status_code, detail.json()["error"]["code"]) == (503, "database_unavailable"), detail.text
    assert detail.headers["retry-after"] == "1"

    # The quick request's deadline passes while there is no primary; then the replica is promoted.
    assert stopped < deadline, "the machine is too slow for this scenario: the deadline passed before the crash"
    wait_until(
        lambda: time.time() > deadline + 1,
        timeout=30,
        what="the quick request's deadline to pass",
    )
    pair.promote()
    promoted = time.monotonic()

    # The allowed path answers again within seconds, and keeps answering: no stale pooled connection.
    wait_until(
        allowed_call_ok,
        timeout=20,
        what="the allowed path to answer after the promotion",
    )
    recovered = time.monotonic() - promoted
    assert recovered < 15, f"the allowed path took {recovered:.1f} s to recover"
    failures = [
        answer.status_code for answer in (ask("read_file", n=n) for n in range(30)) if answer.status_code != 200
    ]
    assert failures == []

    # The LISTEN connection is back, on the new primary.
    def listening() -> bool:
        with pair.connect(pair.replica_port) as conn:
            rows = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'").fetchone()
        return rows[0] >= 1

    wait_until(listening, timeout=20, what="the gateway to LISTEN on the new primary")

    # The decision committed at the crash is kept, and its waiter gets it; the expired one is told too.
    wait_until(
        lambda: waiting["at_crash"].final,
        timeout=20,
        what="the waiter of the decision made at the crash",
    )
    assert waiting["at_crash"].final["status"] == "approved"
    wait_until(
        lambda: waiting["quick"].final,
        timeout=20,
        what="the waiter of the request that expired",
    )
    assert waiting["quick"].final["status"] == "expired"

    # A decision made after the failover wakes its waiter at once (the re-check is an hour away).
    assert waiting["after"].final is None
    alice_again = Approver(gateway.url)
    alice_again.approve(pending["after"])
    decided = time.monotonic()
    wait_until(
        lambda: waiting["after"].final,
        timeout=10,
        what="the waiter woken by the decision after the failover",
    )
    assert waiting["after"].final["status"] == "approved"
    assert waiting["after"].final_at - decided < 5

    # Nothing lost, nothing else broken: the new primary has every decision; no waiter saw a 500.
    with pair.connect(pair.replica_port) as conn:
        rows = dict(conn.execute("SELECT id::text, status FROM approvals_confirmationrequest").fetchall())
    assert rows == {
        pending["before"]: "approved",
        pending["at_crash"]: "approved",
        pending["after"]: "approved",
        quick_id: "expired",
    }
    assert {name: w.errors for name, w in waiting.items()} == {name: [] for name in waiting}
    agent.close()


def _moment(value: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(value).timestamp()
