"""Where `gateway_client` comes from in this virtualenv, and what it says it is (one JSON line)."""

import importlib.metadata
import json
import sys

import gateway_client
from gateway_client.version import USER_AGENT

print(json.dumps({
    "file": gateway_client.__file__,
    "version": gateway_client.__version__,
    "distribution": importlib.metadata.version("approval-gateway-client"),
    "requires": importlib.metadata.requires("approval-gateway-client"),
    "user_agent": USER_AGENT,
    "sys_path": sys.path,
    "installed": sorted(d.metadata["Name"].lower() for d in importlib.metadata.distributions()),
}))  # fmt: skip
