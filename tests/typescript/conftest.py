"""The TypeScript client as a user gets it: built (`npm pack`) once per test run, installed from its
tarball into a new npm project outside the checkout beside the real frameworks (pinned in
tests/typescript/project/), and driven there by small node programs (tests/typescript/agents/) against the
live gateway and the fake OpenAI API.

The build and the project are shared by every xdist worker of one run (made once, under a file lock).
The frameworks' installed tree is kept between runs in the user's cache, keyed by the project's lock
file, and copied into each new project before `npm install <tarball>` — so a warm run installs only the
client; a cold one installs everything from npm (its own cache, else the registry).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "typescript"
HERE = Path(__file__).resolve().parent
NODE_TIMEOUT = 90  # seconds one node program may take on a busy machine
INSTALL = ["npm", "install", "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error"]


def _run(command: list[str], cwd: Path, timeout: float = 600) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed in {cwd} ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


def _frameworks_cache(lock: Path) -> Path:
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()[:16]
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "approval-gateway" / f"typescript-test-frameworks-{digest}"


@dataclasses.dataclass(frozen=True)
class NodeProject:
    """The built tarball, and the npm project outside the checkout where it is installed."""

    tarball: Path
    path: Path

    def run(self, program: str, *args: str, env: dict[str, str] | None = None, timeout: float = NODE_TIMEOUT) -> Any:
        """Run `program` (from tests/typescript/agents/) there; the JSON of its last line of output."""
        done = subprocess.run(
            ["node", program, *args], cwd=self.path, env=node_env(env), capture_output=True, text=True, timeout=timeout
        )
        return last_json(done)

    def start(self, program: str, *args: str, env: dict[str, str] | None = None) -> NodeRun:
        """Start `program` there in the background (an agent waiting for its approval)."""
        return NodeRun(self, program, args, env)


def node_env(env: dict[str, str] | None) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "GATEWAY_", "NODE_"))}
    return {**base, "OPENAI_AGENTS_DISABLE_TRACING": "1", **(env or {})}


def last_json(done: subprocess.CompletedProcess) -> Any:
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise AssertionError(f"node exited {done.returncode}:\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}")
    return json.loads(lines[-1])


class NodeRun:
    """A node program running in the background; `result()` waits for its JSON line."""

    def __init__(self, project: NodeProject, program: str, args: tuple[str, ...], env: dict[str, str] | None):
        self.process = subprocess.Popen(
            ["node", program, *args],
            cwd=project.path,
            env=node_env(env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.append(line.rstrip("\n"))

    def lines(self) -> list[Any]:
        """The JSON lines printed so far."""
        return [json.loads(line) for line in list(self._lines) if line.startswith("{")]

    def send(self, text: str = "go\n") -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(text)
        self.process.stdin.flush()

    def result(self, timeout: float = NODE_TIMEOUT) -> Any:
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise
        self._reader.join(10)
        stderr = self.process.stderr.read() if self.process.stderr else ""
        done = subprocess.CompletedProcess(self.process.args, self.process.returncode, "\n".join(self._lines), stderr)
        return last_json(done)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def seed(cached: Path, target: Path) -> None:
    """The cached frameworks' tree into a new project: hard links (a copy where links cannot be made).
    The cache holds no npm hidden lock file (`node_modules/.package-lock.json`, the one file npm writes
    there in place): npm reads the tree from the packages themselves and writes the project its own."""

    def link(source: str, destination: str) -> None:
        try:
            os.link(source, destination)
        except OSError:
            shutil.copy2(source, destination)

    shutil.copytree(cached, target, symlinks=True, copy_function=link, dirs_exist_ok=True)


def _build(where: Path) -> NodeProject:
    _run(["bash", str(ROOT / "scripts" / "ensure-node-client.sh")], ROOT)
    artifacts = where / "artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    # `npm pack` runs the package's `prepack` (tsc) and writes the tarball a user installs.
    packed = _run(["npm", "pack", "--json", "--pack-destination", str(artifacts)], PACKAGE)
    tarball = artifacts / json.loads(packed)[0]["filename"]

    project = where / "project"
    project.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copy2(HERE / "project" / name, project / name)
    cache = _frameworks_cache(project / "package-lock.json")
    if (cache / "node_modules").is_dir():
        seed(cache / "node_modules", project / "node_modules")
    _run([*INSTALL, str(tarball)], project)
    if not (cache / "node_modules").is_dir():
        staging = cache.with_name(cache.name + f".tmp-{os.getpid()}")
        shutil.copytree(project / "node_modules", staging / "node_modules", symlinks=True)
        shutil.rmtree(staging / "node_modules" / "@approval-gateway", ignore_errors=True)
        (staging / "node_modules" / ".package-lock.json").unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # another run filled it first
            staging.rename(cache)
        shutil.rmtree(staging, ignore_errors=True)
    for program in [*(HERE / "agents").glob("*.mjs"), *(HERE / "agents").glob("*.ts")]:
        shutil.copy2(program, project / program.name)
    return NodeProject(tarball=tarball, path=project)


@pytest.fixture(scope="session")
def node_project(tmp_path_factory, worker_id) -> Iterator[NodeProject]:
    """The client's tarball, installed with the frameworks into a new npm project outside the checkout."""
    shared = tmp_path_factory.getbasetemp() if worker_id == "master" else tmp_path_factory.getbasetemp().parent
    where = shared / "typescript-client"
    where.mkdir(parents=True, exist_ok=True)
    with open(shared / "typescript-client.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            ready = where / "ready.json"
            if ready.exists():
                made = json.loads(ready.read_text())
                project = NodeProject(tarball=Path(made["tarball"]), path=Path(made["path"]))
            else:
                project = _build(where)
                ready.write_text(json.dumps({"tarball": str(project.tarball), "path": str(project.path)}))
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    assert ROOT not in project.path.parents, "the project must be outside the checkout"
    yield project


# The agent-side fixtures the Python client's tests use: an agent whose tools are allowed, rewritten,
# frozen or gated (`coder_key`), a human who decides from another thread, a gateway that restarts.
from tests.gateway_client.conftest import approver, closed_port_url, coder_key, restartable_gateway  # noqa: E402, F401
from tests.fakes.openai_api import fake_openai  # noqa: E402, F401
