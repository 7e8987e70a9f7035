/**
 * The event search on a source's page (docs/streams.md, "Searching events"): a form of filters above the
 * events list (words, JSON path conditions, a time range, a delivery outcome), results that page back
 * with the API's cursors and open like the live list's, and a replay of every matching event to a
 * chosen listener, counted and confirmed first.
 */
import { useLayoutEffect, useRef, useState } from "preact/hooks";
import { api } from "./api.ts";
import { useListeners } from "./event-deliveries.tsx";
import { type EventEntry, EventList } from "./stream.tsx";
import { ErrorNote, SelectField, TextField, useLoad } from "./ui.tsx";

/** The filters as the form holds them (empty: not given). */
export interface SearchFilters {
  q: string;
  /** One `<path>:<value>` a line. */
  where: string;
  /** datetime-local values, in the browser's time zone. */
  since: string;
  until: string;
  status: string;
}

export const noFilters: SearchFilters = { q: "", where: "", since: "", until: "", status: "" };

const pageSize = 20;

/** Whether any filter is set. */
export function filtering(f: SearchFilters): boolean {
  return Object.values(f).some((v) => v.trim() !== "");
}

/** The API's search parameters of the filters (`where` a list, times as ISO 8601). */
function searchParams(f: SearchFilters): Record<string, string | string[]> {
  const p: Record<string, string | string[]> = {};
  if (f.q.trim()) p.q = f.q.trim();
  const where = f.where
    .split("\n")
    .map((l) => l.trim())
    .filter(Boolean);
  if (where.length > 0) p.where = where;
  const iso = (local: string) => new Date(local).toISOString();
  if (f.since) p.since = iso(f.since);
  if (f.until) p.until = iso(f.until);
  if (f.status) p.delivery_status = f.status;
  return p;
}

function queryString(params: Record<string, string | string[] | undefined>): string {
  const q = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (Array.isArray(value)) for (const v of value) q.append(key, v);
    else if (value !== undefined && value !== "") q.set(key, value);
  }
  return q.toString();
}

export function SearchForm({
  initial,
  onSearch,
}: {
  initial: SearchFilters;
  onSearch: (filters: SearchFilters) => void;
}) {
  const [f, setF] = useState(initial);
  const set = (key: keyof SearchFilters) => (value: string) => setF((old) => ({ ...old, [key]: value }));
  return (
    <form
      class="form inline search"
      aria-label="Search events"
      onSubmit={(e) => {
        e.preventDefault();
        onSearch(f);
      }}
    >
      <TextField
        id="search-q"
        label="Search"
        value={f.q}
        onValue={set("q")}
        placeholder='words anywhere in the event, "…" for a phrase'
      />
      <div class="field">
        <label for="search-where">Where (one path:value a line)</label>
        <textarea
          id="search-where"
          rows={2}
          value={f.where}
          placeholder={"body.user.id:42\nheaders.x-github-event:push"}
          onInput={(e) => set("where")(e.currentTarget.value)}
        />
      </div>
      <div class="pair">
        <TextField
          id="search-since"
          label="Since"
          type="datetime-local"
          value={f.since}
          onValue={set("since")}
        />
        <TextField
          id="search-until"
          label="Until"
          type="datetime-local"
          value={f.until}
          onValue={set("until")}
        />
        <div class="field">
          <label for="search-status">Delivery</label>
          <select id="search-status" value={f.status} onChange={(e) => set("status")(e.currentTarget.value)}>
            <option value="">any</option>
            <option value="failed">failed</option>
            <option value="pending">pending</option>
            <option value="succeeded">succeeded</option>
          </select>
        </div>
      </div>
      <div class="actions">
        <button type="submit">Search</button>{" "}
        <button
          type="button"
          onClick={() => {
            setF(noFilters);
            onSearch(noFilters);
          }}
        >
          Clear
        </button>
      </div>
    </form>
  );
}

interface SearchPage {
  page_info: { total_count: number; end_cursor: string | null };
  data: EventEntry[];
  /** Which page this is (1 the newest), kept with the answer so that the text and the list agree. */
  number: number;
}

export function SearchResults({
  sourceId,
  channel,
  filters,
}: {
  sourceId: string;
  channel: string;
  filters: SearchFilters;
}) {
  // The `after` cursor of each page shown so far: Newer goes back one, Older adds the end cursor.
  const [cursors, setCursors] = useState<string[]>([]);
  const after = cursors.at(-1);
  const wanted = cursors.length + 1;
  const params = searchParams(filters);
  const page = useLoad(
    () =>
      api<Omit<SearchPage, "number">>(
        "GET",
        `/v1/sources/${sourceId}/event_summaries?${queryString({
          ...params,
          event_name: channel || undefined,
          limit: String(pageSize),
          expand: "event",
          after,
        })}`,
      ).then((answer): SearchPage => ({ ...answer, number: wanted })),
    [sourceId, channel, JSON.stringify(params), after],
  );
  const total = page.value?.page_info.total_count;
  const end = page.value?.page_info.end_cursor ?? null;
  // Until the wanted page has come, the one shown stays named as what it is, and paging waits.
  const loading = page.value?.number !== wanted;
  return (
    <div class="channel">
      <p class="muted" aria-live="polite">
        {total === undefined
          ? "Searching…"
          : `${total} matching event${total === 1 ? "" : "s"} · page ${page.value?.number}`}
      </p>
      <ErrorNote error={page.error} />
      {page.value && (
        <EventList sourceId={sourceId} channel={channel} label="Matching events" events={page.value.data} />
      )}
      <nav class="actions" aria-label="Pages of matching events">
        <button
          type="button"
          disabled={loading || cursors.length === 0}
          onClick={() => setCursors((c) => c.slice(0, -1))}
        >
          Newer
        </button>{" "}
        <button
          type="button"
          disabled={loading || end === null}
          onClick={() => end && setCursors((c) => [...c, end])}
        >
          Older
        </button>
      </nav>
      {total !== undefined && total > 0 && (
        <ReplaySearch sourceId={sourceId} channel={channel} params={params} />
      )}
    </div>
  );
}

/** Replays every event the search finds to a chosen listener, after showing how many and asking. */
function ReplaySearch({
  sourceId,
  channel,
  params,
}: {
  sourceId: string;
  channel: string;
  params: Record<string, string | string[]>;
}) {
  const listeners = useListeners();
  const [target, setTarget] = useState("");
  const [asking, setAsking] = useState<number | undefined>();
  const [done, setDone] = useState<string>();
  const [error, setError] = useState<unknown>();
  const [busy, setBusy] = useState(false);
  const cancelRef = useRef<HTMLButtonElement>(null);
  useLayoutEffect(() => {
    if (asking !== undefined) cancelRef.current?.focus();
  }, [asking]);
  const body = { ...params, event_name: channel || undefined, listener_id: target };
  const path = `/v1/sources/${sourceId}/events/replay`;
  async function run(step: () => Promise<void>) {
    setBusy(true);
    setError(undefined);
    try {
      await step();
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  }
  const count = () =>
    run(async () => {
      const r = await api<{ data: { matching: number } }>("POST", path, { ...body, dry_run: true });
      setAsking(r.data.matching);
    });
  const send = () =>
    run(async () => {
      const r = await api<{ data: { replayed: number; replay_id: string | null } }>("POST", path, body);
      setAsking(undefined);
      setDone(
        `Replayed ${r.data.replayed} event${r.data.replayed === 1 ? "" : "s"} (replay ${r.data.replay_id}).`,
      );
    });
  const chosen = listeners.value?.find(([id]) => id === target)?.[1] ?? target;
  if (!listeners.value) return <ErrorNote error={listeners.error} />;
  return (
    <form
      class="form inline"
      aria-label="Replay the matching events"
      onSubmit={(e) => {
        e.preventDefault();
        if (target) void count();
      }}
    >
      <SelectField
        id="replay-search-to"
        label="Replay every matching event to"
        prompt="Choose a webhook or source"
        options={listeners.value}
        value={target}
        onValue={(v) => {
          setTarget(v);
          setAsking(undefined);
        }}
      />
      {asking !== undefined ? (
        <fieldset class="confirm">
          <legend class="visually-hidden">Confirm the replay</legend>
          Send {asking} event{asking === 1 ? "" : "s"} again to {chosen}, as new deliveries?{" "}
          <button type="button" onClick={send} disabled={busy || asking === 0}>
            Yes, replay {asking}
          </button>{" "}
          <button type="button" ref={cancelRef} onClick={() => setAsking(undefined)}>
            Cancel
          </button>
        </fieldset>
      ) : (
        <div class="actions">
          <button type="submit" disabled={busy}>
            Replay matching…
          </button>
        </div>
      )}
      <p aria-live="polite" class="note">
        {done}
      </p>
      <ErrorNote error={error} />
    </form>
  );
}
