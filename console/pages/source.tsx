/** A source: endpoint, configuration (edit props, retention, pause, resume, run, delete) and its channels in tabs. */
import { useLayoutEffect, useRef, useState } from "preact/hooks";
import { ApiError, api, formatTime } from "../api.ts";
import { filtering, noFilters, type SearchFilters, SearchForm, SearchResults } from "../event-search.tsx";
import { type PropSpec, PropsForm, type Values } from "../props-form.tsx";
import { type Retention, RetentionForm } from "../retention-form.tsx";
import { navigate } from "../router.ts";
import { ChannelView } from "../stream.tsx";
import { CopyButton, ErrorNote, Title, useLoad } from "../ui.tsx";

interface Source {
  id: string;
  name: string;
  component_id: string;
  component_key: string | null;
  configured_props: Values;
  active: boolean;
  created_at: number;
  endpoint_url?: string;
  retention: Retention;
}

const tabs: Array<[string, string]> = [
  ["events", "Events"],
  ["logs", "Logs"],
  ["errors", "Errors"],
  ["configuration", "Configuration"],
];

export function SourcePage({ id }: { id: string }) {
  const {
    value: source,
    error,
    reload,
  } = useLoad(() => api<{ data: Source }>("GET", `/v1/sources/${id}`), [id]);
  const [tab, setTab] = useState("events");
  const [channel, setChannel] = useState("");
  const [filters, setFilters] = useState<SearchFilters>(noFilters);
  const [note, setNote] = useState<string>();
  const [actionError, setActionError] = useState<unknown>();
  const [confirming, setConfirming] = useState(false);
  // The confirmation replaces the Delete button: focus goes to its safe answer, and back after Cancel.
  const cancelRef = useRef<HTMLButtonElement>(null);
  const deleteRef = useRef<HTMLButtonElement>(null);
  const asked = useRef(false);
  useLayoutEffect(() => {
    if (confirming) cancelRef.current?.focus();
    else if (asked.current) deleteRef.current?.focus();
    asked.current = confirming;
  }, [confirming]);
  const s = source?.data;
  if (error) return <ErrorNote error={error} />;
  if (!s) return <p>Loading…</p>;

  async function act(what: string, run: () => Promise<unknown>) {
    setActionError(undefined);
    setNote(undefined);
    try {
      await run();
      setNote(what);
      reload();
    } catch (err) {
      setActionError(err);
    }
  }
  async function sendTest() {
    if (!s?.endpoint_url) return;
    await act("Test request sent.", () =>
      // The endpoint is another origin, and the tenant's: it gets no cookie of the console's.
      fetch(s.endpoint_url!, {
        method: "POST",
        credentials: "omit",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ test: true, sent_at: new Date().toISOString() }),
      }),
    );
  }

  return (
    <>
      <Title text={s.name} />
      <p class="muted">
        {s.component_key ?? s.component_id} · {s.active ? "Active" : "Paused"} · created{" "}
        {formatTime(s.created_at)}
      </p>
      {s.endpoint_url && (
        <p class="endpoint">
          <label for="endpoint-url">Endpoint URL</label>{" "}
          <input
            id="endpoint-url"
            readOnly
            value={s.endpoint_url}
            size={Math.min(s.endpoint_url.length, 60)}
          />{" "}
          <CopyButton text={s.endpoint_url} label="Copy URL" />{" "}
          <button type="button" onClick={sendTest}>
            Send a test request
          </button>
        </p>
      )}
      <div class="actions">
        {s.active ? (
          <button
            type="button"
            onClick={() => act("Paused.", () => api("PUT", `/v1/sources/${s.id}`, { active: false }))}
          >
            Pause
          </button>
        ) : (
          <button
            type="button"
            onClick={() => act("Resumed.", () => api("PUT", `/v1/sources/${s.id}`, { active: true }))}
          >
            Resume
          </button>
        )}
        <button
          type="button"
          onClick={() => act("Run started.", () => api("POST", `/v1/sources/${s.id}/run`, {}))}
        >
          Run now
        </button>
        {!confirming ? (
          <button type="button" class="danger" ref={deleteRef} onClick={() => setConfirming(true)}>
            Delete
          </button>
        ) : (
          <fieldset class="confirm">
            <legend class="visually-hidden">Confirm deletion</legend>
            Delete {s.name} and its events?{" "}
            <button
              type="button"
              class="danger"
              onClick={() =>
                act("Deleted.", async () => {
                  await api("DELETE", `/v1/sources/${s.id}`);
                  navigate("/");
                })
              }
            >
              Yes, delete
            </button>{" "}
            <button type="button" ref={cancelRef} onClick={() => setConfirming(false)}>
              Cancel
            </button>
          </fieldset>
        )}
      </div>
      <p aria-live="polite" class="note">
        {note}
      </p>
      <ErrorNote error={actionError} />
      <div role="tablist" aria-label="Source views" class="tabs">
        {tabs.map(([key, label]) => (
          <button
            type="button"
            role="tab"
            key={key}
            id={`tab-${key}`}
            aria-selected={tab === key}
            aria-controls={`panel-${key}`}
            tabIndex={tab === key ? 0 : -1}
            onClick={() => setTab(key)}
            onKeyDown={(e) => {
              const i = tabs.findIndex(([k]) => k === tab);
              const step = e.key === "ArrowRight" ? 1 : e.key === "ArrowLeft" ? -1 : 0;
              if (!step) return;
              const next = tabs[(i + step + tabs.length) % tabs.length]![0];
              setTab(next);
              document.getElementById(`tab-${next}`)?.focus();
            }}
          >
            {label}
          </button>
        ))}
      </div>
      <div role="tabpanel" id={`panel-${tab}`} aria-labelledby={`tab-${tab}`} class="panel">
        {tab === "events" && (
          <>
            <label for="channel">Channel</label>{" "}
            <input
              id="channel"
              placeholder="default"
              value={channel}
              onChange={(e) => setChannel(e.currentTarget.value.trim())}
            />
            <SearchForm initial={filters} onSearch={setFilters} />
            {filtering(filters) ? (
              <SearchResults
                key={`s${channel}${JSON.stringify(filters)}`}
                sourceId={s.id}
                channel={channel}
                filters={filters}
              />
            ) : (
              <ChannelView key={`c${channel}`} sourceId={s.id} channel={channel} label="Events" />
            )}
          </>
        )}
        {tab === "logs" && <ChannelView sourceId={s.id} channel="$logs" label="Logs" />}
        {tab === "errors" && <ChannelView sourceId={s.id} channel="$errors" label="Errors" />}
        {tab === "configuration" && (
          <>
            <Configuration source={s} onSaved={reload} />
            <RetentionForm sourceId={s.id} retention={s.retention} onSaved={reload} />
          </>
        )}
      </div>
    </>
  );
}

function Configuration({ source, onSaved }: { source: Source; onSaved: () => void }) {
  const component = useLoad(
    () => api<{ data: { configurable_props: PropSpec[] } }>("GET", `/v1/components/${source.component_id}`),
    [source.component_id],
  );
  const [values, setValues] = useState<Values>(() => {
    const v: Values = {};
    for (const [k, x] of Object.entries(source.configured_props)) {
      // Timers come back as {interval_seconds} or {cron, timezone}; the form speaks the API's input form.
      if (x && typeof x === "object" && ("interval_seconds" in x || "cron" in x)) {
        const t = x as { interval_seconds?: number; cron?: string; timezone?: string };
        v[k] = t.cron ? { cron: t.cron, timezone: t.timezone } : { intervalSeconds: t.interval_seconds };
      } else if (x && typeof x === "object" && "endpoint_url" in x) continue;
      else v[k] = x;
    }
    return v;
  });
  const [name, setName] = useState(source.name);
  const [error, setError] = useState<unknown>();
  const [saved, setSaved] = useState(false);
  async function save(e: Event) {
    e.preventDefault();
    setError(undefined);
    setSaved(false);
    try {
      await api("PUT", `/v1/sources/${source.id}`, {
        ...(name.trim() && name.trim() !== source.name ? { name: name.trim() } : {}),
        configured_props: values,
      });
      setSaved(true);
      onSaved();
    } catch (err) {
      setError(err);
    }
  }
  const props = component.value?.data.configurable_props;
  if (!props) return <ErrorNote error={component.error} />;
  const fieldError =
    error instanceof ApiError && error.field ? { field: error.field, message: error.message } : undefined;
  return (
    <form onSubmit={save} class="form" noValidate>
      <div class="field">
        <label for="source-name">Source name</label>
        <input
          id="source-name"
          value={name}
          maxLength={200}
          onInput={(e) => setName(e.currentTarget.value)}
        />
      </div>
      <PropsForm
        props={props}
        values={values}
        onChange={setValues}
        fieldError={fieldError}
        componentRef={source.component_id}
        orgId={undefined}
      />
      {!fieldError && <ErrorNote error={error} />}
      <div class="actions">
        <button type="submit">Save configuration</button>
      </div>
      <p aria-live="polite">{saved ? "Saved." : ""}</p>
    </form>
  );
}
