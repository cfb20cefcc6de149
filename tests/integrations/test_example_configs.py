"""The example configs of the integrations: examples/agents.yaml gates what its comments say, and the MCP
client configs in examples/mcp/ start the proxy as written (Claude Code's `.mcp.json` with its `${VAR}`
expansion; Claude Desktop's and Cursor's files are the same server with their placeholders filled in): the
`gateway-mcp-proxy` command by name, found on the PATH as after `pip install -r examples/mcp/requirements.txt`
(here: this venv's bin), nothing of the checkout on a path."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

from tests.conftest import make_agent_client
from tests.integrations.conftest import ROOT
from tests.integrations.test_mcp_proxy import mcp_client

pytestmark = pytest.mark.django_db(transaction=True)

MCP_EXAMPLES = ROOT / "examples" / "mcp"


def expand(value: str, env: dict[str, str]) -> str:
    """Claude Code's expansion in .mcp.json: `${VAR}` and `${VAR:-default}`."""
    return re.sub(
        r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}", lambda m: env.get(m.group(1)) or m.group(2) or "", value
    )


def server(path: str, fill) -> dict:
    (definition,) = json.loads((MCP_EXAMPLES / path).read_text())["mcpServers"].values()
    return {
        "command": fill(definition["command"]),
        "args": [fill(arg) for arg in definition["args"]],
        "env": {name: fill(value) for name, value in definition["env"].items()},
    }


def test_the_example_config_gates_what_it_says(live_gateway):
    call_command("apply_config", str(ROOT / "examples" / "agents.yaml"))
    payments, mcp = make_agent_client(live_gateway, "payments-agent"), make_agent_client(live_gateway, "mcp-agent")

    asked = {
        tool: client.pre_tool_use(tool, args).json()["decision"]
        for client, tool, args in [
            (payments, "pay_invoice", {"invoice_id": "INV-7", "amount": 120}),
            (payments, "get_balance", {}),
            (mcp, "time__convert_time", {"source_timezone": "UTC", "time": "09:00", "target_timezone": "Asia/Tokyo"}),
            (mcp, "time__get_current_time", {"timezone": "UTC"}),
        ]
    }
    payments.http.close()
    mcp.http.close()

    assert asked == {
        "pay_invoice": "pending",
        "get_balance": "allow",
        "time__convert_time": "pending",
        "time__get_current_time": "allow",
    }


def test_the_mcp_client_configs_start_the_proxy_in_front_of_mcp_server_time(live_gateway):
    call_command("apply_config", str(ROOT / "examples" / "agents.yaml"))
    client = make_agent_client(live_gateway, "mcp-agent")
    client.http.close()
    env = {"GATEWAY_API_KEY": client.key, "GATEWAY_URL": live_gateway.url}
    claude_code = server("claude-code.mcp.json", lambda value: expand(value, env))

    def placeholders(value: str) -> str:
        return value.replace("gw_your_mcp_agent_key", client.key)

    desktop = server("claude_desktop_config.json", placeholders)
    cursor = server("cursor.mcp.json", placeholders)
    assert desktop == cursor
    assert desktop == {**claude_code, "env": {**claude_code["env"], "GATEWAY_URL": "http://127.0.0.1:8000"}}

    from mcp import StdioServerParameters

    assert (claude_code["command"], claude_code["args"]) == ("gateway-mcp-proxy", ["--name", "time", "--", "mcp-server-time"])
    assert set(claude_code["env"]) == {"GATEWAY_URL", "GATEWAY_API_KEY"}  # no PYTHONPATH, no checkout
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    assert Path(shutil.which(claude_code["command"], path=path)).parent == Path(sys.executable).parent
    params = StdioServerParameters(
        command=claude_code["command"], args=claude_code["args"], env={**claude_code["env"], "PATH": path}, cwd="/"
    )
    with mcp_client(params) as (portal, mcp):
        tools = [tool.name for tool in portal.call(mcp.list_tools).tools]
        now = portal.call(mcp.call_tool, "get_current_time", {"timezone": "UTC"})

    assert tools == ["get_current_time", "convert_time"]
    assert not now.is_error and now.structured_content["timezone"] == "UTC"
