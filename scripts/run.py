#!/usr/bin/env python
"""`make run`: migrate, prepare the demo, then run the ASGI server, a Celery
worker and Celery beat together until Ctrl-C stops them all. When a configured
channel takes its clicks over an outbound connection (Slack `mode: socket`,
Feishu `mode: long_connection`), `manage.py channel_connections` runs too."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
HOST = os.environ.get("GATEWAY_HOST", "127.0.0.1")
PORT = os.environ.get("GATEWAY_PORT", "8000")


def main() -> int:
    # SIGTERM (a supervisor, `kill`) stops everything like Ctrl-C does, instead of orphaning the children.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    os.chdir(ROOT)
    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "gateway.settings")
    # Links in cards and on the welcome screen point where this server listens (GATEWAY_HOST/PORT).
    env.setdefault("GATEWAY_PUBLIC_URL", f"http://{HOST}:{PORT}")
    # On one's own machine the demo's webhooks and tools are local: let the gateway call loopback.
    env.setdefault("GATEWAY_OUTBOUND_ALLOW", "127.0.0.0/8,::1")
    # Without GATEWAY_AUDIT_KEY the audit is signed with the published development key: fine on one's
    # own machine, refused anywhere else (docs/audit.md).
    if not env.get("GATEWAY_AUDIT_KEY"):
        env.setdefault("GATEWAY_ALLOW_DEV_AUDIT_KEY", "1")
        print("make run: GATEWAY_AUDIT_KEY is not set; signing the audit with the DEVELOPMENT key (not for production)")
    # With metrics on (GATEWAY_METRICS_TOKEN), /metrics adds up the server's, the worker's and beat's
    # counts: they share a directory, emptied at each start (docs/operating.md, "Metrics").
    if env.get("GATEWAY_METRICS_TOKEN") and not env.get("PROMETHEUS_MULTIPROC_DIR"):
        metrics_dir = Path(env.get("GATEWAY_VAR_DIR") or ROOT / "var") / "prometheus"
        shutil.rmtree(metrics_dir, ignore_errors=True)
        metrics_dir.mkdir(parents=True)
        env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    subprocess.run([PY, "manage.py", "migrate", "--noinput", "-v", "0"], check=True, env=env)
    # Printed again once everything runs, so it is the last thing on the screen.
    welcome = subprocess.run(
        [PY, "manage.py", "demo_setup"], check=True, env=env, capture_output=True, text=True
    ).stdout
    connections = channels_needing_connections(env)
    procs = {
        "server": subprocess.Popen(
            [PY, "-m", "uvicorn", "gateway.asgi:application", "--host", HOST, "--port", PORT, "--log-level", "warning"],
            env=env,
        ),
        "worker": subprocess.Popen(
            [PY, "-m", "celery", "--quiet", "-A", "gateway", "worker", "--pool", "threads", "--concurrency", "4", "--loglevel", "WARNING"],
            env=env,
        ),
        "beat": subprocess.Popen(
            [PY, "-m", "celery", "--quiet", "-A", "gateway", "beat", "--loglevel", "WARNING"],
            env=env,
        ),
    }
    if connections:
        procs["connections"] = subprocess.Popen([PY, "manage.py", "channel_connections"], env=env)
    try:
        _wait_until_serving(procs)
        print(welcome, flush=True)
        held = f", connections for {', '.join(connections)}" if connections else ""
        print(
            f"Running: server on http://{HOST}:{PORT}, Celery worker and beat{held}. Ctrl-C stops everything.\n",
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
        [PY, "manage.py", "channel_connections", "--list"], check=True, env=env, capture_output=True, text=True, cwd=ROOT
    ).stdout
    return [line.split("\t", 1)[0] for line in listed.splitlines() if line.strip()]


def _wait_until_serving(procs: dict[str, subprocess.Popen], timeout: float = 30) -> None:
    """Until /healthz answers (or a process dies, or the timeout passes)."""
    import urllib.request

    deadline = time.time() + timeout
    while time.time() < deadline and all(p.poll() is None for p in procs.values()):
        try:
            with urllib.request.urlopen(f"http://{HOST}:{PORT}/healthz", timeout=1):
                return
        except OSError:
            time.sleep(0.3)


if __name__ == "__main__":
    sys.exit(main())
