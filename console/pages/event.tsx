/** One stored event of a source: its data and metadata, its deliveries, and replay (a delivery links here). */
import { api, formatTime } from "../api.ts";
import { EventDeliveries } from "../event-deliveries.tsx";
import type { EventEntry } from "../stream.tsx";
import { CopyButton, ErrorNote, JsonTree, Title, useLoad } from "../ui.tsx";

export function EventPage({ sourceId, eventId }: { sourceId: string; eventId: string }) {
  const event = useLoad(
    () => api<{ data: EventEntry }>("GET", `/v1/sources/${sourceId}/events/${eventId}`),
    [sourceId, eventId],
  );
  const e = event.value?.data;
  return (
    <>
      <Title text={`Event ${eventId}`} />
      <p>
        Of source <a href={`#/sources/${sourceId}`}>{sourceId}</a>
        {e && <> · stored {formatTime(e.indexed_at_ms, "ms")}</>}
      </p>
      {/* The source may no longer keep it; its deliveries keep their own copy. */}
      <ErrorNote error={event.error} />
      {e && (
        <>
          <CopyButton text={JSON.stringify(e.event, null, 2)} label="Copy JSON" />
          <h2>Data</h2>
          <div class="json">
            <JsonTree value={e.event} />
          </div>
          <h2>Metadata</h2>
          <div class="json">
            <JsonTree value={e.metadata} />
          </div>
        </>
      )}
      <EventDeliveries sourceId={sourceId} eventId={eventId} />
    </>
  );
}
