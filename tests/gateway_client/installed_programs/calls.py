"""Two calls through the installed client: `Read` (the gateway allows it) and `Write` (a hook refuses it).

    python calls.py          # GATEWAY_URL, GATEWAY_API_KEY from the environment; one JSON line out
"""

import json
import os

from gateway_client import GatewayClient

with GatewayClient(os.environ["GATEWAY_URL"], os.environ["GATEWAY_API_KEY"], max_wait=30) as gateway:
    read = gateway.pre_tool_use("installed-1", "Read", {"file_path": "/etc/hosts"})
    write = gateway.pre_tool_use("installed-1", "Write", {"file_path": "/etc/hosts", "content": "x"})
print(json.dumps({
    "read": {"decision": read.decision, "tool_args": read.tool_args},
    "write": {"decision": write.decision, "reason": write.reason},
}))  # fmt: skip
