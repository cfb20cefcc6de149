/**
 * `GatewayClient`: the agent API (docs/reference/api.md) from TypeScript, with the Python client's
 * behaviour (docs/agent-client.md):
 *
 * ```ts
 * const gateway = new GatewayClient("http://127.0.0.1:8000", apiKey, { maxWait: 600 });
 * const decision = await gateway.preToolUse("session-1", "oa__purchase_pay", { amount: 80000 });
 * if (decision.allowed) await pay(decision.toolArgs); // the gateway may have rewritten them
 * else console.log("refused:", decision.reason);
 * ```
 *
 * `preToolUse` returns the *final* decision. It asks with `wait_seconds` (one long-poll round), then
 * long-polls `/confirmations/<id>/wait` round after round until a human decides or the client's own
 * deadline (`maxWait`) passes. Network errors and gateway restarts are retried with backoff for up to
 * `reconnectFor` seconds per outage; every ask carries an idempotency key (one is generated when you give
 * none), so a retry after a lost response finds the same request instead of making a second one.
 *
 * It fails closed: when the gateway cannot be reached the decision is `deny` (`decision.unreachable`),
 * unless the client was made with `failOpen: true`, which then answers `allow` with the original
 * arguments — but only if the gateway never answered: once it has asked a human, losing the gateway denies.
 * A request still pending at the deadline is denied (`decision.stillPending`); it stays pending in the
 * gateway, and asking again with `decision.idempotencyKey` picks up a decision that arrives later.
 *
 * Times are in seconds, as everywhere in the gateway's API.
 */

import { GatewayClientError, GatewayUnavailable } from "./errors.js";
import { dropEmpty, type JsonObject, randomHex } from "./json.js";
import { type Call, Transport } from "./transport.js";
import { VERSION } from "./version.js";

export const API_PREFIX = "/api/v1";
export const USER_AGENT = `approval-gateway-client-js/${VERSION}`;
/** Seconds for one request that the gateway does not hold. */
export const DEFAULT_TIMEOUT = 10;
/** Seconds the gateway holds one waiting request (its maximum is 60). */
export const DEFAULT_LONG_POLL = 25;
/** Seconds an outage is tolerated before giving up. */
export const DEFAULT_RECONNECT_FOR = 30;

export interface GatewayClientOptions {
  /** Seconds for one request the gateway does not hold (default 10). */
  timeout?: number;
  /** When the gateway cannot be reached (before it asked a human), allow instead of deny. */
  failOpen?: boolean;
  /** Default deadline of `preToolUse` and `ask`, in seconds (undefined: wait until decided or expired). */
  maxWait?: number;
  /** Seconds an outage (network error, restart, 5xx) is retried (default 30). */
  reconnectFor?: number;
  /** Seconds the gateway holds one waiting request (default 25, at most 60). */
  longPoll?: number;
  /** The `fetch` to use (default: the global one). */
  fetch?: typeof fetch;
}

export type DecisionKind = "allow" | "deny" | "skip";

/** What a pending pre-tool-use answer carries: `confirmation_id` names the request a human decides. */
export type PendingAnswer = JsonObject & { decision: "pending"; confirmation_id: string };

/** The final answer to a pre-tool-use call. Run the tool with `toolArgs` when `allowed`. */
export class Decision {
  readonly decision: DecisionKind;
  /** The arguments to run with: a hook may have rewritten them, an approver edited them. */
  readonly toolArgs: JsonObject;
  readonly reason: string;
  readonly confirmationId: string | null;
  /** For `skip`: the stored result of the same idempotent call, which already completed. */
  readonly result: unknown;
  readonly hookDecisions: JsonObject[];
  readonly sideEffects: string[];
  readonly idempotencyKey: string | null;
  /** Denied because nobody decided before the client's deadline (the request stays pending). */
  readonly stillPending: boolean;
  /** Decided here, without the gateway (fail closed, or fail open). */
  readonly unreachable: boolean;

  constructor(fields: {
    decision: DecisionKind;
    toolArgs: JsonObject;
    reason?: string;
    confirmationId?: string | null;
    result?: unknown;
    hookDecisions?: JsonObject[];
    sideEffects?: string[];
    idempotencyKey?: string | null;
    stillPending?: boolean;
    unreachable?: boolean;
  }) {
    this.decision = fields.decision;
    this.toolArgs = fields.toolArgs;
    this.reason = fields.reason ?? "";
    this.confirmationId = fields.confirmationId ?? null;
    this.result = fields.result ?? null;
    this.hookDecisions = fields.hookDecisions ?? [];
    this.sideEffects = fields.sideEffects ?? [];
    this.idempotencyKey = fields.idempotencyKey ?? null;
    this.stillPending = fields.stillPending ?? false;
    this.unreachable = fields.unreachable ?? false;
  }

  get allowed(): boolean {
    return this.decision === "allow";
  }

  get denied(): boolean {
    return this.decision === "deny";
  }

  get skipped(): boolean {
    return this.decision === "skip";
  }

  static fromAnswer(answer: JsonObject, idempotencyKey: string | null): Decision {
    return new Decision({
      decision: answer["decision"] as DecisionKind,
      toolArgs: (answer["tool_args"] as JsonObject) ?? {},
      reason: (answer["reason"] as string) || "",
      confirmationId: (answer["confirmation_id"] as string) ?? null,
      result: answer["result"],
      hookDecisions: [...((answer["hook_decisions"] as JsonObject[]) ?? [])],
      sideEffects: [...((answer["side_effects"] as string[]) ?? [])],
      idempotencyKey,
    });
  }
}

/** A question's outcome (docs/asking.md): `value` is the answer, typed as the schema says. */
export class Answer {
  readonly questionId: string | null;
  /** answered | expired | cancelled | rejected | pending (still, at the deadline) | unreachable */
  readonly status: string;
  /** The answer given, or the default once expired (`defaulted`). */
  readonly value: unknown;
  readonly defaulted: boolean;
  /** Channel-qualified: `slack:U…`, `feishu:ou_…`, `web:<user>`. */
  readonly answeredBy: string | null;
  readonly answeredByName: string | null;
  readonly reason: string;
  readonly url: string | null;

  constructor(fields: Partial<Omit<Answer, "answered">> & { status: string }) {
    this.questionId = fields.questionId ?? null;
    this.status = fields.status;
    this.value = fields.value ?? null;
    this.defaulted = fields.defaulted ?? false;
    this.answeredBy = fields.answeredBy ?? null;
    this.answeredByName = fields.answeredByName ?? null;
    this.reason = fields.reason ?? "";
    this.url = fields.url ?? null;
  }

  /** There is a value to use: a person's answer, or the default at expiry. */
  get answered(): boolean {
    return this.status === "answered" || (this.defaulted && this.value !== null);
  }

  static fromQuestion(question: JsonObject, reason?: string): Answer {
    return new Answer({
      questionId: (question["id"] as string) ?? null,
      status: (question["status"] as string) ?? "",
      value: question["answer"] ?? null,
      defaulted: Boolean(question["defaulted"]),
      answeredBy: (question["answered_by"] as string) ?? null,
      answeredByName: (question["answered_by_name"] as string) ?? null,
      reason: reason ?? ((question["reason"] as string) || ""),
      url: (question["url"] as string) ?? null,
    });
  }
}

/**
 * A question ended without an answer to return: expired with no default, cancelled, still pending at
 * the deadline, or the gateway could not be reached. `answer` says what is known.
 */
export class NoAnswer extends GatewayClientError {
  constructor(readonly answer: Answer) {
    super(answer.reason || `the question ended ${answer.status} without an answer`);
  }
}

export interface PreToolUseOptions {
  toolCallId?: string;
  userId?: string;
  metadata?: JsonObject;
  idempotencyKey?: string;
  callbackUrl?: string;
  /** Seconds to wait for a human (default: the client's `maxWait`). */
  maxWait?: number;
  /** Called once, as soon as the gateway says a human has to decide; the first ask is then not held. */
  onPending?: (answer: PendingAnswer) => void;
  /** The agent turn the call belongs to (default: the session's current turn). */
  turnId?: string;
  /** Stops waiting (the promise rejects with the signal's reason); the request stays in the gateway. */
  signal?: AbortSignal;
}

export interface AskOptions {
  channel?: string;
  gate?: string;
  approvers?: string[];
  timeoutSeconds?: number;
  defaultAnswer?: unknown;
  sessionId?: string;
  userId?: string;
  metadata?: JsonObject;
  callbackUrl?: string;
  /** Seconds to wait for the answer (default: the client's `maxWait`). */
  maxWait?: number;
  signal?: AbortSignal;
}

export interface PostToolUseOptions {
  result?: unknown;
  toolName?: string;
  toolArgs?: JsonObject;
  durationMs?: number;
  outcome?: "success" | "error";
  userId?: string;
  metadata?: JsonObject;
}

export interface ToolErrorOptions {
  attempt?: number;
  elapsedSeconds?: number;
  toolName?: string;
  toolArgs?: JsonObject;
  userId?: string;
  metadata?: JsonObject;
}

export interface EventOptions {
  turnId?: string;
  userId?: string;
  metadata?: JsonObject;
}

/** The agent API over `fetch`. Every method returns a promise; see the module comment. */
export class GatewayClient {
  readonly baseUrl: string;
  readonly timeout: number;
  readonly failOpen: boolean;
  readonly maxWait: number | undefined;
  readonly reconnectFor: number;
  readonly longPoll: number;
  private readonly transport: Transport;

  /**
   * @param baseUrl the gateway, e.g. `http://127.0.0.1:8000`.
   * @param apiKey the agent's key (`manage.py create_api_key AGENT`).
   */
  constructor(baseUrl: string, apiKey: string, options: GatewayClientOptions = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.timeout = options.timeout ?? DEFAULT_TIMEOUT;
    this.failOpen = options.failOpen ?? false;
    this.maxWait = options.maxWait;
    this.reconnectFor = options.reconnectFor ?? DEFAULT_RECONNECT_FOR;
    this.longPoll = options.longPoll ?? DEFAULT_LONG_POLL;
    const fetchImpl = options.fetch ?? globalThis.fetch;
    if (typeof fetchImpl !== "function") throw new TypeError("GatewayClient needs fetch (Node 20+)");
    this.transport = new Transport({
      baseUrl: this.baseUrl,
      headers: { Authorization: `Bearer ${apiKey}`, "User-Agent": USER_AGENT, Accept: "application/json" },
      timeout: this.timeout,
      reconnectFor: this.reconnectFor,
      fetch: fetchImpl,
    });
  }

  private send(call: Call, deadline: number | null = null, signal?: AbortSignal): Promise<any> {
    return this.transport.send(call, deadline, signal);
  }

  private deadline(maxWait: number | undefined): number | null {
    const limit = maxWait ?? this.maxWait;
    return limit === undefined || limit === null ? null : Date.now() + limit * 1000;
  }

  /** Seconds to hold the next waiting request; null once the deadline has passed. */
  private hold(deadline: number | null): number | null {
    if (deadline === null) return this.longPoll;
    const remaining = (deadline - Date.now()) / 1000;
    return remaining > 0 ? Math.min(this.longPoll, remaining) : null;
  }

  // -- pre-tool-use ---------------------------------------------------------------

  /**
   * Ask before a tool call; resolves to the final `Decision` (allow / deny / skip).
   *
   * Waits for a human as long as needed, up to `maxWait` seconds. Rejects with a `GatewayAPIError` for
   * a 4xx answer (bad input, bad key); an unreachable gateway is a deny (or an allow with `failOpen`),
   * not an error. An approver may have edited the arguments: run the tool with `decision.toolArgs`.
   */
  async preToolUse(
    sessionId: string,
    toolName: string,
    toolArgs: JsonObject = {},
    options: PreToolUseOptions = {},
  ): Promise<Decision> {
    const key = options.idempotencyKey || `gwc-${randomHex()}`;
    const body = dropEmpty({
      session_id: sessionId,
      tool_name: toolName,
      tool_args: { ...toolArgs },
      tool_call_id: options.toolCallId,
      turn_id: options.turnId,
      user_id: options.userId,
      metadata: options.metadata,
      idempotency_key: key,
      callback_url: options.callbackUrl,
    });
    const deadline = this.deadline(options.maxWait);
    const started = Date.now();
    // wait_seconds is an integer in the contract; a shorter hold falls through to /wait.
    const ask = (hold: number): Call => ({
      method: "POST",
      path: `${API_PREFIX}/hooks/pre-tool-use`,
      json: { ...body, wait_seconds: Math.floor(hold) },
      hold: Math.floor(hold),
      resend: true,
    });
    let answer: JsonObject | null = null;
    try {
      // With onPending the first ask is not held, so the caller learns at once that a human is asked.
      answer = await this.send(ask(options.onPending ? 0 : (this.hold(deadline) ?? 0)), deadline, options.signal);
      if (answer!["decision"] === "pending" && options.onPending) options.onPending(answer as PendingAnswer);
      while (answer!["decision"] === "pending") {
        const hold = this.hold(deadline);
        if (hold === null) return stillPending(answer!, key, toolArgs, started);
        const state = await this.send(
          {
            method: "GET",
            path: `${API_PREFIX}/confirmations/${answer!["confirmation_id"]}/wait`,
            params: { timeout: Math.round(hold * 1000) / 1000 },
            hold,
            resend: true,
          },
          deadline,
          options.signal,
        );
        // Final: ask again under the same key for the answer the gateway derives from it
        // (on_timeout, the reason, the arguments to run with).
        if (state["status"] !== "pending") answer = await this.send(ask(0), deadline, options.signal);
      }
    } catch (error) {
      if (!(error instanceof GatewayUnavailable)) throw error;
      return this.unreachable(error, answer, key, toolArgs);
    }
    return Decision.fromAnswer(answer!, key);
  }

  private unreachable(error: GatewayUnavailable, answer: JsonObject | null, key: string, toolArgs: JsonObject): Decision {
    // Fail-open covers a gateway that never answered; once a human has been asked
    // (a pending request exists), losing the gateway must not bypass them.
    const open = this.failOpen && answer === null;
    const reason = open
      ? `allowed without approval: the gateway at ${this.baseUrl} could not be reached (${error.message}); failOpen is on`
      : `denied: the gateway at ${this.baseUrl} could not be reached (${error.message}); failing closed`;
    return new Decision({
      decision: open ? "allow" : "deny",
      toolArgs,
      reason,
      confirmationId: (answer?.["confirmation_id"] as string) ?? null,
      idempotencyKey: key,
      unreachable: true,
    });
  }

  // -- questions (docs/asking.md) -------------------------------------------------

  /**
   * Ask a human `question`, to be answered as `answerSchema` says; the `Answer` once it is final (or
   * still pending after `maxWait` seconds). Rejects with a `GatewayAPIError` for a question the
   * gateway refuses (a 400 says why).
   */
  async askQuestion(question: string, answerSchema: JsonObject, options: AskOptions = {}): Promise<Answer> {
    const body = dropEmpty({
      question,
      answer_schema: answerSchema,
      channel: options.channel,
      gate: options.gate,
      approvers: options.approvers,
      timeout_seconds: options.timeoutSeconds,
      default_answer: options.defaultAnswer,
      session_id: options.sessionId,
      user_id: options.userId,
      metadata: options.metadata,
      callback_url: options.callbackUrl,
    });
    const deadline = this.deadline(options.maxWait);
    let question_: JsonObject | null = null;
    try {
      const hold = Math.floor(this.hold(deadline) ?? 0);
      // Not resent after a lost response: a second POST would ask a second question.
      const ask: Call = { method: "POST", path: `${API_PREFIX}/questions`, json: { ...body, wait_seconds: hold }, hold };
      question_ = await this.send(ask, deadline, options.signal);
      while (question_!["status"] === "pending") {
        const wait = this.hold(deadline);
        if (wait === null) {
          const reason = `question ${question_!["id"]} is still pending at the deadline; nobody answered yet`;
          return Answer.fromQuestion(question_!, reason);
        }
        question_ = await this.send(
          {
            method: "GET",
            path: `${API_PREFIX}/questions/${question_!["id"]}/wait`,
            params: { timeout: Math.round(wait * 1000) / 1000 },
            hold: wait,
            resend: true,
          },
          deadline,
          options.signal,
        );
      }
    } catch (error) {
      if (!(error instanceof GatewayUnavailable)) throw error;
      return new Answer({
        questionId: (question_?.["id"] as string) ?? null,
        status: "unreachable",
        reason: `the gateway at ${this.baseUrl} could not be reached (${error.message})`,
      });
    }
    return Answer.fromQuestion(question_!);
  }

  /**
   * Ask a human and resolve to the typed answer (or the default, if it expired with one). Rejects with
   * `NoAnswer` when there is none to return; `askQuestion` resolves to the whole `Answer` instead.
   */
  async ask(question: string, answerSchema: JsonObject, options: AskOptions = {}): Promise<unknown> {
    const answer = await this.askQuestion(question, answerSchema, options);
    if (!answer.answered) throw new NoAnswer(answer);
    return answer.value;
  }

  /** The question as the gateway holds it. */
  getQuestion(questionId: string): Promise<JsonObject> {
    return this.send({ method: "GET", path: `${API_PREFIX}/questions/${questionId}`, resend: true });
  }

  // -- the other lifecycle events (thin: the parsed answer) ------------------------

  private event(slug: string, body: JsonObject): Promise<JsonObject> {
    return this.send({ method: "POST", path: `${API_PREFIX}/hooks/${slug}`, json: body });
  }

  /** `{decision, reason, messages, side_effects}`: put `messages` into the history. */
  sessionStart(sessionId: string, options: EventOptions = {}): Promise<JsonObject> {
    return this.event(
      "session-start",
      dropEmpty({ session_id: sessionId, user_id: options.userId, metadata: options.metadata }),
    );
  }

  /** `{decision, reason, messages, side_effects}` before a turn. */
  preTurn(sessionId: string, options: EventOptions = {}): Promise<JsonObject> {
    return this.event(
      "pre-turn",
      dropEmpty({ session_id: sessionId, turn_id: options.turnId, user_id: options.userId, metadata: options.metadata }),
    );
  }

  /** Report an allowed call's result; `{result, side_effects}` (hooks may rewrite the result). */
  postToolUse(sessionId: string, toolCallId: string, options: PostToolUseOptions = {}): Promise<JsonObject> {
    const body = dropEmpty({
      session_id: sessionId,
      tool_call_id: toolCallId,
      tool_name: options.toolName,
      tool_args: options.toolArgs,
      duration_ms: options.durationMs,
      outcome: options.outcome ?? "success",
      user_id: options.userId,
      metadata: options.metadata,
    });
    return this.event("post-tool-use", { ...body, result: options.result ?? null });
  }

  /** Report a failed call; `{action: retry|recover|abort|raise, delay_seconds, result, reason}`. */
  toolError(sessionId: string, toolCallId: string, error: string, options: ToolErrorOptions = {}): Promise<JsonObject> {
    return this.event(
      "tool-error",
      dropEmpty({
        session_id: sessionId,
        tool_call_id: toolCallId,
        error,
        attempt: options.attempt ?? 1,
        elapsed_seconds: options.elapsedSeconds ?? 0,
        tool_name: options.toolName,
        tool_args: options.toolArgs,
        user_id: options.userId,
        metadata: options.metadata,
      }),
    );
  }

  /** `{side_effects}` after a turn. */
  postTurn(sessionId: string, options: EventOptions = {}): Promise<JsonObject> {
    return this.event(
      "post-turn",
      dropEmpty({ session_id: sessionId, turn_id: options.turnId, user_id: options.userId, metadata: options.metadata }),
    );
  }

  /** `{side_effects}` when the session ends. */
  sessionEnd(sessionId: string, options: EventOptions = {}): Promise<JsonObject> {
    return this.event(
      "session-end",
      dropEmpty({ session_id: sessionId, user_id: options.userId, metadata: options.metadata }),
    );
  }

  // -- confirmation requests ------------------------------------------------------

  /** `{id, status, tool_name, tool_args, reason, decided_by, decided_at, expires_at, url, …}`. */
  getConfirmation(confirmationId: string): Promise<JsonObject> {
    return this.send({ method: "GET", path: `${API_PREFIX}/confirmations/${confirmationId}`, resend: true });
  }

  /** One long-poll: the request as soon as it is final, or still pending after `timeout` seconds. */
  wait(confirmationId: string, timeout: number = DEFAULT_LONG_POLL, signal?: AbortSignal): Promise<JsonObject> {
    return this.send(
      {
        method: "GET",
        path: `${API_PREFIX}/confirmations/${confirmationId}/wait`,
        params: { timeout },
        hold: timeout,
        resend: true,
      },
      null,
      signal,
    );
  }

  /** Withdraw a pending request; rejects with `AlreadyDecided` if it was decided first. */
  cancel(confirmationId: string): Promise<JsonObject> {
    return this.send({ method: "POST", path: `${API_PREFIX}/confirmations/${confirmationId}/cancel` });
  }
}

function stillPending(answer: JsonObject, key: string, toolArgs: JsonObject, started: number): Decision {
  const waited = Math.round((Date.now() - started) / 1000);
  return new Decision({
    decision: "deny",
    toolArgs: (answer["tool_args"] as JsonObject) ?? toolArgs,
    reason:
      `approval is still pending after ${waited}s (confirmation ${answer["confirmation_id"]}); ` +
      "ask again with the same idempotency key to pick up the decision",
    confirmationId: answer["confirmation_id"] as string,
    hookDecisions: [...((answer["hook_decisions"] as JsonObject[]) ?? [])],
    sideEffects: [...((answer["side_effects"] as string[]) ?? [])],
    idempotencyKey: key,
    stillPending: true,
  });
}
