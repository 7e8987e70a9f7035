/**
 * The JSON text of an event's data and metadata, made once per value: one delivered event was written
 * with `JSON.stringify` to its own row, again to its delivery's row and again as the webhook's body
 * (issue 29), and a delivery read back from its row parsed its text only to make it again for the body.
 * The text is kept per object, so a value must not change once it has been stored or read back: nothing
 * changes event data after its emit (a listener source gets a copy through its executor).
 */
const texts = new WeakMap<object, string>();

/** `JSON.stringify(value ?? null)`, made once per object value. */
export function jsonText(value: unknown): string {
  if (value === null || typeof value !== "object") return JSON.stringify(value ?? null);
  let text = texts.get(value);
  if (text === undefined) {
    text = JSON.stringify(value);
    texts.set(value, text);
  }
  return text;
}

/** `JSON.parse(text)`, whose result `jsonText` then gives as `text` without making it again. */
export function parsedJson(text: string): unknown {
  const value: unknown = JSON.parse(text);
  if (value !== null && typeof value === "object") texts.set(value, text);
  return value;
}
