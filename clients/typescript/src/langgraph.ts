/**
 * LangGraph.js gated by the approval gateway: a `ToolNode` that asks first (docs/integrations/typescript-langgraph.md):
 *
 * ```ts
 * import { createReactAgent } from "@langchain/langgraph/prebuilt";
 * import { GatewayClient } from "@approval-gateway/client";
 * import { GatewayToolNode } from "@approval-gateway/client/langgraph";
 *
 * const gateway = new GatewayClient(process.env.GATEWAY_URL!, process.env.GATEWAY_API_KEY!, { maxWait: 300 });
 * const agent = createReactAgent({ llm, tools: new GatewayToolNode([payInvoice, getBalance], gateway) });
 * ```
 *
 * `GatewayToolNode` is LangGraph's own `ToolNode` (use it wherever a `ToolNode` goes: `createReactAgent`,
 * or a node of your `StateGraph`) whose every tool call goes through the gateway, as the Python
 * `GatewayMiddleware` does for a LangChain agent:
 *
 * - allow: the tool runs with the arguments the gateway answered (a hook may have rewritten them, an
 *   approver edited them: the tool call is run with them, parsed by the tool's own schema); its result
 *   is reported (post-tool-use) and, if the gateway changed it, the model gets the gateway's version.
 * - deny, reject, still pending at `maxWait`, or an unreachable gateway: the tool does not run; the
 *   model gets a `ToolMessage` (`status: "error"`) with the reason
 *   (`pay_invoice was not run: rejected by bob: over budget`).
 * - the tool fails (throws, or its `ToolMessage` has `status: "error"`): tool-error; `retry`, `recover`,
 *   `abort` (throws `ToolRunAborted`: the graph run stops), `raise` (as without the gateway).
 *
 * LangGraph's own human-in-the-loop (`interrupt` and a resume `Command`) pauses the graph until your
 * program resumes it; the gateway instead keeps the tool call waiting for the person it asked, and can
 * change the arguments, so the gate is in the tool node and needs no checkpointer.
 */

import { ToolMessage } from "@langchain/core/messages";
import type { ToolCall } from "@langchain/core/messages/tool";
import { type DynamicStructuredTool, tool } from "@langchain/core/tools";
import { Command, type LangGraphRunnableConfig } from "@langchain/langgraph";
import { ToolNode, type ToolNodeOptions } from "@langchain/langgraph/prebuilt";

import { ASK_HUMAN, type AskHumanOptions, describe, HumanAsker, paramsSchema } from "./asking.js";
import type { GatewayClient } from "./client.js";
import { type GateResult, ToolGate, ToolRunAborted } from "./gate.js";
import { canonicalJson, isPlainObject, type JsonObject, resultText } from "./json.js";

export { ToolRunAborted };

/** The gateway session of a call: a string, or a function of the tool call, the run's config and the state. */
export type SessionId = string | ((call: ToolCall, config: LangGraphRunnableConfig, state: unknown) => string);

export interface GatewayToolNodeOptions extends ToolNodeOptions {
  /** Default: the LangGraph thread (`configurable.thread_id`), else the conversation (below). */
  sessionId?: SessionId;
  /** Sent with every call. */
  userId?: string;
  /** Sent with every call (`source: "langgraph"` is added). */
  metadata?: JsonObject;
  /** Seconds to wait for a human (default: the client's `maxWait`). */
  maxWait?: number;
  /** Prepended to the tool names the gateway sees (`billing__` → `billing__pay_invoice`). */
  toolPrefix?: string;
  /** Gate only the tools with these names (default: all). */
  only?: string[];
}

type NodeTools = ConstructorParameters<typeof ToolNode>[0];

/** A `ToolNode` whose tool calls ask the gateway before they run (see the module comment). */
export class GatewayToolNode<T = any> extends ToolNode<T> {
  readonly gate: ToolGate;
  readonly sessionId: SessionId | undefined;
  readonly toolPrefix: string;
  readonly only: Set<string> | null;

  constructor(tools: NodeTools, client: GatewayClient | ToolGate, options: GatewayToolNodeOptions = {}) {
    const { sessionId, userId, metadata, maxWait, toolPrefix, only, ...nodeOptions } = options;
    super(tools, nodeOptions);
    this.gate =
      client instanceof ToolGate
        ? client
        : new ToolGate(client, {
            userId,
            metadata: { source: "langgraph", ...(metadata ?? {}) },
            maxWait,
            keyPrefix: "langgraph",
          });
    this.sessionId = sessionId;
    this.toolPrefix = toolPrefix ?? "";
    this.only = only ? new Set(only) : null;
  }

  protected override async runTool(
    call: ToolCall,
    config: LangGraphRunnableConfig,
    state: unknown,
  ): Promise<ToolMessage | Command> {
    if (this.only !== null && !this.only.has(call.name)) return super.runTool(call, config, state);
    if (asksHuman(this.tools.find((candidate) => candidate.name === call.name))) return super.runTool(call, config, state);
    const asked: JsonObject = isPlainObject(call.args) ? { ...call.args } : {};
    const result = await this.gate.call<ToolMessage | Command>({
      toolName: `${this.toolPrefix}${call.name}`,
      toolArgs: asked,
      toolCallId: call.id,
      sessionId: this.session(call, config, state),
      signal: config.signal,
      run: (toolArgs) => {
        const same = canonicalJson(toolArgs) === canonicalJson(asked);
        return super.runTool(same ? call : { ...call, args: toolArgs }, config, state);
      },
      report: reportable,
      failure,
    });
    return answer(call, result);
  }

  private session(call: ToolCall, config: LangGraphRunnableConfig, state: unknown): string | undefined {
    if (typeof this.sessionId === "function") return String(this.sessionId(call, config, state));
    return this.sessionId || runSession(config, state);
  }
}

/** The session of the run a tool is called in: the LangGraph thread, else the conversation. */
function runSession(config: LangGraphRunnableConfig | undefined, state: unknown): string | undefined {
  const thread = config?.configurable?.["thread_id"];
  if (thread) return `langgraph-${thread}`;
  // Without a thread: the conversation, named by its first message (LangGraph's messages reducer
  // gives each message an id; a new invoke without a checkpointer is a new conversation).
  const messages = isPlainObject(state) ? state["messages"] : Array.isArray(state) ? state : undefined;
  const first = Array.isArray(messages) ? (messages[0] as { id?: string } | undefined) : undefined;
  return first?.id ? `langgraph-${first.id}` : undefined; // else the gate's own session
}

const ASKS_HUMAN = "gateway_asks_human"; // a tool's metadata key: asking a person is not a call to gate

function asksHuman(candidate: unknown): boolean {
  return Boolean((candidate as { metadata?: Record<string, unknown> } | undefined)?.metadata?.[ASKS_HUMAN]);
}

/**
 * A tool the model calls to ask a person through the gateway and wait for the answer (docs/asking.md):
 * `ask_human(question, choices?, several?)`, or with `answerSchema` (a form) and `name` a tool whose
 * answer's shape the code fixes. Options: `channel`, `gate`, `approvers`, `timeoutSeconds`,
 * `defaultAnswer`, `userId`, `metadata`, `maxWait` (as `GatewayClient.ask`), and `sessionId` (default:
 * the run's thread or conversation, as the gated calls'). `GatewayToolNode` leaves it alone (its metadata
 * says it asks a person). The model gets the answer as JSON, or `No answer: …`.
 */
export function askHumanTool(
  client: GatewayClient,
  options: AskHumanOptions & { name?: string; sessionId?: string } = {},
): DynamicStructuredTool {
  const { name, sessionId, ...where } = options;
  const asker = new HumanAsker(client, where);
  return tool(
    async (input: unknown, runtime: { state?: unknown; config?: LangGraphRunnableConfig; signal?: AbortSignal }) =>
      asker.ask(input, {
        sessionId: sessionId || runSession(runtime?.config ?? (runtime as LangGraphRunnableConfig), runtime?.state),
        signal: runtime?.signal,
      }),
    {
      name: name ?? ASK_HUMAN,
      description: describe(where.answerSchema),
      schema: paramsSchema(where.answerSchema) as never,
      metadata: { [ASKS_HUMAN]: true },
    },
  ) as unknown as DynamicStructuredTool;
}

/** What the gateway gets as the result: the ToolMessage's content (a Command's messages' contents). */
function reportable(value: ToolMessage | Command): unknown {
  if (ToolMessage.isInstance(value)) return value.content;
  if (value instanceof Command) {
    const update = isPlainObject(value.update) ? value.update : {};
    const messages = Array.isArray(update["messages"]) ? update["messages"] : [];
    const contents = messages.filter((m) => ToolMessage.isInstance(m)).map((m) => (m as ToolMessage).content);
    return contents.length ? contents : String(value);
  }
  return value;
}

function failure(value: ToolMessage | Command): string | null {
  if (ToolMessage.isInstance(value) && value.status === "error") return resultText(value.content) || "the tool failed";
  return null;
}

function answer(call: ToolCall, result: GateResult<ToolMessage | Command>): ToolMessage | Command {
  const fields = (content: string, status?: "error") => ({
    content,
    tool_call_id: call.id ?? "",
    name: call.name,
    ...(status ? { status } : {}),
  });
  switch (result.status) {
    case "ran":
      return result.value!;
    case "replaced":
      return new ToolMessage(fields(resultText(result.result)));
    case "aborted":
      throw new ToolRunAborted(result.message, result);
    case "failed":
      if (result.error !== undefined) throw result.error;
      return result.value!;
    default:
      return new ToolMessage(fields(result.message, "error")); // refused or withheld
  }
}
