"""A purchasing agent on the OpenAI Agents SDK that asks a person before it orders (docs/asking.md).

    pip install -r examples/ask/requirements.txt
    export GATEWAY_URL=http://127.0.0.1:8000 GATEWAY_API_KEY=…   # manage.py create_api_key purchasing-agent
    export OPENAI_API_KEY=…                                       # OPENAI_BASE_URL, OPENAI_MODEL: optional
    python examples/ask/agent.py "Order 20 laptops for the new team"

It has two tools that ask a human through the gateway: `ask_human` (the model writes the question and,
if it likes, the choices: "Which vendor? Acme / Globex / Initech") and `ask_order_details` (a form
the code fixes: vendor, budget, urgent). The questions go to the channel of the agent's approval gate
(`GATEWAY_ASK_CHANNEL` names another), and wait up to `GATEWAY_MAX_WAIT` seconds for an answer. The
agent's final output is printed last. The same agent on LangChain: examples/ask/langchain_agent.py.
"""

import asyncio
import os
import sys

from agents import Agent, Runner

from gateway_client import AsyncGatewayClient
from gateway_client.openai_agents import ask_human_tool

DEFAULT_MODEL = "gpt-5.6-luna"
# The form `ask_order_details` shows: what the agent needs to place an order.
ORDER_DETAILS = {
    "type": "object",
    "properties": {
        "vendor": {"type": "string", "enum": ["Acme", "Globex", "Initech"], "title": "Vendor"},
        "budget": {"type": "integer", "minimum": 1, "maximum": 50000, "title": "Budget (EUR)"},
        "urgent": {"type": "boolean", "title": "Urgent"},
    },
    "required": ["vendor", "budget"],
}


async def main(request: str) -> None:
    gateway = AsyncGatewayClient(
        os.environ["GATEWAY_URL"],
        os.environ["GATEWAY_API_KEY"],
        max_wait=float(os.environ.get("GATEWAY_MAX_WAIT", "300")),  # seconds to wait for a person
        reconnect_for=float(os.environ.get("GATEWAY_RECONNECT_FOR", "10")),
    )
    where = {"channel": os.environ.get("GATEWAY_ASK_CHANNEL") or None, "timeout_seconds": 1800}
    agent = Agent(
        name="purchasing",
        instructions="You prepare orders. Ask a person whatever you cannot decide yourself; be brief.",
        model=os.environ.get("OPENAI_MODEL", DEFAULT_MODEL),
        tools=[
            ask_human_tool(gateway, **where),
            ask_human_tool(gateway, name="ask_order_details", answer_schema=ORDER_DETAILS, **where),
        ],
    )
    async with gateway:
        result = await Runner.run(agent, request)
    print(result.final_output, flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} 'what the agent should do'")
    asyncio.run(main(sys.argv[1]))
