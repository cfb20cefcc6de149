"""The server as a user installs it: its wheel, built by `make dist`'s script, installed into a new
virtualenv outside the checkout (`python -m venv`, then `pip install <wheel>`, dependencies resolved by pip),
and run from there with an empty directory as its current one.

The build and the virtualenv are made once per test run and shared by every xdist worker (under a file
lock). The dependencies' installed tree is kept between runs in the user's cache, keyed by what the wheel
asks for: a warm run seeds the new virtualenv with it, and `pip install` of the wheels then finds every
dependency satisfied and installs the gateway's own packages only (as tests/typescript/conftest.py does
with the npm frameworks). A cold run installs everything from the package index (pip's cache first).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Our own top-level packages: what the dependency cache must never hold.
OURS = ("approvals", "hooks", "channels_ext", "gateway", "gateway_contract", "gateway_utils", "gateway_client")
PIP = ["-m", "pip", "install", "--quiet", "--no-compile", "--disable-pip-version-check"]


def _run(command: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 900) -> str:
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed in {cwd} ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


@dataclasses.dataclass(frozen=True)
class Installed:
    """The built wheels, and the virtualenv outside the checkout they are installed in."""

    server_wheel: Path
    client_wheel: Path
    venv: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def command(self) -> Path:
        return self.venv / "bin" / "approval-gateway"

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a user's shell: nothing of the test run's gateway settings or import path."""
        kept = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("GATEWAY_", "DATABASE_", "REDIS_", "CELERY_", "OTEL_", "DJANGO_", "PYTHON"))
            and key not in ("VIRTUAL_ENV", "PROMETHEUS_MULTIPROC_DIR")
        }
        return {**kept, "PATH": f"{self.venv / 'bin'}:{kept.get('PATH', '')}", **extra}

    def gateway(self, *args: str, cwd: Path, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
        """`approval-gateway ARGS` run in `cwd`, as a user would."""
        return subprocess.run(
            [str(self.command), *args], cwd=cwd, env=self.env(**env), capture_output=True, text=True,
            timeout=timeout, stdin=subprocess.DEVNULL,
        )  # fmt: skip


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def requires_dist(wheel: Path) -> list[str]:
    """What a wheel asks pip for (its METADATA's Requires-Dist lines)."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(name).decode()
    return sorted(line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:"))


def _site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def _dependencies_cache(wheels: list[Path]) -> Path:
    asked = json.dumps([sys.version_info[:2], *(requires_dist(w) for w in wheels)])
    digest = hashlib.sha256(asked.encode()).hexdigest()[:16]
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "approval-gateway" / f"server-wheel-dependencies-{digest}"


def _link_tree(source: Path, target: Path) -> None:
    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(source, target, symlinks=True, copy_function=link, dirs_exist_ok=True)


def _is_ours(name: str) -> bool:
    top = name.split("-", 1)[0].split(".", 1)[0]
    return top in OURS or name.startswith(("approval_gateway-", "approval_gateway_client-"))


def _install(where: Path) -> Installed:
    dist = where / "dist"
    _run(["bash", str(ROOT / "scripts" / "dist.sh")], ROOT, env={**os.environ, "PY": sys.executable,
                                                                "DIST_DIR": str(dist), "DIST_ONLY": "python"})  # fmt: skip
    server_wheel = sorted(dist.glob("approval_gateway-*.whl"))[0]
    client_wheel = sorted(dist.glob("approval_gateway_client-*.whl"))[0]  # the server imports its Claude Code format
    venv = where / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], where)
    site = _site_packages(venv)
    cache = _dependencies_cache([server_wheel, client_wheel])
    if (cache / "site-packages").is_dir():
        _link_tree(cache / "site-packages", site)
    # Outside the checkout, with no PYTHONPATH: what pip resolves from the wheels' metadata.
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != "VIRTUAL_ENV"}
    _run([str(venv / "bin" / "python"), *PIP, str(server_wheel), str(client_wheel)], where, env=clean)
    if not (cache / "site-packages").is_dir():
        staging = cache.with_name(cache.name + f".tmp-{os.getpid()}")
        shutil.copytree(site, staging / "site-packages", symlinks=True, ignore=lambda d, names: [
            n for n in names if Path(d) == site and (_is_ours(n) or n.startswith(("pip", "_distutils_hack")))
        ])  # fmt: skip
        with contextlib.suppress(OSError):  # another run filled it first
            staging.rename(cache)
        shutil.rmtree(staging, ignore_errors=True)
    return Installed(server_wheel=server_wheel, client_wheel=client_wheel, venv=venv)


@pytest.fixture(scope="session")
def installed(tmp_path_factory, worker_id) -> Iterator[Installed]:
    """The server's wheel (and the client's, which it depends on) in a new virtualenv outside the checkout."""
    shared = tmp_path_factory.getbasetemp() if worker_id == "master" else tmp_path_factory.getbasetemp().parent
    where = shared / "server-wheel"
    where.mkdir(parents=True, exist_ok=True)
    with open(shared / "server-wheel.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            ready = where / "ready.json"
            if ready.exists():
                made = {key: Path(value) for key, value in json.loads(ready.read_text()).items()}
                result = Installed(**made)
            else:
                result = _install(where)
                ready.write_text(json.dumps({key: str(value) for key, value in dataclasses.asdict(result).items()}))
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    assert ROOT not in result.venv.parents, "the virtualenv must be outside the checkout"
    yield result
