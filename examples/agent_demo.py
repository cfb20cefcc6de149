#!/usr/bin/env python
"""Play an agent that asks the gateway before paying an invoice.

    GATEWAY_URL=http://127.0.0.1:8000 GATEWAY_API_KEY=gw_... python examples/agent_demo.py

It asks to run `oa__purchase_pay` (gated by `examples/gateway.yaml`), prints the
approval page to open, waits while a person decides there, then "pays" if
approved or stops if not. Exit status: 0 paid, 1 not allowed, 2 usage or
connection problem, 130 interrupted (the request is then cancelled).

Plain HTTP with httpx against the documented agent API, so you can read every step.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid

import httpx

FINAL = {"approved", "rejected", "expired", "cancelled"}


def say(text: str) -> None:
    print(text, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("GATEWAY_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--key", default=os.environ.get("GATEWAY_API_KEY"))
    parser.add_argument("--amount", type=int, default=1250, help="invoice amount in EUR")
    parser.add_argument("--tool", default="oa__purchase_pay")
    parser.add_argument("--wait", type=float, default=600, help="give up after this many seconds")
    args = parser.parse_args(argv)
    if not args.key:
        say("Set GATEWAY_API_KEY (make run prints a demo key) or pass --key.")
        return 2

    http = httpx.Client(
        base_url=args.url.rstrip("/"), headers={"Authorization": f"Bearer {args.key}"}, timeout=httpx.Timeout(60.0)
    )
    request = {
        "session_id": f"demo-{uuid.uuid4().hex[:8]}",
        "tool_name": args.tool,
        "tool_args": {
            "vendor": "ACME Office Supplies",
            "invoice": "INV-2024-0117",
            "amount": args.amount,
            "currency": "EUR",
            "lines": [
                {"item": "Ergonomic chair", "qty": 2, "unit_price": 450},
                {"item": "Standing desk", "qty": 1, "unit_price": args.amount - 900},
            ],
            "note": "Quarterly furniture order for the Berlin office, approved in principle by the team lead; "
            "pay from the facilities budget.",
        },
        "tool_call_id": f"call_{uuid.uuid4().hex[:8]}",
        "user_id": "u-demo",
        "metadata": {"org_id": "acme", "source": "examples/agent_demo.py"},
        # The same key on every retry: the gateway answers with the same request, never a second card.
        "idempotency_key": f"agent-demo-{uuid.uuid4()}",
    }

    say(f"Agent: I want to run {args.tool} for {args.amount} EUR. Asking the gateway at {args.url} ...")
    try:
        answer = http.post("/api/v1/hooks/pre-tool-use", json=request)
    except httpx.HTTPError as exc:
        say(f"Cannot reach the gateway at {args.url}: {exc}. Is `make run` running?")
        return 2
    if answer.status_code != 200:
        say(f"The gateway refused the call ({answer.status_code}): {answer.text}")
        return 2
    body = answer.json()

    confirmation_id = body.get("confirmation_id")
    if body["decision"] == "pending":
        page = http.get(f"/api/v1/confirmations/{confirmation_id}").json()["url"]
        say("Agent: this call needs a human decision. Waiting for someone to approve or reject it here:")
        say(f"    {page}")
        deadline = time.monotonic() + args.wait
        try:
            while True:
                # Long-poll: the gateway answers as soon as the request is decided (or after 25 s).
                state = http.get(f"/api/v1/confirmations/{confirmation_id}/wait", params={"timeout": 25}).json()
                if state["status"] in FINAL:
                    break
                if time.monotonic() > deadline:
                    say("Agent: nobody decided in time; giving up and cancelling the request.")
                    http.post(f"/api/v1/confirmations/{confirmation_id}/cancel")
                    return 1
                say("Agent: still waiting ...")
        except KeyboardInterrupt:
            http.post(f"/api/v1/confirmations/{confirmation_id}/cancel")
            say("\nAgent: interrupted; request cancelled.")
            return 130
        # Asking again with the same idempotency key returns the final decision, with the gateway's reason.
        body = http.post("/api/v1/hooks/pre-tool-use", json=request).json()

    if body["decision"] == "allow":
        say(f"Agent: allowed ({body.get('reason') or 'no gate applies'}). Paying invoice {request['tool_args']['invoice']} ... done.")
        return 0
    say(f"Agent: not allowed ({body['decision']}: {body.get('reason') or 'no reason given'}). Not paying; stopping here.")
    return 1


if __name__ == "__main__":
    sys.exit(main())
