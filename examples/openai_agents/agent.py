"""A payments agent on the OpenAI Agents SDK whose tools ask the approval gateway first.

    pip install -r examples/openai_agents/requirements.txt
    export GATEWAY_URL=http://127.0.0.1:8000 GATEWAY_API_KEY=…   # manage.py create_api_key payments-agent
    export OPENAI_API_KEY=…                                       # OPENAI_BASE_URL, OPENAI_MODEL: optional
    python examples/openai_agents/agent.py "Pay invoice INV-7, 120 dollars"

`pay_invoice` prints `PAID <invoice_id> <amount>` when it really runs; the
agent's final output is printed last. With examples/agents.yaml
applied, pay_invoice needs a human's approval and get_balance runs at once.
See docs/integrations/openai-agents.md.
"""

import asyncio
import os
import sys

from agents import Agent, Runner, function_tool

from gateway_client import AsyncGatewayClient
from gateway_client.openai_agents import gate_agent

DEFAULT_MODEL = "gpt-5.6-luna"


@function_tool
def pay_invoice(invoice_id: str, amount: int) -> str:
    """Pay an invoice: send `amount` dollars for the invoice `invoice_id`."""
    print(f"PAID {invoice_id} {amount}", flush=True)
    return f"paid {invoice_id}"


@function_tool
def get_balance() -> float:
    """The account's balance, in dollars."""
    return 12840.5


async def main(request: str) -> None:
    agent = Agent(
        name="payments",
        instructions="You pay invoices and report the account balance. Use the tools; be brief.",
        model=os.environ.get("OPENAI_MODEL", DEFAULT_MODEL),
        tools=[pay_invoice, get_balance],
    )
    gateway = AsyncGatewayClient(
        os.environ["GATEWAY_URL"],
        os.environ["GATEWAY_API_KEY"],
        max_wait=float(os.environ.get("GATEWAY_MAX_WAIT", "300")),  # seconds to wait for a human
        reconnect_for=float(os.environ.get("GATEWAY_RECONNECT_FOR", "10")),  # then an unreachable gateway denies
    )
    async with gateway:
        result = await Runner.run(gate_agent(agent, gateway), request)
    print(result.final_output, flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} 'what the agent should do'")
    asyncio.run(main(sys.argv[1]))
