// A payments agent on the OpenAI Agents SDK for JS, gated by the approval gateway: what a developer writes
// after `npm install @approval-gateway/client @openai/agents zod`. The request is argv[2]; GATEWAY_URL,
// GATEWAY_API_KEY, OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_AGENTS_DISABLE_TRACING configure it. It prints
// one JSON line: the final output, and every payment that really ran.
import { Agent, run, tool } from "@openai/agents";
import { z } from "zod";

import { GatewayClient } from "@approval-gateway/client";
import { askHumanTool, gateAgent } from "@approval-gateway/client/openai-agents";

const paid = [];
const payInvoice = tool({
  name: "pay_invoice",
  description: "Pay an invoice.",
  parameters: z.object({
    invoice_id: z.string(),
    amount: z.number().int(),
    card: z.string(),
    memo: z.string(),
    route: z.string().nullable(),
  }),
  execute: async (args) => {
    paid.push(args);
    return `paid ${args.invoice_id}`;
  },
});
const getBalance = tool({
  name: "get_balance",
  description: "The account's balance.",
  parameters: z.object({}),
  execute: async () => "balance: 1200 EUR",
});

const gateway = new GatewayClient(process.env.GATEWAY_URL, process.env.GATEWAY_API_KEY, {
  maxWait: Number(process.env.GATEWAY_MAX_WAIT ?? 60),
  reconnectFor: Number(process.env.GATEWAY_RECONNECT_FOR ?? 10),
});
const agent = new Agent({
  name: "payer",
  instructions: "Pay invoices.",
  model: process.env.OPENAI_MODEL ?? "gpt-test",
  tools: [payInvoice, getBalance, askHumanTool(gateway)],
});

const result = await run(gateAgent(agent, gateway), process.argv[2]);
console.log(JSON.stringify({ final: result.finalOutput, paid }));
