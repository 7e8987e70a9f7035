/** The `event_summaries` entry of a stored event, shared by the list routes, SSE and manual runs. */
import { Type } from "typebox";
import type { EventRecord } from "../domain/types.ts";

/** Event data over this many bytes of JSON is summarised unless `expand=event`. */
export const truncateAboveBytes = 1024;

export const eventEntrySchema = Type.Object(
  {
    id: Type.String(),
    indexed_at_ms: Type.Integer(),
    event: Type.Unknown(),
    metadata: Type.Object({}, { additionalProperties: true }),
  },
  { description: "Event summary" },
);

/** The `event_summaries` entry of an event; large data is replaced by a preview unless expanded. */
export function renderEvent(e: EventRecord, expand: boolean): Record<string, unknown> {
  let event = e.event;
  if (!expand) {
    const json = JSON.stringify(event) ?? "null";
    const size = Buffer.byteLength(json);
    if (size > truncateAboveBytes)
      event = { $truncated: true, size, preview: json.slice(0, truncateAboveBytes) };
  }
  return { id: e.id, indexed_at_ms: e.indexedAtMs, event, metadata: e.meta };
}
