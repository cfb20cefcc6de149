// A support agent whose one tool, `lookup`, fails its first FLAKY_FAILURES calls (all of them by default),
// gated by the approval gateway on the framework named in argv[2] (ai_sdk, openai_agents, langgraph); the
// request is argv[3]. It prints one JSON line: the final text, the lookups tried, and the error the run
// ended with, if any.
import { GatewayClient } from "@approval-gateway/client";

const [framework, request] = process.argv.slice(2);
const failures = Number(process.env.FLAKY_FAILURES ?? Infinity);
const calls = [];
function lookup(customerId) {
  calls.push(customerId);
  if (calls.length <= failures) throw new Error("503 the CRM is busy");
  return `profile of ${customerId}`;
}
const gateway = new GatewayClient(process.env.GATEWAY_URL, process.env.GATEWAY_API_KEY, { maxWait: 30 });

async function aiSdk() {
  const { createOpenAI } = await import("@ai-sdk/openai");
  const { generateText, stepCountIs, tool } = await import("ai");
  const { z } = await import("zod");
  const { gatewayStopped, gateTools } = await import("@approval-gateway/client/ai-sdk");
  const openai = createOpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: process.env.OPENAI_API_KEY });
  const tools = {
    lookup: tool({
      description: "A customer's profile.",
      inputSchema: z.object({ customer_id: z.string() }),
      execute: async ({ customer_id }) => lookup(customer_id),
    }),
  };
  const result = await generateText({
    model: openai("gpt-test"),
    tools: gateTools(tools, gateway),
    stopWhen: [stepCountIs(5), gatewayStopped],
    prompt: request,
  });
  const errors = result.steps.flatMap((step) => step.content.filter((part) => part.type === "tool-error"));
  return { final: result.text, stopped_by: errors.map((e) => `${e.error.name}: ${e.error.message}`) };
}

async function openaiAgents() {
  const { Agent, run, tool } = await import("@openai/agents");
  const { z } = await import("zod");
  const { gateAgent } = await import("@approval-gateway/client/openai-agents");
  const agent = new Agent({
    name: "crm",
    instructions: "Look customers up.",
    model: "gpt-test",
    tools: [
      tool({
        name: "lookup",
        description: "A customer's profile.",
        parameters: z.object({ customer_id: z.string() }),
        errorFunction: null, // errors reach the gateway's tool-error hooks
        execute: async ({ customer_id }) => lookup(customer_id),
      }),
    ],
  });
  return { final: (await run(gateAgent(agent, gateway), request)).finalOutput };
}

async function langgraph() {
  const { tool } = await import("@langchain/core/tools");
  const { createReactAgent } = await import("@langchain/langgraph/prebuilt");
  const { ChatOpenAI } = await import("@langchain/openai");
  const { z } = await import("zod");
  const { GatewayToolNode } = await import("@approval-gateway/client/langgraph");
  const lookupTool = tool(async ({ customer_id }) => lookup(customer_id), {
    name: "lookup",
    description: "A customer's profile.",
    schema: z.object({ customer_id: z.string() }),
  });
  const llm = new ChatOpenAI({ model: "gpt-test", apiKey: process.env.OPENAI_API_KEY, configuration: { baseURL: process.env.OPENAI_BASE_URL } });
  const agent = createReactAgent({ llm, tools: new GatewayToolNode([lookupTool], gateway) });
  const state = await agent.invoke({ messages: [{ role: "user", content: request }] });
  return { final: state.messages[state.messages.length - 1].content };
}

const frameworks = { ai_sdk: aiSdk, openai_agents: openaiAgents, langgraph };
try {
  console.log(JSON.stringify({ ...(await frameworks[framework]()), calls }));
} catch (error) {
  console.log(JSON.stringify({ error: `${error.name}: ${error.message}`, cause: error.cause?.name ?? null, calls }));
}
