/**
 * `@approval-gateway/client`: the agent side of the approval gateway, for TypeScript (docs/agent-client.md).
 *
 * - `GatewayClient`: the agent API; `preToolUse(...)` resolves to the final `Decision`, waiting for a
 *   human as needed; `ask(...)` asks a human a question and resolves to the typed answer.
 * - `ToolGate`: one tool call through the gateway (ask, run with the answered arguments, report), the
 *   engine of the adapters.
 * - Adapters, each importing its framework (an optional peer dependency):
 *   `@approval-gateway/client/ai-sdk` (Vercel AI SDK), `/openai-agents` (OpenAI Agents SDK),
 *   `/langgraph` (LangGraph.js). This root module imports none of them.
 */

export { VERSION } from "./version.js";
export {
  API_PREFIX,
  Answer,
  type AskOptions,
  DEFAULT_LONG_POLL,
  DEFAULT_RECONNECT_FOR,
  DEFAULT_TIMEOUT,
  Decision,
  type DecisionKind,
  type EventOptions,
  GatewayClient,
  type GatewayClientOptions,
  NoAnswer,
  type PendingAnswer,
  type PostToolUseOptions,
  type PreToolUseOptions,
  type ToolErrorOptions,
  USER_AGENT,
} from "./client.js";
export {
  AlreadyDecided,
  Conflict,
  Forbidden,
  GatewayAPIError,
  GatewayClientError,
  GatewayUnavailable,
  IdempotencyKeyReused,
  InvalidRequest,
  NotFound,
  ServerError,
  Unauthorized,
} from "./errors.js";
export {
  type GateCall,
  type GateResult,
  type GateStatus,
  pendingMessage,
  refusedMessage,
  ToolGate,
  type ToolGateOptions,
  ToolRunAborted,
  withheldMessage,
} from "./gate.js";
export { type JsonObject, resultText } from "./json.js";
export { ASK_HUMAN, type AskHumanOptions, HumanAsker, outputForModel, paramsSchema, schemaFor } from "./asking.js";
