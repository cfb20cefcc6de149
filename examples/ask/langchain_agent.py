"""The purchasing agent of examples/ask/agent.py, on LangChain v1 (`create_agent`) (docs/asking.md).

    pip install -r examples/ask/requirements.txt
    export GATEWAY_URL=http://127.0.0.1:8000 GATEWAY_API_KEY=…   # manage.py create_api_key purchasing-agent
    export OPENAI_API_KEY=…                                       # OPENAI_BASE_URL, OPENAI_MODEL: optional
    python examples/ask/langchain_agent.py "Order 20 laptops for the new team"
"""

import os
import sys

from langchain.agents import create_agent
from langchain_openai import ChatOpenAI

from gateway_client import GatewayClient
from gateway_client.langchain import ask_human_tool

DEFAULT_MODEL = "gpt-5.6-luna"
ORDER_DETAILS = {
    "type": "object",
    "properties": {
        "vendor": {"type": "string", "enum": ["Acme", "Globex", "Initech"], "title": "Vendor"},
        "budget": {"type": "integer", "minimum": 1, "maximum": 50000, "title": "Budget (EUR)"},
        "urgent": {"type": "boolean", "title": "Urgent"},
    },
    "required": ["vendor", "budget"],
}


def main(request: str) -> None:
    gateway = GatewayClient(
        os.environ["GATEWAY_URL"],
        os.environ["GATEWAY_API_KEY"],
        max_wait=float(os.environ.get("GATEWAY_MAX_WAIT", "300")),
        reconnect_for=float(os.environ.get("GATEWAY_RECONNECT_FOR", "10")),
    )
    where = {"channel": os.environ.get("GATEWAY_ASK_CHANNEL") or None, "timeout_seconds": 1800}
    with gateway:
        agent = create_agent(
            model=ChatOpenAI(model=os.environ.get("OPENAI_MODEL", DEFAULT_MODEL)),
            tools=[
                ask_human_tool(gateway, **where),
                ask_human_tool(gateway, name="ask_order_details", answer_schema=ORDER_DETAILS, **where),
            ],
            system_prompt="You prepare orders. Ask a person whatever you cannot decide yourself; be brief.",
        )
        state = agent.invoke({"messages": [{"role": "user", "content": request}]})
    print(state["messages"][-1].text, flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} 'what the agent should do'")
    main(sys.argv[1])
