"""The client's version (semantic versioning: docs/agent-client.md, "Versions"), and the oldest gateway
it works with.

`__version__` is the one place the version is written: the package's build reads it from here
(clients/python/pyproject.toml), and every request names it in its User-Agent. The gateway names its own
version in the `X-Gateway-Version` header of every answer (from 0.4.0 on); an answer without the header
comes from a gateway older than 0.4.0, whose API 0.3.0 fixed, and is accepted.
"""

from __future__ import annotations

import re

__version__ = "0.4.0"
MIN_GATEWAY_VERSION = "0.3.0"  # the oldest gateway whose /api/v1 this client speaks
USER_AGENT = f"approval-gateway-client/{__version__} (python)"
VERSION_HEADER = "X-Gateway-Version"

_RELEASE = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?")


def release(version: str) -> tuple[int, int, int] | None:
    """`0.3.0` (or `0.4.0rc1`, `v0.4`, `0.4.0+local`) as (major, minor, patch); None if it names no release."""
    match = _RELEASE.match(version)
    if match is None:
        return None
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def too_old(gateway_version: str | None) -> bool:
    """True when a gateway that says it is `gateway_version` is older than `MIN_GATEWAY_VERSION`. No version
    (a gateway before 0.4.0, which sent none) and a version that names no release are not too old."""
    if not gateway_version:
        return False
    found, needed = release(gateway_version), release(MIN_GATEWAY_VERSION)
    return found is not None and needed is not None and found < needed
