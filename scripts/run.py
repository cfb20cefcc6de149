#!/usr/bin/env python
"""`make run`: what `approval-gateway run` does (gateway/launcher.py), from this clone."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway import launcher  # noqa: E402

if __name__ == "__main__":
    sys.exit(launcher.run(prog="make run"))
