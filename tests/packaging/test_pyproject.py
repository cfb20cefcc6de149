"""The wheel's metadata agrees with what `make` installs and tests: each runtime pin of requirements.txt
(and of requirements-channels.txt, requirements-otel.txt for the extras) is inside the range pyproject.toml
asks for, and nothing is asked for that is not pinned; the demo config the wheel carries is the clone's."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from gateway.version import __version__

ROOT = Path(__file__).resolve().parents[2]
TEST_ONLY_MARK = "# tests only"
CLIENT = "approval-gateway-client"


def pins(path: Path, *, stop_at: str | None = None) -> dict[str, Requirement]:
    found = {}
    for line in path.read_text().splitlines():
        if stop_at and line.startswith(stop_at):
            break
        if line.strip() and not line.startswith("#"):
            requirement = Requirement(line)
            found[requirement.name.lower()] = requirement
    return found


def ranges(requirements: list[str]) -> dict[str, Requirement]:
    return {(r := Requirement(text)).name.lower(): r for text in requirements}


def pinned_version(requirement: Requirement) -> str:
    (spec,) = requirement.specifier
    assert spec.operator == "==", requirement
    return spec.version


def assert_agree(pinned: dict[str, Requirement], asked: dict[str, Requirement]) -> None:
    assert set(pinned) == set(asked)
    for name, pin in pinned.items():
        assert asked[name].specifier.contains(pinned_version(pin)), (name, str(asked[name].specifier))
        assert asked[name].extras == pin.extras, name


PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_wheels_dependencies_are_the_runtime_pins_of_requirements_txt_as_ranges():
    runtime = pins(ROOT / "requirements.txt", stop_at=TEST_ONLY_MARK)
    asked = ranges(PROJECT["dependencies"])
    client = asked.pop(CLIENT)  # the agent client, built beside the server (make dist), same release

    assert_agree(runtime, asked)
    assert client.specifier.contains(__version__)
    assert "pytest" not in asked and "build" not in asked


def test_the_extras_are_the_optional_requirements_files():
    channels = pins(ROOT / "requirements-channels.txt")
    channels.pop("aiosmtpd")  # the e-mail tests' SMTP server, not a channel's SDK
    extras = PROJECT["optional-dependencies"]

    assert_agree(channels, ranges(extras["teams"] + extras["dingtalk"] + extras["telegram"]))
    assert_agree(pins(ROOT / "requirements-otel.txt"), ranges(extras["otel"]))


def test_the_demo_config_the_wheel_carries_is_the_clones_example():
    assert (ROOT / "gateway" / "demo" / "gateway.yaml").read_bytes() == (ROOT / "examples" / "gateway.yaml").read_bytes()
