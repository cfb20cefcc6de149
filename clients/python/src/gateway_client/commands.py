"""The console command of an extra (clients/python/pyproject.toml, `[project.scripts]`): `gateway-mcp-proxy`
(= `python -m gateway_client.mcp_proxy`, the same arguments). Run without its extra's packages it says so in
one line, naming the install command, and exits 2 (a usage error) rather than printing a traceback.
(`gateway-claude-code` needs no extra: it is `gateway_client.claude_code:main` itself.)
"""

from __future__ import annotations

import sys

from gateway_client.extras import MissingExtra

USAGE_ERROR = 2


def mcp_proxy() -> int:
    """`gateway-mcp-proxy --name NAME [options] -- UPSTREAM_COMMAND [ARGS…]` (docs/integrations/mcp-proxy.md)."""
    try:
        from gateway_client.mcp_proxy.command import main
    except MissingExtra as exc:
        print(f"gateway-mcp-proxy: {exc}", file=sys.stderr)
        return USAGE_ERROR
    return main()

