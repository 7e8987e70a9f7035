/**
 * An event's deliveries, each linking to its attempts, and a form that replays the event to a webhook or
 * source of the caller's after a confirmation. Shown under an event on the source page and on the
 * event's own page.
 */
import type { Ref } from "preact";
import { useLayoutEffect, useRef, useState } from "preact/hooks";
import { api } from "./api.ts";
import { type DeliverySummary, deliveryHref, listenerHref, useReplay } from "./deliveries-api.ts";
import { type Column, DataTable, ErrorNote, SelectField, useLoad } from "./ui.tsx";

/** The question a replay asks before it is sent, in place of the button that asked for it. */
export function ConfirmReplay({
  eventId,
  to,
  replay,
  cancelRef,
}: {
  eventId: string;
  to: string;
  replay: ReturnType<typeof useReplay>;
  cancelRef: Ref<HTMLButtonElement>;
}) {
  return (
    <fieldset class="confirm">
      <legend class="visually-hidden">Confirm the replay</legend>
      Send event {eventId} again to {to}, as a new delivery?{" "}
      <button type="button" onClick={replay.confirm} disabled={replay.busy}>
        Yes, replay
      </button>{" "}
      <button type="button" ref={cancelRef} onClick={replay.cancel}>
        Cancel
      </button>
    </fieldset>
  );
}

const columns: Column<DeliverySummary>[] = [
  { label: "Delivery", cell: (d) => <a href={deliveryHref(d.id)}>{d.id}</a> },
  {
    label: "Listener",
    cell: (d) => {
      const href = listenerHref(d.listener_id);
      return href ? <a href={href}>{d.listener_id}</a> : d.listener_id;
    },
  },
  { label: "Status", cell: (d) => `${d.status}${d.replay ? " (replay)" : ""}` },
  { label: "Attempts", cell: (d) => d.attempts },
  { label: "Response", cell: (d) => d.last_status_code ?? d.last_error ?? "—" },
];

/** The caller's webhooks and sources, as listener choices. */
export function useListeners() {
  return useLoad(async () => {
    const [hooks, sources] = await Promise.all([
      api<{ data: Array<{ id: string; name: string | null; url: string }> }>(
        "GET",
        "/v1/users/me/webhooks?limit=100",
      ),
      api<{ data: Array<{ id: string; name: string }> }>("GET", "/v1/users/me/sources?limit=100"),
    ]);
    return [
      ...hooks.data.map((w): [string, string] => [w.id, `Webhook ${w.name ?? w.url}`]),
      ...sources.data.map((s): [string, string] => [s.id, `Source ${s.name}`]),
    ];
  }, []);
}

export function EventDeliveries({ sourceId, eventId }: { sourceId: string; eventId: string }) {
  const list = useLoad(
    () =>
      api<{ data: DeliverySummary[] }>(
        "GET",
        `/v1/sources/${sourceId}/events/${eventId}/deliveries?limit=20`,
      ),
    [sourceId, eventId],
  );
  const listeners = useListeners();
  const [target, setTarget] = useState("");
  const [made, setMade] = useState<string>();
  const replay = useReplay(sourceId, eventId, (id) => {
    setMade(id);
    list.reload();
  });
  const cancelRef = useRef<HTMLButtonElement>(null);
  useLayoutEffect(() => {
    if (replay.asking) cancelRef.current?.focus();
  }, [replay.asking]);
  const chosen = listeners.value?.find(([id]) => id === target)?.[1] ?? target;
  return (
    <section aria-label={`Deliveries of event ${eventId}`} class="event-deliveries">
      <h4>Deliveries</h4>
      <ErrorNote error={list.error ?? listeners.error} />
      {list.value && (
        <DataTable
          caption={`Deliveries of event ${eventId}, newest first`}
          columns={columns}
          rows={list.value.data}
          rowKey={(d) => d.id}
          empty="No deliveries of this event."
        />
      )}
      {listeners.value && (
        <form
          class="form inline"
          onSubmit={(e) => {
            e.preventDefault();
            if (target) replay.ask(target);
          }}
        >
          <SelectField
            id={`replay-to-${eventId}`}
            label="Replay to"
            prompt="Choose a webhook or source"
            options={listeners.value}
            value={target}
            onValue={setTarget}
          />
          {replay.asking ? (
            <ConfirmReplay eventId={eventId} to={chosen} replay={replay} cancelRef={cancelRef} />
          ) : (
            <div class="actions">
              <button type="submit">Replay…</button>
            </div>
          )}
        </form>
      )}
      <p aria-live="polite" class="note">
        {made && (
          <>
            Replayed as <a href={deliveryHref(made)}>{made}</a>.
          </>
        )}
      </p>
      <ErrorNote error={replay.error} />
    </section>
  );
}
