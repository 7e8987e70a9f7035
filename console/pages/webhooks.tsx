/** Webhooks (create with the secret shown once, delete) and one webhook's deliveries with Redeliver. */
import { useState } from "preact/hooks";
import { api, formatTime } from "../api.ts";
import { CopyButton, ErrorNote, Title, useLoad } from "../ui.tsx";

interface Webhook {
  id: string;
  name: string | null;
  url: string;
  active: boolean;
  created_at: number;
}

interface Delivery {
  id: string;
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
        <div class="field">
          <label for="webhook-url">URL</label>
          <input
            id="webhook-url"
            type="url"
            required
            value={url}
            onInput={(e) => setUrl(e.currentTarget.value)}
          />
        </div>
        <div class="field">
          <label for="webhook-name">Name (optional)</label>
          <input id="webhook-name" value={name} onInput={(e) => setName(e.currentTarget.value)} />
        </div>
        <div class="actions">
          <button type="submit">Create webhook</button>
        </div>
      </form>
      <ErrorNote error={error} />
      {created && (
        <section class="secret" aria-labelledby="secret-heading">
          <h2 id="secret-heading">Signing secret of {created.name}</h2>
          <p>Shown once: keep it now to verify the webhook's signatures.</p>
          <code>{created.secret}</code> <CopyButton text={created.secret} label="Copy secret" />
        </section>
      )}
      <ErrorNote error={list.error} />
      {list.value && list.value.data.length === 0 && <p>No webhooks yet.</p>}
      {list.value && list.value.data.length > 0 && (
        <div class="scroll">
          <table>
            <caption>Webhooks</caption>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">URL</th>
                <th scope="col">State</th>
                <th scope="col">Created</th>
                <th scope="col">
                  <span class="visually-hidden">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {list.value.data.map((w) => (
                <tr key={w.id}>
                  <th scope="row">
                    <a href={`#/webhooks/${w.id}`}>{w.name ?? w.id}</a>
                  </th>
                  <td class="wrap">{w.url}</td>
                  <td>{w.active ? "Active" : "Inactive"}</td>
                  <td>{formatTime(w.created_at)}</td>
                  <td>
                    <button
                      type="button"
                      class="danger"
                      onClick={() => remove(w.id)}
                      aria-label={`Delete webhook ${w.name ?? w.id}`}
                    >
                      Delete
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
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
        <div class="field">
          <label for="since">Failed since (UTC)</label>
          <input
            id="since"
            type="datetime-local"
            value={since}
            onInput={(e) => setSince(e.currentTarget.value)}
          />
        </div>
        <div class="actions">
          <button type="submit">Redeliver all failed</button>
        </div>
      </form>
      <p aria-live="polite" class="note">
        {note}
      </p>
      <ErrorNote error={error ?? deliveries.error} />
      {deliveries.value && deliveries.value.data.length === 0 && <p>No deliveries yet.</p>}
      {deliveries.value && deliveries.value.data.length > 0 && (
        <div class="scroll">
          <table>
            <caption>Deliveries, newest first</caption>
            <thead>
              <tr>
                <th scope="col">Delivery</th>
                <th scope="col">Status</th>
                <th scope="col">Attempts</th>
                <th scope="col">Response</th>
                <th scope="col">Duration</th>
                <th scope="col">Next attempt</th>
                <th scope="col">
                  <span class="visually-hidden">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {deliveries.value.data.map((d) => (
                <tr key={d.id}>
                  <th scope="row">
                    {d.id}
                    <div class="muted">event {d.event_id}</div>
                  </th>
                  <td>{d.status}</td>
                  <td>{d.attempts}</td>
                  <td>{d.last_status_code ?? d.last_error ?? "—"}</td>
                  <td>{d.duration_ms === null ? "—" : `${d.duration_ms} ms`}</td>
                  <td>{formatTime(d.next_attempt_at)}</td>
                  <td>
                    <button type="button" onClick={() => redeliver(d.id)} aria-label={`Redeliver ${d.id}`}>
                      Redeliver
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </>
  );
}
