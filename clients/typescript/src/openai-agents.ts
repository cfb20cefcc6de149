/**
 * The OpenAI Agents SDK for JS (`@openai/agents`) gated by the approval gateway, in one call
 * (docs/integrations/typescript-openai-agents.md):
 *
 * ```ts
 * import { run } from "@openai/agents";
 * import { GatewayClient } from "@approval-gateway/client";
 * import { gateAgent } from "@approval-gateway/client/openai-agents";
 *
 * const gateway = new GatewayClient(process.env.GATEWAY_URL!, process.env.GATEWAY_API_KEY!, { maxWait: 300 });
 * const result = await run(gateAgent(agent, gateway), "Pay invoice INV-7");
 * ```
 *
 * `gateAgent` returns a copy of the agent (`agent.clone`) whose function tools ask the gateway before
 * they run (`gateTool` does it for one tool), as `gateway_client.openai_agents` does in Python. Each
 * gated tool wraps the tool's own `invoke`, so what the SDK does around it — its approval hook
 * (`needsApproval`, interruptions, `RunState.approve`), input guardrails, timeouts, tracing — is unchanged
 * and comes first:
 *
 * - allow: the tool runs with the arguments the gateway answered (a hook may have rewritten them, an
 *   approver edited them: the tool gets them as its JSON input, parsed by its own schema); its output is
 *   reported (post-tool-use), and if the gateway changed it the model gets the gateway's version.
 * - deny, reject, still pending at `maxWait`, or an unreachable gateway: the tool does not run; its
 *   output, which the model reads, is the reason (`pay_invoice was not run: rejected by bob: over budget`).
 * - the tool throws (a tool made with `errorFunction: null`; by default the SDK turns an error into a
 *   message before the gate sees it): tool-error; `retry`, `recover`, `abort` (throws `ToolRunAborted`:
 *   the run stops), `raise` (the error goes on, as without the gateway).
 *
 * `askHumanTool(client)` is a tool the model calls to ask a person and wait for the answer (docs/asking.md);
 * `gateAgent` leaves it alone: asking is not a call to gate.
 *
 * The SDK's approval hook answers yes or no about the arguments the model wrote and has no way to run
 * others, while a gateway approval may change them; so the gate is in `invoke`, after the hook.
 */

import { type Agent, type FunctionTool, getCurrentTrace, type RunContext, type Tool, tool } from "@openai/agents";

import { ASK_HUMAN, type AskHumanOptions, describe, HumanAsker, paramsSchema } from "./asking.js";

import type { GatewayClient } from "./client.js";
import { ToolGate, ToolRunAborted } from "./gate.js";
import { canonicalJson, isPlainObject, type JsonObject, randomHex, resultText } from "./json.js";

export { ToolRunAborted };

type AnyFunctionTool = FunctionTool<any, any, any>;
type Details = Parameters<AnyFunctionTool["invoke"]>[2];

/** The gateway session of a call: a string, or a function of the run's context and the call's details. */
export type SessionId = string | ((runContext: RunContext<any>, details: Details) => string);

export interface GateAgentOptions {
  /** Default: the run's trace group (tracing on), else its trace, else one session per run (its RunContext). */
  sessionId?: SessionId;
  /** Sent with every call. */
  userId?: string;
  /** Sent with every call (`source: "openai-agents"` is added). */
  metadata?: JsonObject;
  /** Seconds to wait for a human (default: the client's `maxWait`). */
  maxWait?: number;
  /** Prepended to the tool names the gateway sees (`billing__` → `billing__pay_invoice`). */
  toolPrefix?: string;
  /** Gate only the tools with these names (default: every function tool). */
  tools?: string[];
}

/** The `ToolGate` the gated tools share (a `ToolGate` passes through unchanged). */
export function toolGate(client: GatewayClient | ToolGate, options: GateAgentOptions = {}): ToolGate {
  if (client instanceof ToolGate) return client;
  return new ToolGate(client, {
    userId: options.userId,
    metadata: { source: "openai-agents", ...(options.metadata ?? {}) },
    maxWait: options.maxWait,
    keyPrefix: "openai-agents",
  });
}

/**
 * A copy of `agent` whose function tools (all, or those named in `options.tools`) ask the gateway first.
 * Handoff agents are not changed: gate each agent. Hosted tools run at OpenAI and cannot be gated here;
 * put the gateway's MCP proxy in front of MCP servers.
 */
export function gateAgent<A extends Agent<any, any>>(
  agent: A,
  client: GatewayClient | ToolGate,
  options: GateAgentOptions = {},
): A {
  const gate = toolGate(client, options);
  const only = options.tools ? new Set(options.tools) : null;
  const tools = agent.tools.map((tool: Tool<any>) =>
    tool.type === "function" && (only === null || only.has(tool.name)) && !ASKING.has(tool)
      ? gateTool(tool, gate, { name: `${options.toolPrefix ?? ""}${tool.name}`, sessionId: options.sessionId })
      : tool,
  );
  return agent.clone({ tools }) as A;
}

/** A copy of `tool` that asks the gateway (as the tool `name`, default its own name) before it runs. */
export function gateTool<T extends AnyFunctionTool>(
  tool: T,
  client: GatewayClient | ToolGate,
  options: { name?: string; sessionId?: SessionId } = {},
): T {
  const gate = toolGate(client);
  const name = options.name ?? tool.name;
  const original = tool.invoke;

  const invoke = async (runContext: RunContext<any>, input: string, details?: Details): Promise<unknown> => {
    let args: unknown;
    try {
      args = input ? JSON.parse(input) : {};
    } catch {
      args = undefined;
    }
    if (!isPlainObject(args)) return `${tool.name} was not run: its arguments are not a JSON object`;
    const result = await gate.call({
      toolName: name,
      toolArgs: args,
      toolCallId: details?.toolCall?.callId,
      sessionId: session(runContext, details, options.sessionId),
      signal: details?.signal,
      run: (toolArgs) => {
        // The model's own JSON when nothing changed; else the answered arguments, which its schema parses.
        const json = sameArgs(args, toolArgs) ? input : JSON.stringify(toolArgs);
        return original.call(tool, runContext, json, details);
      },
    });
    switch (result.status) {
      case "ran":
        return result.value;
      case "replaced":
        return resultText(result.result);
      case "aborted":
        throw new ToolRunAborted(result.message, result);
      case "failed":
        if (result.error !== undefined) throw result.error;
        return result.value;
      default:
        return result.message; // refused or withheld
    }
  };
  return { ...tool, invoke } as T;
}

// The ask_human tools made here: asking a person is not a call to gate (gateAgent leaves them alone).
const ASKING = new WeakSet<object>();

/**
 * A tool the model calls to ask a person through the gateway and wait for the answer (docs/asking.md):
 * `ask_human(question, choices?, several?)`, or with `answerSchema` (a form) and `name` a tool whose
 * answer's shape the code fixes. Options: `channel`, `gate`, `approvers`, `timeoutSeconds`,
 * `defaultAnswer`, `userId`, `metadata`, `maxWait` (as `GatewayClient.ask`), and `sessionId` (default: the
 * run's, as the gated tools'). The model gets the answer as JSON, or `No answer: …`.
 */
export function askHumanTool(
  client: GatewayClient,
  options: AskHumanOptions & { name?: string; sessionId?: SessionId } = {},
): AnyFunctionTool {
  const { name, sessionId, ...where } = options;
  const asker = new HumanAsker(client, where);
  const made = tool({
    name: name ?? ASK_HUMAN,
    description: describe(where.answerSchema),
    parameters: paramsSchema(where.answerSchema) as never,
    strict: true,
    execute: (input: unknown, runContext?: RunContext<any>, details?: Details) =>
      asker.ask(input, { sessionId: session(runContext!, details, sessionId), signal: details?.signal }),
  });
  ASKING.add(made);
  return made;
}

function sameArgs(asked: JsonObject, answered: JsonObject): boolean {
  return canonicalJson(asked) === canonicalJson(answered);
}

// One session per run when no trace names one: the SDK makes one RunContext per `run()` and hands it to
// every tool call of the run. Held weakly: an entry goes with its run.
const runs = new WeakMap<object, string>();

function session(runContext: RunContext<any>, details: Details, sessionId: SessionId | undefined): string | undefined {
  if (typeof sessionId === "function") return String(sessionId(runContext, details));
  if (sessionId) return sessionId;
  const trace = getCurrentTrace();
  if (trace?.groupId) return `openai-agents-${trace.groupId}`;
  if (trace?.traceId && trace.traceId !== "no-op") return `openai-agents-${trace.traceId}`;
  if (!runContext || typeof runContext !== "object") return undefined; // the gate's own
  let id = runs.get(runContext);
  if (id === undefined) {
    id = `openai-agents-run-${randomHex(16)}`;
    runs.set(runContext, id);
  }
  return id;
}
