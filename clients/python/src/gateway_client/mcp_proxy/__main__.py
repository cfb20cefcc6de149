"""`python -m gateway_client.mcp_proxy`: the same command as `gateway-mcp-proxy`."""

import sys

from gateway_client.mcp_proxy.command import main

if __name__ == "__main__":
    sys.exit(main())
