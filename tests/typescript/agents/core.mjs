// The core client as an agent's own code uses it: one operation per run, named in argv[2] (JSON:
// {"op", "url", "key", "options", ...}); prints one JSON line with what it resolved to (or the error it
// rejected with: its class, code and message).
import {
  Decision,
  GatewayAPIError,
  GatewayClient,
  NoAnswer,
  USER_AGENT,
  VERSION,
} from "@approval-gateway/client";

const request = JSON.parse(process.argv[2]);
const client = new GatewayClient(request.url, request.key, request.client ?? {});

function decision(d) {
  return {
    decision: d.decision,
    allowed: d.allowed,
    denied: d.denied,
    skipped: d.skipped,
    tool_args: d.toolArgs,
    reason: d.reason,
    confirmation_id: d.confirmationId,
    result: d.result,
    idempotency_key: d.idempotencyKey,
    still_pending: d.stillPending,
    unreachable: d.unreachable,
    is_decision: d instanceof Decision,
  };
}

function failure(error) {
  return {
    error: error.name,
    message: error.message,
    ...(error instanceof GatewayAPIError ? { status: error.statusCode, code: error.code, details: error.details } : {}),
    ...(error instanceof NoAnswer ? { status_of_answer: error.answer.status } : {}),
  };
}

const ops = {
  version: async () => ({ version: VERSION, user_agent: USER_AGENT }),
  pre_tool_use: async () =>
    decision(await client.preToolUse(request.session, request.tool, request.args, request.options ?? {})),
  // Ask, and on pending, ask again with the same idempotency key (a retry that picks up a later decision).
  pre_tool_use_twice: async () => {
    const first = await client.preToolUse(request.session, request.tool, request.args, request.options ?? {});
    console.log(JSON.stringify({ first: decision(first) }));
    await new Promise((resolve) => process.stdin.once("data", resolve)); // the test says when to ask again
    process.stdin.pause(); // and lets the program end
    const again = await client.preToolUse(request.session, request.tool, request.args, {
      ...(request.again ?? {}),
      idempotencyKey: first.idempotencyKey,
    });
    return { again: decision(again) };
  },
  ask: async () => ({ answer: await client.ask(request.question, request.schema, request.options ?? {}) }),
  ask_question: async () => {
    const answer = await client.askQuestion(request.question, request.schema, request.options ?? {});
    return { ...answer, answered: answer.answered };
  },
  // The allowed call, run, then reported: what an agent loop does without an adapter.
  run_and_report: async () => {
    const d = await client.preToolUse(request.session, request.tool, request.args, { toolCallId: request.call_id });
    const reported = await client.postToolUse(request.session, request.call_id, {
      toolName: request.tool,
      toolArgs: d.toolArgs,
      result: request.result,
      durationMs: 12,
    });
    return { decision: decision(d), reported };
  },
  events: async () => ({
    session_start: await client.sessionStart(request.session, { userId: "u-1" }),
    pre_turn: await client.preTurn(request.session, { turnId: "t-1" }),
    post_turn: await client.postTurn(request.session, { turnId: "t-1" }),
    session_end: await client.sessionEnd(request.session),
  }),
  get_confirmation: async () => ({ confirmation: await client.getConfirmation(request.id) }),
  wait: async () => ({ confirmation: await client.wait(request.id, request.timeout) }),
  cancel: async () => ({ confirmation: await client.cancel(request.id) }),
};

try {
  console.log(JSON.stringify(await ops[request.op]()));
} catch (error) {
  console.log(JSON.stringify(failure(error)));
}
