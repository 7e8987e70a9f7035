/** Subscriptions: from a source's channel to a webhook or another source; create and delete. */
import { useState } from "preact/hooks";
import { api } from "../api.ts";
import { ErrorNote, Title, useLoad } from "../ui.tsx";

interface Subscription {
  id: string;
  emitter_id: string;
  listener_id: string;
  event_name: string;
}

export function SubscriptionsPage({ orgId }: { orgId: string | undefined }) {
  const list = useLoad(
    () =>
      api<{ data: Subscription[] }>(
        "GET",
        orgId ? `/v1/orgs/${orgId}/subscriptions` : "/v1/users/me/subscriptions",
      ),
    [orgId],
  );
  const [emitter, setEmitter] = useState("");
  const [listener, setListener] = useState("");
  const [channel, setChannel] = useState("");
  const [error, setError] = useState<unknown>();
  async function create(e: Event) {
    e.preventDefault();
    setError(undefined);
    try {
      await api("POST", "/v1/subscriptions", {
        emitter_id: emitter.trim(),
        listener_id: listener.trim(),
        ...(channel ? { event_name: channel } : {}),
        ...(orgId ? { org_id: orgId } : {}),
      });
      list.reload();
    } catch (err) {
      setError(err);
    }
  }
  async function remove(s: Subscription) {
    setError(undefined);
    const q = new URLSearchParams({
      emitter_id: s.emitter_id,
      listener_id: s.listener_id,
      event_name: s.event_name,
    });
    try {
      await api("DELETE", `/v1/subscriptions?${q}`);
      list.reload();
    } catch (err) {
      setError(err);
    }
  }
  return (
    <>
      <Title text="Subscriptions" />
      <form onSubmit={create} class="form inline">
        <h2>New subscription</h2>
        <div class="field">
          <label for="sub-emitter">Emitter (source ID, dc_…)</label>
          <input
            id="sub-emitter"
            required
            value={emitter}
            onInput={(e) => setEmitter(e.currentTarget.value)}
          />
        </div>
        <div class="field">
          <label for="sub-listener">Listener (webhook wh_… or source dc_…)</label>
          <input
            id="sub-listener"
            required
            value={listener}
            onInput={(e) => setListener(e.currentTarget.value)}
          />
        </div>
        <div class="field">
          <label for="sub-channel">Channel (optional)</label>
          <input id="sub-channel" value={channel} onInput={(e) => setChannel(e.currentTarget.value)} />
        </div>
        <div class="actions">
          <button type="submit">Subscribe</button>
        </div>
      </form>
      <ErrorNote error={error ?? list.error} />
      {list.value && list.value.data.length === 0 && <p>No subscriptions yet.</p>}
      {list.value && list.value.data.length > 0 && (
        <div class="scroll">
          <table>
            <caption>Subscriptions</caption>
            <thead>
              <tr>
                <th scope="col">Emitter</th>
                <th scope="col">Channel</th>
                <th scope="col">Listener</th>
                <th scope="col">
                  <span class="visually-hidden">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {list.value.data.map((s) => (
                <tr key={s.id}>
                  <th scope="row">{s.emitter_id}</th>
                  <td>{s.event_name || "default"}</td>
                  <td>
                    {s.listener_id.startsWith("wh_") ? (
                      <a href={`#/webhooks/${s.listener_id}`}>{s.listener_id}</a>
                    ) : (
                      s.listener_id
                    )}
                  </td>
                  <td>
                    <button
                      type="button"
                      class="danger"
                      onClick={() => remove(s)}
                      aria-label={`Delete subscription ${s.id}`}
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
