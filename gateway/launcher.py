"""`approval-gateway run` (and `make run`, which calls it): migrate, prepare the demo, then run the ASGI
server, a Celery worker and Celery beat together until Ctrl-C (or SIGTERM) stops them all. When a
configured channel takes its clicks over an outbound connection (Slack `mode: socket`, Feishu
`mode: long_connection`, …), `channel_connections` runs too.

Everything runs on embedded defaults unless the environment says otherwise (docs/operating.md): SQLite
and the broker in the var directory (gateway/paths.py), the server on GATEWAY_HOST:GATEWAY_PORT. Each
process is this Python running the gateway's own modules, so a clone and an installed wheel start alike.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from gateway import paths

PY = sys.executable
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = "8000"
# The worker and beat as `run` starts them (`python -m` these); make bench's idle part starts the same.
# One worker of one machine: no gossip, mingle or event heartbeats between workers (docs/operating.md).
WORKER_ARGS = ("celery", "--quiet", "-A", "gateway", "worker", "--pool", "threads", "--concurrency", "4",
               "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel", "WARNING")  # fmt: skip
BEAT_ARGS = ("celery", "--quiet", "-A", "gateway", "beat", "--loglevel", "WARNING")


def command(*args: str) -> list[str]:
    """The argv of one `approval-gateway` command run by this Python (a manage.py command by its name)."""
    return [PY, "-m", "gateway.cli", *args]


def environment(host: str, port: str, prog: str) -> dict[str, str]:
    """The environment the gateway's processes share: embedded defaults for one's own machine."""
    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "gateway.settings")
    # Every process agrees on one var directory, wherever it runs from.
    env["GATEWAY_VAR_DIR"] = str(paths.var_dir())
    if not paths.IS_CHECKOUT:
        # Installed: the current directory (the user's) is not put first on the children's import path, so a
        # `gateway/` folder of theirs cannot stand in for this package.
        env.setdefault("PYTHONSAFEPATH", "1")
    # Links in cards and on the welcome screen point where this server listens (GATEWAY_HOST/PORT).
    env.setdefault("GATEWAY_PUBLIC_URL", f"http://{host}:{port}")
    # On one's own machine the demo's webhooks and tools are local: let the gateway call loopback.
    env.setdefault("GATEWAY_OUTBOUND_ALLOW", "127.0.0.0/8,::1")
    # Without GATEWAY_AUDIT_KEY the audit is signed with the published development key: fine on one's
    # own machine, refused anywhere else (docs/audit.md).
    if not env.get("GATEWAY_AUDIT_KEY"):
        env.setdefault("GATEWAY_ALLOW_DEV_AUDIT_KEY", "1")
        print(f"{prog}: GATEWAY_AUDIT_KEY is not set; signing the audit with the DEVELOPMENT key (not for production)")
    # With metrics on (GATEWAY_METRICS_TOKEN), /metrics adds up the server's, the worker's and beat's
    # counts: they share a directory, emptied at each start (docs/operating.md, "Metrics").
    if env.get("GATEWAY_METRICS_TOKEN") and not env.get("PROMETHEUS_MULTIPROC_DIR"):
        metrics_dir = Path(env["GATEWAY_VAR_DIR"]) / "prometheus"
        shutil.rmtree(metrics_dir, ignore_errors=True)
        metrics_dir.mkdir(parents=True)
        env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    return env


def run(host: str | None = None, port: str | None = None, prog: str = "approval-gateway run") -> int:
    """Migrate, set up the demo, start everything and wait; the exit status of the whole."""
    host = host or os.environ.get("GATEWAY_HOST") or DEFAULT_HOST
    port = str(port or os.environ.get("GATEWAY_PORT") or DEFAULT_PORT)
    # SIGTERM (a supervisor, `kill`) stops everything like Ctrl-C does, instead of orphaning the children.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if paths.IS_CHECKOUT:
        os.chdir(paths.SOURCE_ROOT)  # a clone's processes import its packages from here
    env = environment(host, port, prog)
    subprocess.run(command("migrate", "--noinput", "-v", "0"), check=True, env=env)
    # The embedded broker's tables made once, here, not raced for by the processes below (gateway/celery.py).
    subprocess.run([PY, "-c", "from gateway.celery import prepare_embedded_broker as p; p()"], check=True, env=env)
    # Printed again once everything runs, so it is the last thing on the screen.
    welcome = subprocess.run(command("demo_setup"), check=True, env=env, capture_output=True, text=True).stdout
    connections = channels_needing_connections(env)
    # uvicorn (`gateway.serve`: its command line, resting between ticks) puts its --app-dir first on the import
    # path: the directory this package was loaded from.
    app_dir = str(paths.SOURCE_ROOT)
    procs = {
        "server": subprocess.Popen(
            [PY, "-m", "gateway.serve", "gateway.asgi:application", "--app-dir", app_dir,
             "--http", "gateway.http_protocol:OneWriteProtocol",
             "--host", host, "--port", port, "--log-level", "warning"],
            env=env,
        ),
        "worker": subprocess.Popen(
            [PY, "-m", *WORKER_ARGS],
            env=env,
        ),
        "beat": subprocess.Popen(
            [PY, "-m", *BEAT_ARGS],
            env=env,
        ),
    }  # fmt: skip
    if connections:
        procs["connections"] = subprocess.Popen(command("channel_connections"), env=env)
    try:
        if not _wait_until_serving(procs, host, port):
            dead = ", ".join(f"{name} exited with {p.returncode}" for name, p in procs.items() if p.poll() is not None)
            print(f"{prog}: stopped before the server answered: {dead}", file=sys.stderr)
            return next(p.returncode for p in procs.values() if p.poll() is not None) or 1
        print(welcome, flush=True)
        held = f", connections for {', '.join(connections)}" if connections else ""
        print(
            f"Running: server on http://{host}:{port}, Celery worker and beat{held}. Ctrl-C stops everything.\n",
            flush=True,
        )
        while True:
            for name, proc in procs.items():
                if proc.poll() is not None:
                    print(f"{name} exited with {proc.returncode}; stopping the rest", file=sys.stderr)
                    return proc.returncode or 1
            time.sleep(0.5)
    except KeyboardInterrupt:
        print("\nStopping…", flush=True)
        return 0
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.time() + 10
        for proc in procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                proc.kill()


def channels_needing_connections(env: dict[str, str]) -> list[str]:
    """Channels of the applied config whose clicks come over an outbound connection (docs/slack.md §7)."""
    listed = subprocess.run(
        command("channel_connections", "--list"), check=True, env=env, capture_output=True, text=True, cwd=_cwd()
    ).stdout
    return [line.split("\t", 1)[0] for line in listed.splitlines() if line.strip()]


def _cwd() -> Path | None:
    """Where a child starts: a clone's root (it imports the clone's packages from there), else here."""
    return paths.SOURCE_ROOT if paths.IS_CHECKOUT else None


def _wait_until_serving(
    procs: dict[str, subprocess.Popen], host: str, port: str, say_every: float = 15.0, out=None
) -> bool:
    """Until /healthz answers (True) or a process dies (False). A slow start is waited out, not reported as
    running: a cold machine can take longer than any fixed limit, and "Running" must mean the server answers.
    What is awaited is said on stderr every `say_every` seconds."""
    out = out or sys.stderr
    started = time.monotonic()
    next_word = started + say_every
    while all(p.poll() is None for p in procs.values()):
        try:
            with urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=1):
                return True
        except OSError:
            if time.monotonic() >= next_word:
                print(f"waiting for the server to answer on http://{host}:{port}/healthz "
                      f"({time.monotonic() - started:.0f} s)", file=out, flush=True)  # fmt: skip
                next_word += say_every
            time.sleep(0.3)
    return False
