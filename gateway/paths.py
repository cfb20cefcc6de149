"""Where the gateway's files are, read before Django starts (by the settings and by `approval-gateway run`).

Run from a clone (`manage.py` beside the packages) the var directory is the clone's `var/`; installed
from the wheel (site-packages) it is `var/` under the current directory. `GATEWAY_VAR_DIR` overrides
both (docs/reference/environment.md)."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
SOURCE_ROOT = PACKAGE_DIR.parent
IS_CHECKOUT = (SOURCE_ROOT / "manage.py").is_file()


def var_dir() -> Path:
    """The directory of the SQLite database, the embedded broker, the generated secret key, the demo key."""
    configured = os.environ.get("GATEWAY_VAR_DIR")
    if configured:
        return Path(configured).absolute()
    return (SOURCE_ROOT if IS_CHECKOUT else Path.cwd()) / "var"


def demo_config() -> Path:
    """The config `approval-gateway run` applies: the clone's examples/gateway.yaml, or the wheel's copy of
    it (tests/packaging/test_demo_config.py holds the two equal)."""
    return SOURCE_ROOT / "examples" / "gateway.yaml" if IS_CHECKOUT else PACKAGE_DIR / "demo" / "gateway.yaml"
