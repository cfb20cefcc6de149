/**
 * The Vercel AI SDK (`ai`) gated by the approval gateway, in one line (docs/integrations/typescript-ai-sdk.md):
 *
 * ```ts
 * import { generateText, stepCountIs } from "ai";
 * import { GatewayClient } from "@approval-gateway/client";
 * import { gateTools } from "@approval-gateway/client/ai-sdk";
 *
 * const gateway = new GatewayClient(process.env.GATEWAY_URL!, process.env.GATEWAY_API_KEY!, { maxWait: 300 });
 * const result = await generateText({ model, tools: gateTools({ payInvoice, getBalance }, gateway),
 *                                     stopWhen: stepCountIs(5), prompt: "Pay invoice INV-7" });
 * ```
 *
 * `gateTools` returns the tool set with every tool that has an `execute` wrapped (`gateTool` does it for
 * one): the wrapped `execute` asks the gateway before the tool runs, as the Python adapters do —
 *
 * - allow: the tool runs with the arguments the gateway answered (a hook may have rewritten them, an
 *   approver edited them; they are checked against the tool's `inputSchema` again); its output is
 *   reported (post-tool-use) and what the gateway answers (e.g. cut by `truncate_result`) is the output.
 * - deny, reject, still pending at `maxWait`, or an unreachable gateway: the tool does not run; the
 *   wrapped `execute` throws `ToolRefused`, which the SDK turns into a `tool-error` whose text — the
 *   reason (`pay_invoice was not run: rejected by bob: over budget`) — the model reads.
 * - the tool throws: tool-error; `retry` runs it again, `recover` gives the model the gateway's result,
 *   `abort` throws `ToolRunAborted` (add `stopWhen: gatewayStopped` to end the run there), and `raise`
 *   rethrows the tool's own error (the SDK's handling, as without the gateway).
 *
 * `askHumanTool(client)` is a tool the model calls to ask a person and wait for the answer (docs/asking.md);
 * `gateTools` leaves it alone: asking is not a call to gate.
 *
 * The SDK's own approval (`needsApproval`) is left as it is, and runs before the gateway is asked: it
 * answers yes or no, while the gateway's approval can also change the arguments, so the gate sits in
 * `execute`.
 */

import { asSchema, jsonSchema, type StopCondition, type Tool, type ToolExecutionOptions, type ToolSet } from "ai";

import { type AskHumanOptions, describe, HumanAsker, paramsSchema } from "./asking.js";

import { Decision, type GatewayClient } from "./client.js";
import { GatewayClientError } from "./errors.js";
import { type GateResult, ToolGate, ToolRunAborted } from "./gate.js";
import { canonicalJson, isPlainObject, type JsonObject, randomHex } from "./json.js";

export { ToolRunAborted };

/** The gateway session of a call: a string, or a function of the SDK's tool execution options. */
export type SessionId = string | ((options: ToolExecutionOptions) => string);

export interface GateToolsOptions {
  /** Default: one session per conversation (below). */
  sessionId?: SessionId;
  /** Sent with every call. */
  userId?: string;
  /** Sent with every call (`source: "ai-sdk"` is added). */
  metadata?: JsonObject;
  /** Seconds to wait for a human (default: the client's `maxWait`). */
  maxWait?: number;
  /** Prepended to the tool names the gateway sees (`billing__` → `billing__payInvoice`). */
  toolPrefix?: string;
  /** Gate only the tools with these names (default: every tool that has an `execute`). */
  tools?: string[];
}

/**
 * The tool was not run (refused, still pending, the gateway unreachable), or it ran and its result is
 * withheld: thrown from the gated `execute`, so the SDK records a `tool-error` and the model reads
 * `message`. `result` is the gate's whole outcome.
 */
export class ToolRefused extends GatewayClientError {
  constructor(
    message: string,
    readonly result: GateResult,
  ) {
    super(message);
  }
}

/** The `ToolGate` the gated tools share (a `ToolGate` passes through unchanged). */
export function toolGate(client: GatewayClient | ToolGate, options: GateToolsOptions = {}): ToolGate {
  if (client instanceof ToolGate) return client;
  return new ToolGate(client, {
    userId: options.userId,
    metadata: { source: "ai-sdk", ...(options.metadata ?? {}) },
    maxWait: options.maxWait,
    keyPrefix: "ai-sdk",
  });
}

/** `tools` with each tool that has an `execute` (all, or those named in `options.tools`) asking the gateway first. */
export function gateTools<TOOLS extends ToolSet>(
  tools: TOOLS,
  client: GatewayClient | ToolGate,
  options: GateToolsOptions = {},
): TOOLS {
  const gate = toolGate(client, options);
  const only = options.tools ? new Set(options.tools) : null;
  const gated: Record<string, Tool> = {};
  for (const [name, tool] of Object.entries(tools)) {
    const wanted = (only === null || only.has(name)) && typeof tool.execute === "function" && !ASKING.has(tool);
    const gatewayName = `${options.toolPrefix ?? ""}${name}`;
    gated[name] = wanted ? gateTool(tool, gate, { name: gatewayName, sessionId: options.sessionId }) : tool;
  }
  return gated as TOOLS;
}

/** A copy of `tool` that asks the gateway (as the tool `name`: its key in the tool set) before it runs. */
export function gateTool<T extends Tool>(
  tool: T,
  client: GatewayClient | ToolGate,
  options: { name: string; sessionId?: SessionId },
): T {
  const original = tool.execute;
  if (typeof original !== "function") throw new TypeError(`${options.name} has no execute: there is nothing to gate`);
  const gate = toolGate(client);
  const name = options.name;

  const execute = async (input: unknown, execution: ToolExecutionOptions): Promise<unknown> => {
    if (!isPlainObject(input)) {
      throw new ToolRefused(`${name} was not run: its arguments are not a JSON object`, notRun(input));
    }
    const result = await gate.call({
      toolName: name,
      toolArgs: input,
      toolCallId: execution.toolCallId,
      sessionId: session(execution, options.sessionId),
      signal: execution.abortSignal,
      run: async (toolArgs) => {
        // The exact input the SDK parsed when nothing changed; else the answered arguments, parsed again.
        const args = canonicalJson(toolArgs) === canonicalJson(input) ? input : await parsed(tool, name, toolArgs);
        return lastOutput(await original.call(tool, args as never, execution));
      },
    });
    switch (result.status) {
      case "ran":
        return result.value;
      case "replaced":
        return result.result;
      case "aborted":
        throw new ToolRunAborted(result.message, result);
      case "failed":
        if (result.error !== undefined) throw result.error;
        return result.value;
      default:
        throw new ToolRefused(result.message, result); // refused or withheld
    }
  };
  return { ...tool, execute } as T;
}

/**
 * A stop condition for `generateText` / `streamText`: the run ends after a step in which the gateway
 * stopped a failed tool (`abort`). `stopWhen: [stepCountIs(10), gatewayStopped]`.
 */
export const gatewayStopped: StopCondition<any> = ({ steps }) => {
  const last = steps[steps.length - 1];
  return Boolean(last?.content.some((part) => part.type === "tool-error" && part.error instanceof ToolRunAborted));
};

// The ask_human tools made here: asking a person is not a call to gate (gateTools leaves them alone).
const ASKING = new WeakSet<object>();

/**
 * A tool the model calls to ask a person through the gateway and wait for the answer (docs/asking.md):
 * `ask_human(question, choices?, several?)`, or with `answerSchema` (a form) a tool whose answer's shape
 * the code fixes. Put it in the tool set under the name you like (`ask_human`). Options: `channel`, `gate`,
 * `approvers`, `timeoutSeconds`, `defaultAnswer`, `userId`, `metadata`, `maxWait` (as `GatewayClient.ask`),
 * and `sessionId` (default: the conversation's, as the gated tools'). The model gets the answer as JSON
 * (`"Globex" (answered by alice)`), or `No answer: …`.
 */
export function askHumanTool(
  client: GatewayClient,
  options: AskHumanOptions & { sessionId?: SessionId } = {},
): Tool<JsonObject, string> {
  const { sessionId, ...where } = options;
  const asker = new HumanAsker(client, where);
  const made: Tool<JsonObject, string> = {
    description: describe(where.answerSchema),
    inputSchema: jsonSchema<JsonObject>(paramsSchema(where.answerSchema) as never),
    execute: (input, execution) =>
      asker.ask(input, { sessionId: session(execution, sessionId), signal: execution.abortSignal }),
  };
  ASKING.add(made);
  return made;
}

/** Arguments an approver edited or a hook rewrote, checked against the tool's schema (with its transforms). */
async function parsed(tool: Tool, name: string, toolArgs: JsonObject): Promise<unknown> {
  const schema = asSchema(tool.inputSchema);
  if (!schema.validate) return toolArgs;
  const outcome = await schema.validate(toolArgs);
  if (outcome.success) return outcome.value;
  throw new TypeError(`the arguments the gateway answered do not fit ${name}'s input schema: ${outcome.error.message}`);
}

/** An `execute` may stream preliminary outputs (an async iterable): the last one is the output. */
async function lastOutput(output: unknown): Promise<unknown> {
  if (output !== null && typeof output === "object" && Symbol.asyncIterator in output) {
    let last: unknown = undefined;
    for await (const part of output as AsyncIterable<unknown>) last = part;
    return last;
  }
  return output;
}

// Sessions: one per conversation, told apart by the first message of the prompt the model was sent.
// `generateText({ prompt })` makes a new one each call; calls that pass the same `messages` history
// (a chat's conversation) share it. Held weakly: an entry goes with its conversation.
const conversations = new WeakMap<object, string>();

function session(execution: ToolExecutionOptions, sessionId: SessionId | undefined): string | undefined {
  if (typeof sessionId === "function") return String(sessionId(execution));
  if (sessionId) return sessionId;
  const first = execution.messages?.[0];
  if (first === undefined || first === null || typeof first !== "object") return undefined; // the gate's own
  let id = conversations.get(first);
  if (id === undefined) {
    id = `ai-sdk-${randomHex(16)}`;
    conversations.set(first, id);
  }
  return id;
}

function notRun(input: unknown): GateResult {
  const reason = "its arguments are not a JSON object";
  const decision = new Decision({ decision: "deny", toolArgs: {}, reason });
  return { status: "refused", decision, value: input, message: reason, attempts: 0 };
}
