"""The server installed from its built wheel into a new virtualenv outside the checkout, run from an empty
directory: `approval-gateway run` does what `make run` does (the demo key, the approval page, the admin and
its static files, an allowed call over HTTP), and the manage.py commands run by name."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
import zipfile
from pathlib import Path

import httpx
import pytest

from gateway.version import __version__
from tests.packaging.conftest import ROOT, Installed, free_port

BAD_CONFIG = """
channels:
  - {name: web, kind: web}
agents:
  - name: bot
    hooks:
      - {kind: approval_gate, channel: web, timeout_seconds: -5}
"""


def test_the_wheel_holds_the_server_and_nothing_of_the_checkouts_rest(installed: Installed):
    with zipfile.ZipFile(installed.server_wheel) as wheel:
        names = wheel.namelist()
    tops = {name.split("/", 1)[0] for name in names}

    assert tops == {
        "approvals", "hooks", "channels_ext", "gateway", "gateway_contract", "gateway_utils",
        f"approval_gateway-{__version__}.dist-info",
    }  # fmt: skip
    assert "gateway/demo/gateway.yaml" in names and "channels_ext/templates/approvals/page.html" in names
    assert any(name.startswith("approvals/migrations/0001") for name in names)
    assert not any("__pycache__" in name for name in names)


def test_the_new_environment_imports_the_gateway_from_itself_not_from_the_checkout(installed: Installed, tmp_path):
    shown = subprocess.run(
        [str(installed.python), "-c", "import approvals, gateway, gateway_client; print(gateway.__file__);"
         "print(approvals.__file__); print(gateway_client.__file__)"],
        cwd=tmp_path, env=installed.env(), capture_output=True, text=True, timeout=60, check=True,
    ).stdout.split()  # fmt: skip
    version = installed.gateway("--version", cwd=tmp_path)

    for path in map(Path, shown):
        assert installed.venv in path.parents and ROOT not in path.parents, path
    assert version.stdout.strip() == f"approval-gateway {__version__}"


def test_the_commands_run_by_name_in_an_empty_directory(installed: Installed, tmp_path):
    (tmp_path / "good.yaml").write_text((ROOT / "examples" / "gateway.yaml").read_text())
    (tmp_path / "bad.yaml").write_text(BAD_CONFIG)
    dev = {"GATEWAY_ALLOW_DEV_AUDIT_KEY": "1"}

    migrated = installed.gateway("migrate", cwd=tmp_path, **dev)
    applied = installed.gateway("apply-config", "good.yaml", cwd=tmp_path, **dev)
    key = installed.gateway("create-api-key", "demo-agent", cwd=tmp_path, **dev)
    checked = installed.gateway("check", cwd=tmp_path, **dev)
    refused_key = installed.gateway("check", cwd=tmp_path)  # the published audit key, outside `run`
    bad = installed.gateway("apply_config", "bad.yaml", cwd=tmp_path, **dev)
    verified = installed.gateway("verify-audit", cwd=tmp_path, **dev)
    unknown = installed.gateway("no-such-command", cwd=tmp_path, **dev)

    assert migrated.returncode == 0, migrated.stderr
    assert (tmp_path / "var" / "gateway.sqlite3").is_file()  # the var directory is the current one's
    assert applied.returncode == 0 and "demo-agent" in applied.stdout, applied.stderr
    assert key.returncode == 0 and re.fullmatch(r"gw_\S+", key.stdout.strip().splitlines()[-1]), key.stderr
    assert checked.returncode == 0 and "no issues" in checked.stdout, checked.stderr
    assert refused_key.returncode != 0 and "approvals.E001" in refused_key.stderr
    assert bad.returncode != 0
    assert "agents[0].hooks[0].timeout_seconds" in bad.stderr + bad.stdout
    assert verified.returncode == 0, verified.stderr
    assert unknown.returncode != 0 and "Unknown command: 'no_such_command'" in unknown.stderr


class Running:
    """`approval-gateway run` in the background; its output read as it comes."""

    def __init__(self, installed: Installed, cwd: Path, port: int) -> None:
        self.process = subprocess.Popen(
            [str(installed.command), "run"], cwd=cwd, env=installed.env(GATEWAY_PORT=str(port), PYTHONUNBUFFERED="1"),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, text: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} (exit {self.process.poll()}):\n{self.output()}")
            time.sleep(0.1)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(30)
        finally:
            if self.process.poll() is None:
                self.process.kill()
            self.reader.join(10)


def sign_in(http: httpx.Client) -> None:
    page = http.get("/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    signed = http.post("/login/", data={"csrfmiddlewaretoken": token, "username": "admin", "password": "admin"})
    assert signed.status_code == 302, signed.text


def test_run_serves_the_demo_from_the_wheel_and_stops_on_sigterm(installed: Installed, tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    run = Running(installed, tmp_path, port)
    try:
        run.wait_for("Ctrl-C stops everything")
        key = re.search(r"Demo API key:\s+(gw_\S+)", run.output()).group(1)
        agent = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30)
        allowed = agent.post("/api/v1/hooks/pre-tool-use", json={"session_id": "s", "tool_name": "web__search"})
        pending = agent.post(
            "/api/v1/hooks/pre-tool-use",
            json={"session_id": "s", "tool_name": "oa__purchase_pay", "tool_args": {"invoice_id": "INV-1", "amount": 80}},
        ).json()
        person = httpx.Client(base_url=base, timeout=30)
        sign_in(person)
        page = person.get(f"/approvals/{pending['confirmation_id']}/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        approved = person.post(
            f"/approvals/{pending['confirmation_id']}/", data={"csrfmiddlewaretoken": token, "decision": "approve"}
        )
        final = agent.get(f"/api/v1/confirmations/{pending['confirmation_id']}/wait", params={"timeout": 10}).json()
        admin = person.get("/admin/")
        stylesheet = re.search(r'href="(/static/admin/css/[^"]+\.css)"', admin.text).group(1)
        css = person.get(stylesheet)
        root = httpx.get(f"{base}/api/v1/")
    finally:
        code = run.stop()
    output = run.output()

    assert allowed.status_code == 200 and allowed.json()["decision"] == "allow"
    assert allowed.headers["X-Gateway-Version"] == __version__
    assert pending["decision"] == "pending"
    assert page.status_code == 200 and "oa__purchase_pay" in page.text and 'id="approve"' in page.text
    assert approved.status_code in (200, 302) and final["status"] == "approved"
    assert admin.status_code == 200 and "Approval gateway admin" in admin.text
    assert css.status_code == 200 and "text/css" in css.headers["Content-Type"]
    assert root.json()["version"] == __version__
    # The welcome names what an installed user can do (no checkout's examples/), and the files are here.
    assert f"Approvals inbox: {base}/approvals/" in output
    assert f"curl -s {base}/api/v1/hooks/pre-tool-use -H 'Authorization: Bearer {key}'" in output
    assert "pip install approval-gateway-client" in output
    assert "examples/" not in output and ".venv/bin/python" not in output
    assert "kept in var/demo_api_key" in output and (tmp_path / "var" / "gateway.sqlite3").is_file()
    assert code == 0, output
    with pytest.raises(httpx.ConnectError):  # the server is gone with the rest
        httpx.get(f"{base}/healthz", timeout=2)
