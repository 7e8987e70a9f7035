/**
 * Webhooks (create with the secret shown once, delete) and one webhook's deliveries with Redeliver; each
 * delivery opens its attempts (delivery.tsx).
 */
import { useRef, useState } from "preact/hooks";
import { api, formatTime } from "../api.ts";
import { useFocusOnShow } from "../focus.ts";
import {
  type Column,
  CopyButton,
  DangerButton,
  DataTable,
  ErrorNote,
  TextField,
  Title,
  useLoad,
} from "../ui.tsx";

interface Webhook {
  id: string;
  name: string | null;
  url: string;
  active: boolean;
  created_at: number;
}

interface Delivery {
  id: string;
  listener_id: string;
  replay: { id: string } | null;
  event_id: string;
  emitter_id: string;
  status: "pending" | "succeeded" | "failed";
  attempts: number;
  last_status_code: number | null;
  last_error: string | null;
  duration_ms: number | null;
  next_attempt_at: number | null;
  created_at: number;
}

const webhookColumns: Column<Webhook>[] = [
  { label: "Name", cell: (w) => <a href={`#/webhooks/${w.id}`}>{w.name ?? w.id}</a> },
  { label: "URL", cell: (w) => w.url, class: "wrap" },
  { label: "State", cell: (w) => (w.active ? "Active" : "Inactive") },
  { label: "Created", cell: (w) => formatTime(w.created_at) },
];

const deliveryColumns: Column<Delivery>[] = [
  {
    label: "Delivery",
    cell: (d) => (
      <>
        <a href={`#/webhooks/${d.listener_id}/deliveries/${d.id}`}>{d.id}</a>
        <div class="muted">
          event {d.event_id}
          {d.replay ? " (replay)" : ""}
        </div>
      </>
    ),
  },
  { label: "Status", cell: (d) => d.status },
  { label: "Attempts", cell: (d) => d.attempts },
  { label: "Response", cell: (d) => d.last_status_code ?? d.last_error ?? "—" },
  { label: "Duration", cell: (d) => (d.duration_ms === null ? "—" : `${d.duration_ms} ms`) },
  { label: "Next attempt", cell: (d) => formatTime(d.next_attempt_at) },
];

export function WebhooksPage({ orgId }: { orgId: string | undefined }) {
  const list = useLoad(
    () =>
      api<{ data: Webhook[] }>(
        "GET",
        `${orgId ? `/v1/orgs/${orgId}/webhooks` : "/v1/users/me/webhooks"}?limit=100`,
      ),
    [orgId],
  );
  const [url, setUrl] = useState("");
  const [name, setName] = useState("");
  const [created, setCreated] = useState<{ name: string; secret: string }>();
  const [error, setError] = useState<unknown>();
  const secretRef = useRef<HTMLElement>(null);
  useFocusOnShow(secretRef, created);
  async function create(e: Event) {
    e.preventDefault();
    setError(undefined);
    try {
      const r = await api<{ data: Webhook & { signing_secret: string } }>("POST", "/v1/webhooks", {
        url,
        ...(name ? { name } : {}),
        ...(orgId ? { org_id: orgId } : {}),
      });
      setCreated({ name: r.data.name ?? r.data.url, secret: r.data.signing_secret });
      setUrl("");
      setName("");
      list.reload();
    } catch (err) {
      setError(err);
    }
  }
  async function remove(id: string) {
    setError(undefined);
    try {
      await api("DELETE", `/v1/webhooks/${id}`);
      list.reload();
    } catch (err) {
      setError(err);
    }
  }
  return (
    <>
      <Title text="Webhooks" />
      <form onSubmit={create} class="form inline">
        <h2>New webhook</h2>
        <TextField id="webhook-url" label="URL" type="url" required value={url} onValue={setUrl} />
        <TextField id="webhook-name" label="Name (optional)" value={name} onValue={setName} />
        <div class="actions">
          <button type="submit">Create webhook</button>
        </div>
      </form>
      <ErrorNote error={error} />
      {created && (
        <section class="secret" aria-labelledby="secret-heading" tabIndex={-1} ref={secretRef}>
          <h2 id="secret-heading">Signing secret of {created.name}</h2>
          <p>Shown once: keep it now to verify the webhook's signatures.</p>
          <code>{created.secret}</code> <CopyButton text={created.secret} label="Copy secret" />
        </section>
      )}
      <ErrorNote error={list.error} />
      {list.value && (
        <DataTable
          caption="Webhooks"
          columns={webhookColumns}
          rows={list.value.data}
          rowKey={(w) => w.id}
          empty="No webhooks yet."
          actions={(w) => (
            <DangerButton label="Delete" what={`webhook ${w.name ?? w.id}`} onClick={() => remove(w.id)} />
          )}
        />
      )}
    </>
  );
}

export function WebhookPage({ id }: { id: string }) {
  const webhook = useLoad(() => api<{ data: Webhook }>("GET", `/v1/webhooks/${id}`), [id]);
  const deliveries = useLoad(
    () => api<{ data: Delivery[] }>("GET", `/v1/webhooks/${id}/deliveries?limit=50`),
    [id],
  );
  const [note, setNote] = useState<string>();
  const [error, setError] = useState<unknown>();
  const [since, setSince] = useState(() => new Date(Date.now() - 24 * 3600_000).toISOString().slice(0, 16));
  async function redeliver(deliveryId: string) {
    setError(undefined);
    try {
      await api("POST", `/v1/webhooks/${id}/deliveries/${deliveryId}/redeliver`, {});
      setNote(`Delivery ${deliveryId} queued again.`);
      deliveries.reload();
    } catch (err) {
      setError(err);
    }
  }
  async function redeliverAll(e: Event) {
    e.preventDefault();
    setError(undefined);
    try {
      // The input is in UTC (its label says so).
      const seconds = Math.floor(new Date(`${since}:00Z`).getTime() / 1000);
      const r = await api<{ data: { count: number } }>("POST", `/v1/webhooks/${id}/redeliver`, {
        since: seconds,
      });
      setNote(`${r.data.count} failed deliveries queued again.`);
      deliveries.reload();
    } catch (err) {
      setError(err);
    }
  }
  const w = webhook.value?.data;
  return (
    <>
      <Title text={w ? `Webhook ${w.name ?? w.id}` : "Webhook"} />
      <ErrorNote error={webhook.error} />
      {w && <p class="wrap muted">{w.url}</p>}
      <div class="actions">
        <button type="button" onClick={deliveries.reload}>
          Refresh
        </button>
      </div>
      <form onSubmit={redeliverAll} class="form inline">
        <TextField
          id="since"
          label="Failed since (UTC)"
          type="datetime-local"
          value={since}
          onValue={setSince}
        />
        <div class="actions">
          <button type="submit">Redeliver all failed</button>
        </div>
      </form>
      <p aria-live="polite" class="note">
        {note}
      </p>
      <ErrorNote error={error ?? deliveries.error} />
      {deliveries.value && (
        <DataTable
          caption="Deliveries, newest first"
          columns={deliveryColumns}
          rows={deliveries.value.data}
          rowKey={(d) => d.id}
          empty="No deliveries yet."
          actions={(d) => (
            <button type="button" onClick={() => redeliver(d.id)} aria-label={`Redeliver ${d.id}`}>
              Redeliver
            </button>
          )}
        />
      )}
    </>
  );
}
