// A payments agent on the Vercel AI SDK, gated by the approval gateway: what a developer writes after
// `npm install @approval-gateway/client ai @ai-sdk/openai zod`. The request is argv[2]; GATEWAY_URL,
// GATEWAY_API_KEY, OPENAI_BASE_URL, OPENAI_API_KEY (and GATEWAY_MAX_WAIT, GATEWAY_RECONNECT_FOR) configure
// it. It prints one JSON line: the final text, and every payment that really ran.
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, stepCountIs, tool } from "ai";
import { z } from "zod";

import { GatewayClient } from "@approval-gateway/client";
import { askHumanTool, gatewayStopped, gateTools } from "@approval-gateway/client/ai-sdk";

const paid = [];
const payInvoice = tool({
  description: "Pay an invoice.",
  inputSchema: z.object({
    invoice_id: z.string(),
    amount: z.number().int(),
    card: z.string(),
    memo: z.string(),
    route: z.string().optional(),
  }),
  execute: async (args) => {
    paid.push(args);
    return `paid ${args.invoice_id}`;
  },
});
const getBalance = tool({
  description: "The account's balance.",
  inputSchema: z.object({}),
  execute: async () => "balance: 1200 EUR",
});

const gateway = new GatewayClient(process.env.GATEWAY_URL, process.env.GATEWAY_API_KEY, {
  maxWait: Number(process.env.GATEWAY_MAX_WAIT ?? 60),
  reconnectFor: Number(process.env.GATEWAY_RECONNECT_FOR ?? 10),
});
const openai = createOpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: process.env.OPENAI_API_KEY });

const result = await generateText({
  model: openai(process.env.OPENAI_MODEL ?? "gpt-test"),
  tools: gateTools({ pay_invoice: payInvoice, get_balance: getBalance, ask_human: askHumanTool(gateway) }, gateway),
  stopWhen: [stepCountIs(5), gatewayStopped],
  prompt: process.argv[2],
});
const errors = result.steps.flatMap((step) => step.content.filter((part) => part.type === "tool-error"));
console.log(JSON.stringify({ final: result.text, paid, errors: errors.map((e) => [e.toolName, e.error.name]) }));
