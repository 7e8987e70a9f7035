/** Admin (admin keys only): create users and organizations, manage members and API keys. */
import { useState } from "preact/hooks";
import { api, formatTime } from "../api.ts";
import { CopyButton, ErrorNote, Title } from "../ui.tsx";

interface Key {
  id: string;
  name: string;
  prefix: string;
  created_at: number;
  revoked_at: number | null;
}

export function AdminPage() {
  const [error, setError] = useState<unknown>();
  const [note, setNote] = useState<string>();
  const [secret, setSecret] = useState<string>();
  const [username, setUsername] = useState("");
  const [email, setEmail] = useState("");
  const [orgname, setOrgname] = useState("");
  const [owner, setOwner] = useState("");
  const [memberOrg, setMemberOrg] = useState("");
  const [memberUser, setMemberUser] = useState("");
  const [keysOf, setKeysOf] = useState("");
  const [keys, setKeys] = useState<Key[]>();

  async function run(what: () => Promise<string | undefined>) {
    setError(undefined);
    setNote(undefined);
    try {
      setNote(await what());
    } catch (err) {
      setError(err);
    }
  }
  const listKeys = async () => {
    const r = await api<{ data: Key[] }>("GET", `/v1/admin/users/${encodeURIComponent(keysOf.trim())}/keys`);
    setKeys(r.data);
  };
  return (
    <>
      <Title text="Admin" />
      <p aria-live="polite" class="note">
        {note}
      </p>
      <ErrorNote error={error} />
      {secret && (
        <section class="secret" aria-label="New API key">
          <p>The new API key, shown once:</p>
          <code>{secret}</code> <CopyButton text={secret} label="Copy key" />
        </section>
      )}
      <form
        class="form inline"
        onSubmit={(e) => {
          e.preventDefault();
          run(async () => {
            const r = await api<{ data: { id: string; api_key: string } }>("POST", "/v1/admin/users", {
              username,
              email,
            });
            setSecret(r.data.api_key);
            return `User ${username} created (${r.data.id}).`;
          });
        }}
      >
        <h2>New user</h2>
        <div class="field">
          <label for="adm-username">Username</label>
          <input
            id="adm-username"
            required
            value={username}
            onInput={(e) => setUsername(e.currentTarget.value)}
          />
        </div>
        <div class="field">
          <label for="adm-email">Email</label>
          <input
            id="adm-email"
            type="email"
            required
            value={email}
            onInput={(e) => setEmail(e.currentTarget.value)}
          />
        </div>
        <div class="actions">
          <button type="submit">Create user</button>
        </div>
      </form>
      <form
        class="form inline"
        onSubmit={(e) => {
          e.preventDefault();
          run(async () => {
            const r = await api<{ data: { id: string } }>("POST", "/v1/admin/orgs", {
              orgname,
              owner_id: owner.trim(),
            });
            return `Organization ${orgname} created (${r.data.id}).`;
          });
        }}
      >
        <h2>New organization</h2>
        <div class="field">
          <label for="adm-orgname">Organization name</label>
          <input
            id="adm-orgname"
            required
            value={orgname}
            onInput={(e) => setOrgname(e.currentTarget.value)}
          />
        </div>
        <div class="field">
          <label for="adm-owner">Owner user ID</label>
          <input id="adm-owner" required value={owner} onInput={(e) => setOwner(e.currentTarget.value)} />
        </div>
        <div class="actions">
          <button type="submit">Create organization</button>
        </div>
      </form>
      <form
        class="form inline"
        onSubmit={(e) => {
          e.preventDefault();
          run(async () => {
            await api("POST", `/v1/admin/orgs/${encodeURIComponent(memberOrg.trim())}/members`, {
              user_id: memberUser.trim(),
            });
            return "Member added.";
          });
        }}
      >
        <h2>Members</h2>
        <div class="field">
          <label for="adm-member-org">Organization ID</label>
          <input
            id="adm-member-org"
            required
            value={memberOrg}
            onInput={(e) => setMemberOrg(e.currentTarget.value)}
          />
        </div>
        <div class="field">
          <label for="adm-member-user">User ID</label>
          <input
            id="adm-member-user"
            required
            value={memberUser}
            onInput={(e) => setMemberUser(e.currentTarget.value)}
          />
        </div>
        <div class="actions">
          <button type="submit">Add member</button>
          <button
            type="button"
            class="danger"
            onClick={() =>
              run(async () => {
                const q = new URLSearchParams({ user_id: memberUser.trim() });
                await api("DELETE", `/v1/admin/orgs/${encodeURIComponent(memberOrg.trim())}/members?${q}`);
                return "Member removed.";
              })
            }
          >
            Remove member
          </button>
        </div>
      </form>
      <form
        class="form inline"
        onSubmit={(e) => {
          e.preventDefault();
          run(async () => {
            await listKeys();
            return undefined;
          });
        }}
      >
        <h2>API keys</h2>
        <div class="field">
          <label for="adm-keys-user">User ID</label>
          <input
            id="adm-keys-user"
            required
            value={keysOf}
            onInput={(e) => setKeysOf(e.currentTarget.value)}
          />
        </div>
        <div class="actions">
          <button type="submit">List keys</button>
          <button
            type="button"
            onClick={() =>
              run(async () => {
                const r = await api<{ data: { api_key: string } }>(
                  "POST",
                  `/v1/admin/users/${encodeURIComponent(keysOf.trim())}/keys`,
                  {},
                );
                setSecret(r.data.api_key);
                await listKeys();
                return "Key created.";
              })
            }
          >
            Create key
          </button>
        </div>
      </form>
      {keys && (
        <div class="scroll">
          <table>
            <caption>Keys</caption>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Prefix</th>
                <th scope="col">Created</th>
                <th scope="col">Revoked</th>
                <th scope="col">
                  <span class="visually-hidden">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {keys.map((k) => (
                <tr key={k.id}>
                  <th scope="row">{k.name}</th>
                  <td>{k.prefix}…</td>
                  <td>{formatTime(k.created_at)}</td>
                  <td>{formatTime(k.revoked_at)}</td>
                  <td>
                    {k.revoked_at === null && (
                      <button
                        type="button"
                        class="danger"
                        aria-label={`Revoke key ${k.prefix}`}
                        onClick={() =>
                          run(async () => {
                            await api("DELETE", `/v1/admin/keys/${k.id}`);
                            await listKeys();
                            return "Key revoked.";
                          })
                        }
                      >
                        Revoke
                      </button>
                    )}
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
