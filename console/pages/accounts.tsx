/** App accounts: create with their `$auth` fields (never shown back) and delete. */
import { useState } from "preact/hooks";
import { api, formatTime, withOrg } from "../api.ts";
import { type Column, DangerButton, DataTable, ErrorNote, TextField, Title, useLoad } from "../ui.tsx";

interface Account {
  id: string;
  name: string;
  app: { name_slug: string };
  created_at: number;
}

const columns: Column<Account>[] = [
  { label: "Name", cell: (a) => a.name },
  { label: "App", cell: (a) => a.app.name_slug },
  { label: "ID", cell: (a) => a.id },
  { label: "Created", cell: (a) => formatTime(a.created_at) },
];

export function AccountsPage({ orgId }: { orgId: string | undefined }) {
  const list = useLoad(
    () => api<{ data: Account[] }>("GET", withOrg("/v1/accounts?limit=100", orgId)),
    [orgId],
  );
  const [app, setApp] = useState("");
  const [name, setName] = useState("");
  const [fields, setFields] = useState<Array<[string, string]>>([["", ""]]);
  const [error, setError] = useState<unknown>();
  async function create(e: Event) {
    e.preventDefault();
    setError(undefined);
    try {
      await api("POST", "/v1/accounts", {
        app,
        ...(name ? { name } : {}),
        credentials: Object.fromEntries(fields.filter(([k]) => k.trim() !== "")),
        ...(orgId ? { org_id: orgId } : {}),
      });
      setFields([["", ""]]);
      setName("");
      list.reload();
    } catch (err) {
      setError(err);
    }
  }
  async function remove(id: string) {
    try {
      await api("DELETE", withOrg(`/v1/accounts/${id}`, orgId));
      list.reload();
    } catch (err) {
      setError(err);
    }
  }
  return (
    <>
      <Title text="Accounts" />
      <form onSubmit={create} class="form">
        <h2>Connect an app account</h2>
        <TextField id="acct-app" label="App" required placeholder="github" value={app} onValue={setApp} />
        <TextField id="acct-name" label="Name (optional)" value={name} onValue={setName} />
        <fieldset>
          <legend>$auth fields</legend>
          {fields.map(([k, v], i) => (
            <div class="pair" key={String(i)}>
              <label for={`auth-k-${i}`}>Field {i + 1} name</label>
              <input
                id={`auth-k-${i}`}
                value={k}
                onInput={(e) =>
                  setFields(fields.map((f, j) => (j === i ? [e.currentTarget.value, f[1]] : f)))
                }
              />
              <label for={`auth-v-${i}`}>Field {i + 1} value</label>
              <input
                id={`auth-v-${i}`}
                type="password"
                autoComplete="off"
                value={v}
                onInput={(e) =>
                  setFields(fields.map((f, j) => (j === i ? [f[0], e.currentTarget.value] : f)))
                }
              />
            </div>
          ))}
          <button type="button" onClick={() => setFields([...fields, ["", ""]])}>
            Add a field
          </button>
        </fieldset>
        <div class="actions">
          <button type="submit">Connect account</button>
        </div>
      </form>
      <ErrorNote error={error ?? list.error} />
      {list.value && (
        <DataTable
          caption="App accounts"
          columns={columns}
          rows={list.value.data}
          rowKey={(a) => a.id}
          actions={(a) => (
            <DangerButton label="Delete" what={`account ${a.name}`} onClick={() => remove(a.id)} />
          )}
        />
      )}
    </>
  );
}
