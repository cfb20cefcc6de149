/**
 * `ToolGate`: one tool call through the gateway, for any agent framework — the engine of the adapters,
 * as `gateway_client.ToolGate` is in Python (docs/integrations/README.md):
 *
 * 1. **Ask** (`preToolUse`), waiting for a human up to `maxWait`. Deny, reject, still pending at the
 *    deadline, or an unreachable gateway: the tool is not run; `status` is `refused` and `message` says
 *    why, for the model (`pay_invoice was not run: rejected by bob: over budget`).
 * 2. **Run** the tool with the arguments the gateway answered (a hook may have rewritten them, an
 *    approver edited them).
 * 3. **Report**: a success goes to post-tool-use, whose (possibly rewritten or cut) result is what the
 *    model should see; a failure — an exception, or a value `failure(value)` calls an error — goes to
 *    tool-error, whose action is followed: `retry`, `recover`, `abort`, or `raise`.
 *
 * Fail closed throughout: a gateway that cannot be reached at step 1 means the tool does not run; at
 * step 3 (after a success) it means the result is withheld from the model.
 *
 * A call left pending at the deadline is remembered: the next identical call (same session, tool and
 * arguments) re-asks under the same idempotency key and tool call id, so it picks up a decision given
 * meanwhile instead of posting a second card. If the caller's `signal` aborts while a human is being
 * asked, the request is withdrawn (`cancel`) before the abort goes on.
 */

import { Decision, GatewayClient, type PendingAnswer } from "./client.js";
import { GatewayAPIError, GatewayClientError } from "./errors.js";
import { canonicalJson, type JsonObject, jsonable, randomHex, sha256Hex } from "./json.js";
import { delay } from "./transport.js";

/** Seconds a withdrawal may take when the caller is aborted. */
export const CANCEL_TIMEOUT = 5;
/** Calls left pending that a retry can still pick up, per gate. */
export const MAX_LEFT_PENDING = 1000;

/**
 * How a gated call ended, and what the model should get.
 * - `ran`: the tool ran and the gateway kept its result: give the model `value`.
 * - `replaced`: give the model `result` instead (post-tool-use rewrote or cut it, tool-error recovered,
 *   or the idempotent call had already completed — `skip`).
 * - `refused`: the tool did not run; `message` says why.
 * - `withheld`: the tool ran, but the gateway could not review its result; `message`.
 * - `aborted`: the tool failed and the gateway said to stop (`abort`); `message`.
 * - `failed`: the tool failed and the gateway said `raise` (or could not be told): the framework's own
 *   error handling applies to `error` or to the error `value`.
 */
export type GateStatus = "ran" | "replaced" | "refused" | "withheld" | "aborted" | "failed";

export interface GateResult<V = unknown> {
  status: GateStatus;
  decision: Decision;
  value?: V;
  result?: unknown;
  message: string;
  error?: unknown;
  /** How many times the tool ran (0: it did not). */
  attempts: number;
}

/** The tool failed and the gateway answered tool-error with `abort`: stop the run. Thrown by the adapters. */
export class ToolRunAborted extends GatewayClientError {
  constructor(
    message: string,
    readonly result: GateResult,
  ) {
    super(message);
  }
}

export interface ToolGateOptions {
  /** The default session of the calls (default: one new id per gate). */
  sessionId?: string;
  /** Sent with every ask. */
  userId?: string;
  /** Sent with every ask, under each call's own. */
  metadata?: JsonObject;
  /** Seconds to wait for a human (default: the client's `maxWait`). */
  maxWait?: number;
  /** The prefix of the idempotency keys this gate makes. */
  keyPrefix?: string;
}

export interface GateCall<V> {
  toolName: string;
  toolArgs: JsonObject;
  /** Runs the tool with the arguments the gateway answered. */
  run: (toolArgs: JsonObject) => Promise<V> | V;
  toolCallId?: string;
  sessionId?: string;
  metadata?: JsonObject;
  userId?: string;
  maxWait?: number;
  /** The JSON the gateway gets as the result (default: the value). */
  report?: (value: V) => unknown;
  /** An error message when a returned value means the tool failed (default: never). */
  failure?: (value: V) => string | null | undefined;
  onPending?: (answer: PendingAnswer) => void;
  /** The framework's abort signal: aborting withdraws a request a human is being asked about. */
  signal?: AbortSignal;
}

export class ToolGate {
  readonly client: GatewayClient;
  readonly sessionId: string;
  readonly userId: string | undefined;
  readonly metadata: JsonObject;
  readonly maxWait: number | undefined;
  readonly keyPrefix: string;
  private readonly leftPending = new Map<string, { key: string; callId: string }>();

  constructor(client: GatewayClient, options: ToolGateOptions = {}) {
    this.client = client;
    this.keyPrefix = options.keyPrefix ?? "gate";
    this.sessionId = options.sessionId || `${this.keyPrefix}-${randomHex(16)}`;
    this.userId = options.userId;
    this.metadata = { ...(options.metadata ?? {}) };
    this.maxWait = options.maxWait;
  }

  /** Gate one call: ask, run with the answered arguments, report (see the module comment). */
  async call<V>(call: GateCall<V>): Promise<GateResult<V>> {
    const toolName = call.toolName;
    const toolArgs = jsonable({ ...call.toolArgs }) as JsonObject;
    const sessionId = call.sessionId || this.sessionId;
    const metadata = { ...this.metadata, ...(call.metadata ?? {}) };
    const fingerprint = await sha256Hex(canonicalJson([sessionId, toolName, toolArgs]));
    // A call left pending is asked again as it was first asked: same key, same call id.
    const remembered = this.leftPending.get(fingerprint);
    this.leftPending.delete(fingerprint);
    const key = remembered?.key ?? `${this.keyPrefix}:${fingerprint.slice(0, 32)}:${randomHex(12)}`;
    const callId = remembered?.callId ?? call.toolCallId ?? `call_${randomHex()}`;

    let decision: Decision;
    try {
      decision = await this.ask(call, {
        sessionId,
        toolName,
        toolArgs,
        callId,
        key,
        metadata: Object.keys(metadata).length ? metadata : undefined,
      });
    } catch (error) {
      if (!(error instanceof GatewayAPIError)) throw error;
      // A 4xx (a bad key, bad input) is a bug to fix, but the call must not run meanwhile.
      const refused = denied(toolArgs, `the approval gateway refused the request: ${error.message}`);
      return { status: "refused", decision: refused, message: refusedMessage(toolName, refused), attempts: 0 };
    }
    if (decision.stillPending) {
      this.leftPending.set(fingerprint, { key, callId });
      while (this.leftPending.size > MAX_LEFT_PENDING) this.leftPending.delete(this.leftPending.keys().next().value!);
      let url: string | null = null;
      if (decision.confirmationId) {
        url = await this.client.getConfirmation(decision.confirmationId).then(
          (request) => (request["url"] as string) ?? null,
          () => null,
        );
      }
      return { status: "refused", decision, message: pendingMessage(toolName, decision, url), attempts: 0 };
    }
    if (decision.skipped) return { status: "replaced", decision, result: decision.result, message: "", attempts: 0 };
    if (!decision.allowed) {
      return { status: "refused", decision, message: refusedMessage(toolName, decision), attempts: 0 };
    }
    return this.runAndReport(call, decision, { sessionId, callId });
  }

  private async ask<V>(
    call: GateCall<V>,
    asked: {
      sessionId: string;
      toolName: string;
      toolArgs: JsonObject;
      callId: string;
      key: string;
      metadata?: JsonObject;
    },
  ): Promise<Decision> {
    let confirmationId: string | null = null;
    let named!: () => void;
    const known = new Promise<void>((resolve) => (named = resolve)); // the request is named, or the ask ended
    const stop = new AbortController();
    const asking = this.client.preToolUse(asked.sessionId, asked.toolName, asked.toolArgs, {
      toolCallId: asked.callId,
      userId: call.userId ?? this.userId,
      metadata: asked.metadata,
      idempotencyKey: asked.key,
      maxWait: call.maxWait ?? this.maxWait,
      signal: stop.signal,
      onPending: (answer) => {
        confirmationId = answer.confirmation_id;
        named();
        call.onPending?.(answer);
      },
    });
    asking.then(named, named);
    const signal = call.signal;
    if (!signal) return asking;
    let onAbort!: () => void;
    const aborted = new Promise<never>((_, reject) => {
      onAbort = () => reject(signal.reason);
      if (signal.aborted) onAbort();
      else signal.addEventListener("abort", onAbort, { once: true });
    });
    try {
      return await Promise.race([asking, aborted]);
    } catch (error) {
      if (!signal.aborted) throw error;
      // Aborted while a human is being asked: withdraw the request, so nobody approves a call that is
      // gone. The first ask is let finish (it names the request), for up to CANCEL_TIMEOUT seconds.
      await Promise.race([known, delay(CANCEL_TIMEOUT * 1000)]);
      stop.abort(signal.reason);
      asking.catch(() => undefined);
      if (confirmationId !== null) {
        await this.client.cancel(confirmationId).catch(() => undefined); // e.g. decided just before: AlreadyDecided
      }
      throw error;
    } finally {
      signal.removeEventListener("abort", onAbort);
    }
  }

  private async runAndReport<V>(
    call: GateCall<V>,
    decision: Decision,
    ids: { sessionId: string; callId: string },
  ): Promise<GateResult<V>> {
    const toolName = call.toolName;
    const toolArgs = decision.toolArgs;
    const report = call.report ?? ((value: V) => value);
    const started = Date.now();
    for (let attempt = 1; ; attempt += 1) {
      const began = Date.now();
      let value: V | undefined;
      let raised: unknown = undefined;
      let threw = false;
      try {
        value = await call.run(toolArgs);
      } catch (error) {
        threw = true;
        raised = error;
      }
      const problem = threw ? errorText(raised) : (call.failure?.(value as V) ?? null);
      if (problem === null) {
        const reported = jsonable(report(value as V));
        let answer: JsonObject;
        try {
          answer = await this.client.postToolUse(ids.sessionId, ids.callId, {
            toolName,
            // what ran (an approver may have edited the arguments): the audit's third record
            toolArgs: jsonable(toolArgs) as JsonObject,
            result: reported,
            durationMs: Date.now() - began,
          });
        } catch (error) {
          if (!(error instanceof GatewayClientError)) throw error;
          return { status: "withheld", decision, value, message: withheldMessage(toolName, error), attempts: attempt };
        }
        const result = "result" in answer ? answer["result"] : reported;
        if (canonicalJson(result) === canonicalJson(reported)) {
          return { status: "ran", decision, value, message: "", attempts: attempt };
        }
        return { status: "replaced", decision, value, result, message: "", attempts: attempt };
      }

      let answer: JsonObject;
      try {
        answer = await this.client.toolError(ids.sessionId, ids.callId, problem.slice(0, 10000), {
          attempt,
          elapsedSeconds: Math.round(Date.now() - started) / 1000,
          toolName,
        });
      } catch (error) {
        if (!(error instanceof GatewayClientError)) throw error;
        return { status: "failed", decision, value, error: raised, message: "", attempts: attempt };
      }
      const action = answer["action"];
      if (action === "retry") {
        await delay(Number(answer["delay_seconds"] ?? 0) * 1000, call.signal);
        continue;
      }
      if (action === "recover") {
        return { status: "replaced", decision, value, result: answer["result"], message: "", attempts: attempt };
      }
      if (action === "abort") {
        const reason = (answer["reason"] as string) || "the gateway stopped it";
        const message = `${toolName} failed and the gateway stopped the run: ${reason}`;
        return { status: "aborted", decision, value, message, error: raised, attempts: attempt };
      }
      return { status: "failed", decision, value, error: raised, message: "", attempts: attempt };
    }
  }
}

function denied(toolArgs: JsonObject, reason: string): Decision {
  return new Decision({ decision: "deny", toolArgs, reason });
}

function errorText(error: unknown): string {
  if (error instanceof Error) return error.message ? `${error.name}: ${error.message}` : error.name;
  return String(error);
}

// --------------------------------------------------------------------------- what the model reads

/** Deny, reject or an unreachable gateway: `pay_invoice was not run: rejected by bob: over budget`. */
export function refusedMessage(toolName: string, decision: Decision): string {
  return `${toolName} was not run: ${decision.reason || "denied by the approval gateway"}`;
}

export function pendingMessage(toolName: string, decision: Decision, url: string | null = null): string {
  const where = url ? ` at ${url}` : "";
  return (
    `${toolName} was not run: approval is still pending in the gateway ` +
    `(request ${decision.confirmationId}${where}). Call ${toolName} again later with the same ` +
    "arguments: an approval given meanwhile will be honoured."
  );
}

export function withheldMessage(toolName: string, error: Error): string {
  return (
    `${toolName} ran, but its result is withheld: the approval gateway could not review it (${error.message}). ` +
    "Do not assume it failed."
  );
}
