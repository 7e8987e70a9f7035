/** App accounts: create with their `$auth` fields (never shown back) and delete. */
import { useState } from "preact/hooks";
import { api, formatTime, withOrg } from "../api.ts";
import { ErrorNote, Title, useLoad } from "../ui.tsx";

interface Account {
  id: string;
  name: string;
  app: { name_slug: string };
  created_at: number;
}

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
        <div class="field">
          <label for="acct-app">App</label>
          <input
            id="acct-app"
            required
            placeholder="github"
            value={app}
            onInput={(e) => setApp(e.currentTarget.value)}
          />
        </div>
        <div class="field">
          <label for="acct-name">Name (optional)</label>
          <input id="acct-name" value={name} onInput={(e) => setName(e.currentTarget.value)} />
        </div>
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
      {list.value && list.value.data.length > 0 && (
        <div class="scroll">
          <table>
            <caption>App accounts</caption>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">App</th>
                <th scope="col">ID</th>
                <th scope="col">Created</th>
                <th scope="col">
                  <span class="visually-hidden">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {list.value.data.map((a) => (
                <tr key={a.id}>
                  <th scope="row">{a.name}</th>
                  <td>{a.app.name_slug}</td>
                  <td>{a.id}</td>
                  <td>{formatTime(a.created_at)}</td>
                  <td>
                    <button
                      type="button"
                      class="danger"
                      onClick={() => remove(a.id)}
                      aria-label={`Delete account ${a.name}`}
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
