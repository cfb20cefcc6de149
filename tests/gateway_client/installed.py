"""The agent client as a user gets it: the wheel built from clients/python (`python -m build --wheel`),
installed into new virtualenvs outside the checkout, and run from a directory outside it.

Two virtualenvs, made once per test run and shared by every xdist worker (under a file lock):
- `full`: the wheel with its `[openai-agents,mcp]` extras and the OpenAI Agents example's own
  requirements.txt (which names `approval-gateway-client[openai-agents]`: the wheel answers it);
- `bare`: the wheel alone (httpx and tenacity), to see what a command says without its extra.

Versions are held to the ones this test venv has (its `pip list` as constraints), so the extras' ranges
must admit them. The frameworks' installed tree is kept between runs in the user's cache, keyed by those
constraints, the client's pyproject and the example's requirements, and copied into each new `full`
virtualenv before the wheel is installed — a warm run installs only the client; a cold one installs
everything with pip (from pip's cache, else the registry), compiled, so a warm run's programs start fast. tests/typescript/conftest.py does the same for
the npm tarball.
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
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "python"
PROGRAMS = Path(__file__).with_name("installed_programs")
EXAMPLE = ROOT / "examples" / "openai_agents"
ECHO_SERVER = ROOT / "tests" / "integrations" / "echo_mcp_server.py"
EXTRAS = "openai-agents,mcp"
RUN_TIMEOUT = 120  # seconds a program may take on a busy machine


def _run(command: list[str], cwd: Path, timeout: float = 600) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed in {cwd} ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


def _pip(venv: Path, *args: str, cwd: Path) -> str:
    """This interpreter's pip, working on `venv` (`pip --python`): the venvs are made without pip of
    their own, which saves seconds each, and get the same files."""
    return _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), *args], cwd)


@dataclasses.dataclass(frozen=True)
class Venv:
    """A virtualenv outside the checkout with the client installed from its wheel."""

    path: Path
    home: Path  # where programs run: outside the checkout, holding copies of what they need

    @property
    def bin(self) -> Path:
        return self.path / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    def env(self, **extra: str) -> dict[str, str]:
        """A user's shell with this venv's bin first on the PATH: nothing of the checkout on a path."""
        base = {
            k: v
            for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not k.startswith(("GATEWAY_", "OPENAI_"))
        }
        return {**base, "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}", **extra}

    def run(self, command: list[str], *, stdin: str | None = None, timeout: float = RUN_TIMEOUT, **env: str):
        return subprocess.run(
            command, cwd=self.home, env=self.env(**env), input=stdin, capture_output=True, text=True, timeout=timeout
        )

    def start(self, command: list[str], **env: str) -> subprocess.Popen:
        return subprocess.Popen(
            command, cwd=self.home, env=self.env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )


def last_json(done: subprocess.CompletedProcess) -> Any:
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise AssertionError(f"exited {done.returncode}:\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}")
    return json.loads(lines[-1])


@dataclasses.dataclass(frozen=True)
class InstalledClient:
    wheel: Path
    full: Venv
    bare: Venv


def _frameworks_cache(constraints: str) -> Path:
    key = hashlib.sha256()
    for part in (constraints, (PACKAGE / "pyproject.toml").read_text(), (EXAMPLE / "requirements.txt").read_text()):
        key.update(part.encode() + b"\0")
    key.update(f"{EXTRAS}\0{sys.version}".encode())
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "approval-gateway" / f"python-client-test-frameworks-{key.hexdigest()[:16]}"


def _seed(cached: Path, target: Path) -> None:
    """The cached site-packages into a new venv: hard links (a copy where links cannot be made)."""

    def link(source: str, destination: str) -> None:
        try:
            os.link(source, destination)
        except OSError:
            shutil.copy2(source, destination)

    shutil.copytree(cached, target, symlinks=True, copy_function=link, dirs_exist_ok=True)


def _site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def _new_venv(path: Path, home: Path) -> Venv:
    _run([sys.executable, "-m", "venv", "--without-pip", str(path)], path.parent)
    home.mkdir(parents=True, exist_ok=True)
    return Venv(path=path, home=home)


def _build(where: Path) -> InstalledClient:
    dist = where / "dist"
    _run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(PACKAGE)], where)
    (wheel,) = dist.glob("approval_gateway_client-*.whl")
    constraints = where / "constraints.txt"
    frozen = _run([sys.executable, "-m", "pip", "list", "--format=freeze", "--exclude-editable"], where)
    constraints.write_text("".join(f"{line}\n" for line in frozen.splitlines() if not line.lower().startswith("approval")))
    install = ["install", "--quiet", "--disable-pip-version-check", "-c", str(constraints)]

    full = _new_venv(where / "venv-full", where / "home-full")
    cache = _frameworks_cache(constraints.read_text())
    if (cache / "site-packages").is_dir():
        _seed(cache / "site-packages", _site_packages(full.path))
    _pip(full.path, *install, f"{wheel}[{EXTRAS}]", "-r", str(EXAMPLE / "requirements.txt"), cwd=where)
    _pip(full.path, "check", cwd=where)  # every requirement of what is installed is met
    if not (cache / "site-packages").is_dir():
        staging = cache.with_name(f"{cache.name}.tmp-{os.getpid()}")
        shutil.copytree(_site_packages(full.path), staging / "site-packages", symlinks=True)
        for client in (staging / "site-packages").glob("*"):
            if client.name == "gateway_client" or client.name.startswith("approval_gateway_client-"):
                shutil.rmtree(client)
        with contextlib.suppress(OSError):  # another run filled it first
            staging.rename(cache)
        shutil.rmtree(staging, ignore_errors=True)
    for source in [*PROGRAMS.glob("*.py"), EXAMPLE / "agent.py", ECHO_SERVER]:
        shutil.copy2(source, full.home / source.name)

    bare = _new_venv(where / "venv-bare", where / "home-bare")
    _pip(bare.path, *install, "--no-compile", str(wheel), cwd=where)
    shutil.copy2(PROGRAMS / "where.py", bare.home / "where.py")
    return InstalledClient(wheel=wheel, full=full, bare=bare)


def installed_client(tmp_path_factory: Any, worker_id: str) -> Iterator[InstalledClient]:
    """The session fixture's body (tests/gateway_client/test_installed_package.py)."""
    shared = tmp_path_factory.getbasetemp() if worker_id == "master" else tmp_path_factory.getbasetemp().parent
    where = shared / "python-client"
    where.mkdir(parents=True, exist_ok=True)
    assert ROOT not in where.parents, "the virtualenvs must be outside the checkout"
    with open(shared / "python-client.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            ready = where / "ready.json"
            if ready.exists():
                made = json.loads(ready.read_text())
                client = InstalledClient(
                    wheel=Path(made["wheel"]),
                    full=Venv(Path(made["full"]), Path(made["full_home"])),
                    bare=Venv(Path(made["bare"]), Path(made["bare_home"])),
                )
            else:
                client = _build(where)
                ready.write_text(json.dumps({
                    "wheel": str(client.wheel), "full": str(client.full.path), "full_home": str(client.full.home),
                    "bare": str(client.bare.path), "bare_home": str(client.bare.home),
                }))  # fmt: skip
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    yield client
