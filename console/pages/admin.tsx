/** Admin (admin keys only): create users and organizations, manage members and API keys. */
import { useState } from "preact/hooks";
import { api, formatTime } from "../api.ts";
import { type Column, CopyButton, DangerButton, DataTable, ErrorNote, TextField, Title } from "../ui.tsx";

interface Key {
  id: string;
  name: string;
  prefix: string;
  created_at: number;
  revoked_at: number | null;
}

const keyColumns: Column<Key>[] = [
  { label: "Name", cell: (k) => k.name },
  { label: "Prefix", cell: (k) => `${k.prefix}…` },
  { label: "Created", cell: (k) => formatTime(k.created_at) },
  { label: "Revoked", cell: (k) => formatTime(k.revoked_at) },
];

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
        <TextField id="adm-username" label="Username" required value={username} onValue={setUsername} />
        <TextField id="adm-email" label="Email" type="email" required value={email} onValue={setEmail} />
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
        <TextField id="adm-orgname" label="Organization name" required value={orgname} onValue={setOrgname} />
        <TextField id="adm-owner" label="Owner user ID" required value={owner} onValue={setOwner} />
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
        <TextField
          id="adm-member-org"
          label="Organization ID"
          required
          value={memberOrg}
          onValue={setMemberOrg}
        />
        <TextField id="adm-member-user" label="User ID" required value={memberUser} onValue={setMemberUser} />
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
        <TextField id="adm-keys-user" label="User ID" required value={keysOf} onValue={setKeysOf} />
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
        <DataTable
          caption="Keys"
          columns={keyColumns}
          rows={keys}
          rowKey={(k) => k.id}
          actions={(k) =>
            k.revoked_at === null && (
              <DangerButton
                label="Revoke"
                what={`key ${k.prefix}`}
                onClick={() =>
                  run(async () => {
                    await api("DELETE", `/v1/admin/keys/${k.id}`);
                    await listKeys();
                    return "Key revoked.";
                  })
                }
              />
            )
          }
        />
      )}
    </>
  );
}
