// A payments agent on LangGraph.js, gated by the approval gateway: what a developer writes after
// `npm install @approval-gateway/client @langchain/langgraph @langchain/core @langchain/openai zod`.
// The request is argv[2]; GATEWAY_URL, GATEWAY_API_KEY, OPENAI_BASE_URL, OPENAI_API_KEY configure it
// (LANGGRAPH_THREAD_ID, if set, names the run's thread). It prints one JSON line: the final message, and
// every payment that really ran.
import { tool } from "@langchain/core/tools";
import { MemorySaver } from "@langchain/langgraph";
import { createReactAgent } from "@langchain/langgraph/prebuilt";
import { ChatOpenAI } from "@langchain/openai";
import { z } from "zod";

import { GatewayClient } from "@approval-gateway/client";
import { askHumanTool, GatewayToolNode } from "@approval-gateway/client/langgraph";

const paid = [];
const payInvoice = tool(
  async (args) => {
    paid.push(args);
    return `paid ${args.invoice_id}`;
  },
  {
    name: "pay_invoice",
    description: "Pay an invoice.",
    schema: z.object({
      invoice_id: z.string(),
      amount: z.number().int(),
      card: z.string(),
      memo: z.string(),
      route: z.string().optional(),
    }),
  },
);
const getBalance = tool(async () => "balance: 1200 EUR", {
  name: "get_balance",
  description: "The account's balance.",
  schema: z.object({}),
});

const gateway = new GatewayClient(process.env.GATEWAY_URL, process.env.GATEWAY_API_KEY, {
  maxWait: Number(process.env.GATEWAY_MAX_WAIT ?? 60),
  reconnectFor: Number(process.env.GATEWAY_RECONNECT_FOR ?? 10),
});
const llm = new ChatOpenAI({
  model: process.env.OPENAI_MODEL ?? "gpt-test",
  apiKey: process.env.OPENAI_API_KEY,
  configuration: { baseURL: process.env.OPENAI_BASE_URL },
});
const thread = process.env.LANGGRAPH_THREAD_ID;
const agent = createReactAgent({
  llm,
  tools: new GatewayToolNode([payInvoice, getBalance, askHumanTool(gateway)], gateway),
  ...(thread ? { checkpointSaver: new MemorySaver() } : {}),
});

const state = await agent.invoke(
  { messages: [{ role: "user", content: process.argv[2] }] },
  thread ? { configurable: { thread_id: thread } } : {},
);
const last = state.messages[state.messages.length - 1];
console.log(JSON.stringify({ final: last.content, paid }));
