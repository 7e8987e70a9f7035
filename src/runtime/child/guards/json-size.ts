/**
 * How large a value is as JSON, measured without serializing it: a run's emits and what is stored are
 * measured so on the server, and a component's definition in the executor too. A definition is computed
 * when it loads, so a few bytes of code can describe a prop in 60 MB: the executor's runner refuses
 * such an answer before it is sent to the server, which checks it again (the runner shares its process
 * with the owner's code). Lives in `child/` because the executor's code, bundled from this folder
 * alone, uses it too.
 */

/** Largest definition (a component's meta as JSON: props, their labels and options, methods' names). */
export const maxDefinitionBytes = 1024 * 1024;

/**
 * The length of `value` as JSON text, walked without serializing it: its strings and keys with their
 * quotes (their UTF-16 length, or with `utf8` their UTF-8 bytes; escapes not counted), numbers and
 * literals as JSON writes them, and its brackets, braces, colons and commas. Exact for ASCII text without
 * escapes, and never over the text's bytes, for `value`s a message or a JSON text carried (plain data):
 * by length up to 6× under them (an escaped control character), 3× for characters outside ASCII. The
 * server measures a run's emits and the stored bytes so, where JSON.stringify costs about 4.6 ms per MiB
 * on its thread (docs/isolation.md). Iterative, as a message from a compromised child may nest deeper
 * than the stack, and stops once past `stopAbove` (answering a length over it), so that a walk's cost
 * is bounded by it however large the value.
 */
export function jsonLength(value: unknown, stopAbove = Number.POSITIVE_INFINITY, utf8 = false): number {
  let n = 0;
  const stack: unknown[] = [value];
  while (stack.length > 0 && n <= stopAbove) {
    const v = stack.pop();
    if (typeof v === "string") n += (utf8 ? Buffer.byteLength(v) : v.length) + 2;
    else if (Array.isArray(v)) {
      // Its brackets and the commas between its items.
      n += Math.max(2, 1 + v.length);
      if (n > stopAbove) return n;
      for (const item of v) stack.push(item);
    } else if (v !== null && typeof v === "object") {
      // Its braces, each key quoted with its colon, and the commas between them.
      let keys = 0;
      // Plain data: for…in sees its own keys, without Object.entries' arrays.
      const obj = v as Record<string, unknown>;
      for (const key in obj) {
        n += (utf8 ? Buffer.byteLength(key) : key.length) + 4;
        if (n > stopAbove) return n;
        keys++;
        stack.push(obj[key]);
      }
      n += keys === 0 ? 2 : 1;
    } else if (typeof v === "number") n += Number.isFinite(v) ? String(v).length : 4;
    else if (typeof v === "bigint") n += String(v).length;
    else if (v === false) n += 5;
    else n += 4; // true, null (and, in an array, undefined, which JSON writes as null)
  }
  return n;
}

/** Whether `value` as JSON takes more than `limit` UTF-8 bytes (escapes aside): a walk that stops at it. */
export const jsonBytesOver = (value: unknown, limit: number): boolean =>
  jsonLength(value, limit, true) > limit;

/** The message refusing a definition over `maxDefinitionBytes` (422 `component_invalid` at the API). */
export function definitionTooLargeMessage(): string {
  return `The component's definition (its props with their labels, descriptions and options, as JSON) takes over ${maxDefinitionBytes} bytes, the most a component may have`;
}

/** The runner's answer to an inspection whose answer was over `maxDefinitionBytes`. */
export function definitionTooLarge(q: number): {
  t: "inspected";
  q: number;
  error: { code: string; message: string; data: Record<string, unknown> };
} {
  const error = { code: "component_invalid", message: definitionTooLargeMessage() };
  return { t: "inspected", q, error: { ...error, data: { limit_bytes: maxDefinitionBytes } } };
}
