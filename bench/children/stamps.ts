/** Reads the millisecond stamps (`emitted_at`, `sent_at`) that bench events carry, without parsing the JSON. */
export function numberAfter(text: string, key: string): number | undefined {
  const at = text.indexOf(`"${key}":`);
  if (at < 0) return undefined;
  const value = Number.parseInt(text.slice(at + key.length + 3, at + key.length + 20), 10);
  return Number.isFinite(value) ? value : undefined;
}
