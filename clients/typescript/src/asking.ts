/**
 * `ask_human`: a tool any agent framework can offer its model, to ask a person and get the answer
 * (docs/asking.md) — what the model sees and sends, written once for the adapters, as the Python
 * `gateway_client.asking`. With no schema fixed by the developer, the model gives a `question` and,
 * optionally, `choices` (one of them is the answer; several with `several: true`); without choices the
 * answer is free text. A developer may fix the answer's schema instead (a form: `answerSchema`), and the
 * model gives only the question. The tool's output is the answer as JSON text, or a sentence saying why
 * there is none.
 */

import { type Answer, type AskOptions, GatewayClient } from "./client.js";
import type { JsonObject } from "./json.js";

export const ASK_HUMAN = "ask_human";
const FREE_TEXT_LIMIT = 2000;
const DESCRIPTION =
  "Ask a human a question and wait for their answer. Use it when you need a decision, a fact or a " +
  "preference only a person can give. Give `choices` when the answer is one of a few options (or several " +
  "of them, with `several: true`); leave them out for a free-text answer.";

/** Where a question goes and how long to wait (as `GatewayClient.ask`'s options). */
export type AskHumanOptions = Omit<AskOptions, "sessionId" | "signal" | "callbackUrl"> & {
  /** Fix the answer's shape (e.g. a form); the model then gives only the question. */
  answerSchema?: JsonObject;
};

/** The tool's parameters as a JSON Schema (strict: every key required, nullable where optional). */
export function paramsSchema(answerSchema?: JsonObject): JsonObject {
  const properties: JsonObject = { question: { type: "string", description: "What to ask, in plain words." } };
  if (answerSchema === undefined) {
    properties["choices"] = {
      type: ["array", "null"],
      items: { type: "string" },
      description: "The options to choose from; null for a free-text answer.",
    };
    properties["several"] = { type: ["boolean", "null"], description: "true: several choices may be picked." };
  }
  return { type: "object", properties, required: Object.keys(properties), additionalProperties: false };
}

/** The tool's description: the free one, or the fields of a fixed schema. */
export function describe(answerSchema?: JsonObject): string {
  if (answerSchema === undefined) return DESCRIPTION;
  const fields =
    answerSchema["type"] === "object"
      ? Object.keys((answerSchema["properties"] as JsonObject) ?? {}).join(", ")
      : (answerSchema["title"] as string) || "one answer";
  return `Ask a human and wait for their answer, given in a form: ${fields}. Say what you need in \`question\`.`;
}

/** The answer schema of one call: the fixed one, or what the model's `choices` / `several` say. */
export function schemaFor(args: JsonObject, fixed?: JsonObject): JsonObject {
  if (fixed !== undefined) return fixed;
  const given = Array.isArray(args["choices"]) ? args["choices"] : [];
  const choices = [...new Set(given.map(String).filter(Boolean))];
  if (choices.length === 0) return { type: "string", maxLength: FREE_TEXT_LIMIT, minLength: 1 };
  if (args["several"]) return { type: "array", items: { type: "string", enum: choices }, uniqueItems: true, minItems: 1 };
  return { type: "string", enum: choices };
}

/** What the model is told: the answer as JSON, or why there is none (never an invented answer). */
export function outputForModel(answer: Answer): string {
  if (answer.answered) {
    const value = JSON.stringify(answer.value);
    if (answer.defaulted) return `${value} (nobody answered in time; this is the default answer)`;
    const who = answer.answeredByName || answer.answeredBy;
    return who ? `${value} (answered by ${who})` : value;
  }
  return `No answer: ${answer.reason || answer.status}`;
}

/** One configured `ask_human` tool: where questions go and how long to wait; the adapters call it. */
export class HumanAsker {
  readonly answerSchema: JsonObject | undefined;
  private readonly options: Omit<AskHumanOptions, "answerSchema">;

  constructor(
    readonly client: GatewayClient,
    options: AskHumanOptions = {},
  ) {
    const { answerSchema, ...where } = options;
    this.answerSchema = answerSchema;
    this.options = where;
  }

  /** Ask with the model's arguments; the tool's output. */
  async ask(args: unknown, context: { sessionId?: string; signal?: AbortSignal } = {}): Promise<string> {
    const given = (typeof args === "object" && args !== null ? args : {}) as JsonObject;
    const question = String(given["question"] ?? "").trim();
    if (!question) return "No answer: ask_human needs a question";
    const answer = await this.client.askQuestion(question, schemaFor(given, this.answerSchema), {
      ...this.options,
      sessionId: context.sessionId,
      signal: context.signal,
    });
    return outputForModel(answer);
  }
}
