/** Subscriptions: from a source's channel to a webhook or another source; create and delete. */
import { useState } from "preact/hooks";
import { api } from "../api.ts";
import { type Column, DangerButton, DataTable, ErrorNote, TextField, Title, useLoad } from "../ui.tsx";

interface Subscription {
  id: string;
  emitter_id: string;
  listener_id: string;
  event_name: string;
}

const columns: Column<Subscription>[] = [
  { label: "Emitter", cell: (s) => s.emitter_id },
  { label: "Channel", cell: (s) => s.event_name || "default" },
  {
    label: "Listener",
    cell: (s) =>
      s.listener_id.startsWith("wh_") ? (
        <a href={`#/webhooks/${s.listener_id}`}>{s.listener_id}</a>
      ) : (
        s.listener_id
      ),
  },
];

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
        <TextField
          id="sub-emitter"
          label="Emitter (source ID, dc_…)"
          required
          value={emitter}
          onValue={setEmitter}
        />
        <TextField
          id="sub-listener"
          label="Listener (webhook wh_… or source dc_…)"
          required
          value={listener}
          onValue={setListener}
        />
        <TextField id="sub-channel" label="Channel (optional)" value={channel} onValue={setChannel} />
        <div class="actions">
          <button type="submit">Subscribe</button>
        </div>
      </form>
      <ErrorNote error={error ?? list.error} />
      {list.value && (
        <DataTable
          caption="Subscriptions"
          columns={columns}
          rows={list.value.data}
          rowKey={(s) => s.id}
          empty="No subscriptions yet."
          actions={(s) => (
            <DangerButton label="Delete" what={`subscription ${s.id}`} onClick={() => remove(s)} />
          )}
        />
      )}
    </>
  );
}
