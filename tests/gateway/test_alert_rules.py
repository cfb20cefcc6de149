"""The example Prometheus alert rules (examples/prometheus/gateway-alerts.yml, shown in docs/operating.md)
pass Prometheus's own checker, fire as their unit tests say, are each listed in the docs and read only metrics the docs list.

promtool comes from Debian's prometheus package (`scripts/ensure-promtool.sh`, run by `make test`)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "examples" / "prometheus" / "gateway-alerts.yml"
UNIT_TESTS = Path(__file__).parent / "prometheus" / "gateway-alerts.test.yml"


def promtool() -> str:
    found = shutil.which("promtool") or ROOT / "var" / "tools" / "prometheus" / "usr" / "bin" / "promtool"
    assert Path(found).exists(), "promtool is missing: run scripts/ensure-promtool.sh (make test does)"
    return str(found)


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], check=False, cwd=cwd, capture_output=True, text=True, timeout=60)


def test_promtool_checks_the_alert_rules():
    done = run("check", "rules", str(RULES))

    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 14 rules found" in done.stdout


def test_the_alerts_fire_as_their_unit_tests_expect():
    done = run("test", "rules", UNIT_TESTS.name, cwd=UNIT_TESTS.parent)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_the_docs_list_every_alert():
    operating = (ROOT / "docs" / "operating.md").read_text()
    rules = [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]

    assert len(rules) == 14
    assert [rule["alert"] for rule in rules if f"| `{rule['alert']}` |" not in operating] == []


def test_the_rules_use_only_metrics_the_gateway_documents():
    operating = (ROOT / "docs" / "operating.md").read_text()
    rules = [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]
    used = {name.removesuffix("_bucket") for rule in rules for name in re.findall(r"\b(gateway_[a-z_]+)", rule["expr"])}
    documented = set(re.findall(r"^\| `(gateway_[a-z_]+)` \|", operating, flags=re.MULTILINE))

    assert len(used) == 12
    assert used - documented == set()
