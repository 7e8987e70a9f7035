/**
 * A live channel of a source: the stored events first, then the SSE stream from the newest one on.
 * EventSource reconnects by itself and sends Last-Event-ID, so a dropped connection resumes where it
 * stopped; events are deduplicated by ID. Arrivals are applied once per animation frame and the list
 * keeps the newest `keep`, so a stream of 100 events/s stays responsive.
 */
import { useEffect, useRef, useState } from "preact/hooks";
import { api, formatTime } from "./api.ts";
import { eventHref } from "./deliveries-api.ts";
import { EventDeliveries } from "./event-deliveries.tsx";
import { CopyButton, ErrorNote, JsonTree } from "./ui.tsx";

/** An `event_summaries` entry. */
export interface EventEntry {
  id: string;
  indexed_at_ms: number;
  event: unknown;
  metadata: Record<string, unknown>;
}

const keep = 200;
const shown = 50;

export function useChannel(sourceId: string, channel: string) {
  const [events, setEvents] = useState<EventEntry[]>([]);
  const [error, setError] = useState<unknown>();
  const [live, setLive] = useState(false);
  useEffect(() => {
    let closed = false;
    let source: EventSource | undefined;
    const pending: EventEntry[] = [];
    let frame = 0;
    const seen = new Set<string>();
    const flush = () => {
      frame = 0;
      const batch = pending.splice(0).reverse();
      setEvents((old) => [...batch, ...old].slice(0, keep));
    };
    const q = channel ? `event_name=${encodeURIComponent(channel)}` : "";
    api<{ data: EventEntry[] }>(
      "GET",
      `/v1/sources/${sourceId}/event_summaries?limit=${shown}&expand=event${q ? `&${q}` : ""}`,
    )
      .then((r) => {
        if (closed) return;
        for (const e of r.data) seen.add(e.id);
        setEvents(r.data);
        const newest = r.data[0]?.id;
        const params = [q, newest ? `last_event_id=${encodeURIComponent(newest)}` : ""]
          .filter(Boolean)
          .join("&");
        source = new EventSource(`/sources/${sourceId}/sse${params ? `?${params}` : ""}`);
        source.onopen = () => setLive(true);
        source.onerror = () => setLive(false);
        source.onmessage = (m) => {
          const entry = JSON.parse(m.data) as EventEntry;
          if (seen.has(entry.id)) return;
          seen.add(entry.id);
          pending.push(entry);
          if (!frame) frame = requestAnimationFrame(flush);
        };
      })
      .catch((e) => setError(e));
    return () => {
      closed = true;
      source?.close();
      if (frame) cancelAnimationFrame(frame);
    };
  }, [sourceId, channel]);
  return { events, error, live };
}

export function summaryOf(e: EventEntry, channel: string): string {
  const event = e.event as any;
  if (channel === "$errors") return `${event?.error?.name ?? "Error"}: ${event?.error?.message ?? ""}`;
  if (channel === "$logs") return `[${event?.level ?? "log"}] ${event?.message ?? ""}`;
  const summary = e.metadata.summary;
  if (typeof summary === "string" && summary) return summary;
  const json = JSON.stringify(e.event) ?? "";
  return json.length > 80 ? `${json.slice(0, 80)}…` : json;
}

/**
 * A list of events that open on the side when chosen (the live channel's and the search's): each entry a
 * button with its time and summary, the chosen one's data, metadata and deliveries beside the list.
 */
export function EventList({
  sourceId,
  channel,
  label,
  events,
}: {
  sourceId: string;
  channel: string;
  label: string;
  events: EventEntry[];
}) {
  const [selected, setSelected] = useState<string | undefined>();
  const detail = useRef<HTMLElement>(null);
  const chosen = events.find((e) => e.id === selected);
  useEffect(() => {
    if (chosen) detail.current?.focus();
  }, [chosen?.id]);
  return (
    <div class="split">
      <ol class="events" aria-label={label}>
        {events.map((e) => (
          <li key={e.id}>
            <button
              type="button"
              class={e.id === selected ? "event selected" : "event"}
              aria-pressed={e.id === selected}
              onClick={() => setSelected(e.id)}
            >
              <span class="time">{formatTime(e.indexed_at_ms, "ms")}</span>{" "}
              <span class="summary">{summaryOf(e, channel)}</span>
            </button>
          </li>
        ))}
      </ol>
      {chosen && (
        <section class="detail" aria-label="Event detail" tabIndex={-1} ref={detail}>
          <h3>Event {chosen.id}</h3>
          {channel === "$errors" ? <ErrorDetail entry={chosen} /> : null}
          <CopyButton text={JSON.stringify(chosen.event, null, 2)} label="Copy JSON" />
          <h4>Data</h4>
          <div class="json">
            <JsonTree value={chosen.event} />
          </div>
          <h4>Metadata</h4>
          <div class="json">
            <JsonTree value={chosen.metadata} />
          </div>
          {channel !== "$in" && (
            <>
              <p>
                <a href={eventHref(sourceId, chosen.id)}>Open event {chosen.id}</a>
              </p>
              <EventDeliveries key={chosen.id} sourceId={sourceId} eventId={chosen.id} />
            </>
          )}
        </section>
      )}
    </div>
  );
}

export function ChannelView({
  sourceId,
  channel,
  label,
}: {
  sourceId: string;
  channel: string;
  label: string;
}) {
  const { events, error, live } = useChannel(sourceId, channel);
  return (
    <div class="channel">
      <p class="muted" aria-live="polite">
        {live ? "Live" : "Connecting…"} · {events.length} shown
      </p>
      <ErrorNote error={error} />
      <EventList sourceId={sourceId} channel={channel} label={label} events={events.slice(0, shown)} />
    </div>
  );
}

function ErrorDetail({ entry }: { entry: EventEntry }) {
  const e = entry.event as any;
  return (
    <>
      <p>
        <strong>{e?.error?.name ?? "Error"}</strong>: {e?.error?.message}
      </p>
      {e?.error?.stack && <pre class="stack">{e.error.stack}</pre>}
      <h4>Caused by</h4>
      <div class="json">
        <JsonTree value={e?.original_event ?? null} />
      </div>
    </>
  );
}
