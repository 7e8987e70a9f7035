/**
 * How large a value is as JSON, measured without serializing it. A component's definition is computed
 * when it loads, so a few bytes of code can describe a prop in 60 MB: the executor's runner refuses
 * such an answer before it is sent to the server, which checks it again (the runner shares its process
 * with the owner's code). Lives in `child/` because the executor's code, bundled from this folder
 * alone, uses it too.
 */

/** Largest definition (a component's meta as JSON: props, their labels and options, methods' names). */
export const maxDefinitionBytes = 1024 * 1024;

/**
 * Whether `value` as JSON text takes more than `limit` bytes: a walk without recursion that stops once
 * past it, so its cost is bounded by `limit` however large the value. Strings count their UTF-8 bytes
 * and quotes but not their escapes: a value under the bound may still serialize a little larger.
 */
export function jsonBytesOver(value: unknown, limit: number): boolean {
  let bytes = 0;
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v === "string") bytes += Buffer.byteLength(v) + 2;
    else if (typeof v === "number" || typeof v === "bigint") bytes += String(v).length;
    else if (typeof v === "boolean") bytes += 5;
    else if (v === null) bytes += 4;
    else if (Array.isArray(v)) {
      bytes += 1 + v.length;
      if (bytes > limit) return true;
      for (const item of v) stack.push(item);
    } else if (typeof v === "object") {
      bytes += 1;
      for (const key in v) {
        if (!Object.hasOwn(v, key)) continue;
        bytes += Buffer.byteLength(key) + 4;
        if (bytes > limit) return true;
        stack.push((v as Record<string, unknown>)[key]);
      }
    }
    if (bytes > limit) return true;
  }
  return false;
}

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
