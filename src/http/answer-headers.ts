/**
 * Whether a component's answer can go out as it wrote it: Node refuses, as it writes the head, a header
 * name that is not a token and a value holding a line break, a NUL or a character past Latin-1. Checked
 * before the answer is handed to a socket (here, or on the node a hit was forwarded from), where the
 * refusal used to leave the request unanswered for ever.
 */
import { validateHeaderName, validateHeaderValue } from "node:http";
import { AppError } from "../errors.ts";

/**
 * The error answered in place of an answer with a header that cannot be sent (500 `component_error`,
 * naming the first such header; the source ran), or undefined when every one can.
 */
export function unsendableAnswer(headers: Record<string, string | string[]>): AppError | undefined {
  for (const [name, value] of Object.entries(headers)) {
    try {
      validateHeaderName(name);
      for (const v of Array.isArray(value) ? value : [value]) validateHeaderValue(name, v);
    } catch {
      return new AppError(
        "component_error",
        `The source ran, but its answer's header ${JSON.stringify(name.slice(0, 128))} cannot be sent: ` +
          "a header name is a token, and a value holds no line break, NUL or character past Latin-1",
        { details: { reason: "invalid_answer_header" } },
      );
    }
  }
  return undefined;
}
