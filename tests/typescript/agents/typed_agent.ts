// A TypeScript user's code against the installed package's declarations: every entry point, as the
// docs show it (type-checked by the tests with `tsc --noEmit`, never run).
import { createOpenAI } from "@ai-sdk/openai";
import { tool as lcTool } from "@langchain/core/tools";
import { createReactAgent } from "@langchain/langgraph/prebuilt";
import { ChatOpenAI } from "@langchain/openai";
import { Agent, run, tool as agentTool } from "@openai/agents";
import { generateText, stepCountIs, tool } from "ai";
import { z } from "zod";

import {
  type Answer,
  type Decision,
  GatewayAPIError,
  GatewayClient,
  type GateResult,
  NoAnswer,
  ToolGate,
  VERSION,
} from "@approval-gateway/client";
import { askHumanTool, gatewayStopped, gateTools, ToolRefused } from "@approval-gateway/client/ai-sdk";
import { askHumanTool as askHumanAgentTool, gateAgent } from "@approval-gateway/client/openai-agents";
import { askHumanTool as askHumanLangGraphTool, GatewayToolNode } from "@approval-gateway/client/langgraph";

const gateway = new GatewayClient("http://127.0.0.1:8000", "gw_key", { maxWait: 300, reconnectFor: 10 });
const decision: Decision = await gateway.preToolUse("s-1", "pay_invoice", { amount: 120 }, { toolCallId: "c-1" });
const runWith: Record<string, unknown> = decision.toolArgs;
const asked: Answer = await gateway.askQuestion("Which vendor?", { type: "string", enum: ["Acme", "Globex"] });
const version: string = VERSION;
const typed: unknown = await gateway.ask("Budget?", { type: "integer", minimum: 1 }).catch((error: unknown) => {
  if (error instanceof NoAnswer) return error.answer.status;
  if (error instanceof GatewayAPIError) return error.statusCode;
  throw error;
});
const gated: GateResult<string> = await new ToolGate(gateway).call({
  toolName: "lookup",
  toolArgs: { id: "c-1" },
  run: async (args) => `profile of ${String(args["id"])}`,
});

// The Vercel AI SDK
const payInvoice = tool({
  description: "Pay an invoice.",
  inputSchema: z.object({ invoice_id: z.string(), amount: z.number() }),
  execute: async ({ invoice_id }) => `paid ${invoice_id}`,
});
const tools = gateTools({ pay_invoice: payInvoice, ask_human: askHumanTool(gateway) }, gateway, { maxWait: 60 });
const result = await generateText({
  model: createOpenAI({ apiKey: "sk" })("gpt-test"),
  tools,
  stopWhen: [stepCountIs(5), gatewayStopped],
  prompt: "Pay invoice INV-7",
});
const refused = result.steps.flatMap((step) => step.content).filter((part) => part.type === "tool-error" && part.error instanceof ToolRefused);

// The OpenAI Agents SDK
const agent = new Agent({
  name: "payer",
  tools: [agentTool({ name: "pay_invoice", description: "Pay.", parameters: z.object({ amount: z.number() }), execute: async ({ amount }) => amount }), askHumanAgentTool(gateway)],
});
const agentResult = await run(gateAgent(agent, gateway, { toolPrefix: "billing__" }), "Pay invoice INV-7");

// LangGraph.js
const lookup = lcTool(async ({ id }) => `profile of ${id}`, { name: "lookup", description: "Look up.", schema: z.object({ id: z.string() }) });
const graph = createReactAgent({
  llm: new ChatOpenAI({ model: "gpt-test" }),
  tools: new GatewayToolNode([lookup, askHumanLangGraphTool(gateway)], gateway, { only: ["lookup"] }),
});

console.log(runWith, asked.answered, version, typed, gated.status, refused.length, agentResult.finalOutput, typeof graph.invoke);
