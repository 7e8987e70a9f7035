/**
 * One delivery: its attempts as a timeline, each with the request sent and the answer received behind
 * a disclosure; links to its event and listener; Redeliver (webhooks) and Replay with a confirmation.
 */
import { useLayoutEffect, useRef, useState } from "preact/hooks";
import { api, formatTime } from "../api.ts";
import {
  type Attempt,
  type DeliveryDetail,
  deliveryHref,
  eventHref,
  listenerHref,
  useReplay,
} from "../deliveries-api.ts";
import { ConfirmReplay } from "../event-deliveries.tsx";
import { ErrorNote, Title, useLoad } from "../ui.tsx";

function Headers({ headers }: { headers: Record<string, string | string[]> | null }) {
  if (!headers) return <p class="muted">No headers recorded.</p>;
  const lines = Object.entries(headers).flatMap(([k, v]) =>
    (Array.isArray(v) ? v : [v]).map((x) => `${k}: ${x}`),
  );
  return <pre class="stack">{lines.join("\n")}</pre>;
}

function AttemptItem({ a }: { a: Attempt }) {
  const code = a.response ? ` · HTTP ${a.response.status}` : "";
  return (
    <li class={`attempt ${a.outcome}`}>
      <h2>
        Attempt {a.n} · {formatTime(a.at_ms, "ms")} · {a.outcome}
        {code} · {a.duration_ms} ms{a.replay ? " · replay" : ""}
      </h2>
      {a.error && (
        <p class="error">
          {a.error_kind ? `${a.error_kind}: ` : ""}
          {a.error}
        </p>
      )}
      <details>
        <summary>Request{a.request.url ? ` to ${a.request.url}` : ": a run of the listener source"}</summary>
        <h3>Headers</h3>
        <Headers headers={a.request.headers} />
        <h3>Body</h3>
        <pre class="stack">{a.request.body}</pre>
      </details>
      {a.response ? (
        <details>
          <summary>Response: HTTP {a.response.status}</summary>
          <h3>Headers</h3>
          <Headers headers={a.response.headers} />
          <h3>Body{a.response.truncated ? " (the first 64 KB)" : ""}</h3>
          {a.response.body === null ? (
            <p class="muted">Empty.</p>
          ) : (
            <pre class="stack">{a.response.body}</pre>
          )}
        </details>
      ) : (
        <p class="muted">No response.</p>
      )}
    </li>
  );
}

export function DeliveryPage({ id }: { id: string }) {
  const delivery = useLoad(() => api<{ data: DeliveryDetail }>("GET", `/v1/deliveries/${id}`), [id]);
  const [note, setNote] = useState<{ text: string; href?: string }>();
  const [error, setError] = useState<unknown>();
  const d = delivery.value?.data;
  const replay = useReplay(d?.emitter_id ?? "", d?.event_id ?? "", (made) => {
    setNote({ text: `Replayed as ${made}.`, href: deliveryHref(made) });
  });
  // The confirmation replaces the Replay button: focus goes to its safe answer, and back after.
  const cancelRef = useRef<HTMLButtonElement>(null);
  const replayRef = useRef<HTMLButtonElement>(null);
  const asked = useRef(false);
  useLayoutEffect(() => {
    if (replay.asking) cancelRef.current?.focus();
    else if (asked.current) replayRef.current?.focus();
    asked.current = replay.asking !== undefined;
  }, [replay.asking]);
  if (delivery.error) return <ErrorNote error={delivery.error} />;
  if (!d) return <p>Loading…</p>;

  async function redeliver() {
    setError(undefined);
    try {
      await api("POST", `/v1/webhooks/${d!.listener_id}/deliveries/${d!.id}/redeliver`, {});
      setNote({ text: "Queued again." });
      delivery.reload();
    } catch (err) {
      setError(err);
    }
  }
  const listener = listenerHref(d.listener_id);
  const fromSource = d.emitter_id.startsWith("dc_");
  return (
    <>
      <Title text={`Delivery ${d.id}`} />
      <p>
        <strong>{d.status}</strong> · {d.attempt_count} attempt{d.attempt_count === 1 ? "" : "s"} · to{" "}
        {listener ? <a href={listener}>{d.listener_id}</a> : d.listener_id} ({d.listener_kind}) · created{" "}
        {formatTime(d.created_at)}
        {d.next_attempt_at !== null && <> · next attempt {formatTime(d.next_attempt_at)}</>}
      </p>
      <p>
        Event {fromSource ? <a href={eventHref(d.emitter_id, d.event_id)}>{d.event_id}</a> : d.event_id} of{" "}
        {d.emitter_id}
        {d.event_name ? ` on ${d.event_name}` : ""}
      </p>
      {d.replay && (
        <p>
          Replay {d.replay.id}
          {d.replay.replayed_from ? (
            <>
              {" "}
              of <a href={deliveryHref(d.replay.replayed_from)}>{d.replay.replayed_from}</a>
            </>
          ) : (
            ", the first delivery of this event to this listener"
          )}
        </p>
      )}
      <div class="actions">
        <button type="button" onClick={delivery.reload}>
          Refresh
        </button>
        {d.listener_kind === "webhook" && (
          <button type="button" onClick={redeliver}>
            Redeliver
          </button>
        )}
        {fromSource &&
          (replay.asking ? (
            <ConfirmReplay eventId={d.event_id} to={d.listener_id} replay={replay} cancelRef={cancelRef} />
          ) : (
            <button type="button" ref={replayRef} onClick={() => replay.ask(d.listener_id)}>
              Replay event
            </button>
          ))}
      </div>
      <p aria-live="polite" class="note">
        {note?.text} {note?.href && <a href={note.href}>Open it</a>}
      </p>
      <ErrorNote error={error ?? replay.error} />
      {d.attempts.length === 0 ? (
        <p>No attempt yet.</p>
      ) : (
        <ol class="timeline" aria-label="Attempts">
          {d.attempts.map((a) => (
            <AttemptItem key={String(a.n)} a={a} />
          ))}
        </ol>
      )}
    </>
  );
}
