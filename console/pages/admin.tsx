/**
 * Admin (admin keys only): every user and organization listed (`GET /v1/admin/users`, `/v1/admin/orgs`),
 * create users and organizations, add and remove members, and a user's API keys; users and organizations
 * are chosen from those lists, never typed as IDs.
 */
import type { ComponentChildren } from "preact";
import { useRef, useState } from "preact/hooks";
import { api, formatTime } from "../api.ts";
import { useFocusOnShow } from "../focus.ts";
import {
  type Column,
  CopyButton,
  DangerButton,
  DataTable,
  ErrorNote,
  SelectField,
  TextField,
  Title,
  useLoad,
} from "../ui.tsx";

interface Key {
  id: string;
  name: string;
  prefix: string;
  created_at: number;
  revoked_at: number | null;
}

interface User {
  id: string;
  username: string;
  email: string;
  plan: string;
  is_admin: boolean;
  created_at: number;
}

interface Org {
  id: string;
  orgname: string;
  name: string;
  owner_id: string;
  created_at: number;
}

interface Listed<T> {
  items: T[];
  total: number;
}

/** The lists walk the API's pages up to this many entries (newest first), enough for a choice by name. */
const listCap = 1000;
/** Rows per page of the tables. */
const pageSize = 25;

/** Every entry of an admin list, newest first, page after page (100 each) up to `listCap`. */
async function listAll<T>(path: string): Promise<Listed<T>> {
  const items: T[] = [];
  let after: string | null = null;
  let total = 0;
  do {
    const page: { data: T[]; page_info: { total_count: number; end_cursor: string | null } } = await api(
      "GET",
      `${path}?limit=100${after ? `&after=${encodeURIComponent(after)}` : ""}`,
    );
    items.push(...page.data);
    total = page.page_info.total_count;
    after = page.page_info.end_cursor;
  } while (after && items.length < listCap);
  return { items, total };
}

const keyColumns: Column<Key>[] = [
  { label: "Name", cell: (k) => k.name },
  { label: "Prefix", cell: (k) => `${k.prefix}…` },
  { label: "Created", cell: (k) => formatTime(k.created_at) },
  { label: "Revoked", cell: (k) => formatTime(k.revoked_at) },
];

const userColumns: Column<User>[] = [
  { label: "Username", cell: (u) => u.username },
  { label: "Email", cell: (u) => u.email, class: "wrap" },
  { label: "Plan", cell: (u) => u.plan },
  { label: "Admin", cell: (u) => (u.is_admin ? "yes" : "no") },
  { label: "Created", cell: (u) => formatTime(u.created_at) },
];

export function AdminPage() {
  const users = useLoad(() => listAll<User>("/v1/admin/users"), []);
  const orgs = useLoad(() => listAll<Org>("/v1/admin/orgs"), []);
  const [error, setError] = useState<unknown>();
  const [note, setNote] = useState<string>();
  const [secret, setSecret] = useState<{ key: string; n: number }>();
  const [username, setUsername] = useState("");
  const [email, setEmail] = useState("");
  const [orgname, setOrgname] = useState("");
  const [owner, setOwner] = useState("");
  const [memberOrg, setMemberOrg] = useState("");
  const [memberUser, setMemberUser] = useState("");
  const [keysOf, setKeysOf] = useState<User>();
  const [keys, setKeys] = useState<{ list: Key[]; n: number }>();
  const secretRef = useRef<HTMLElement>(null);
  const keysRef = useRef<HTMLHeadingElement>(null);
  useFocusOnShow(secretRef, secret);
  // The keys' heading takes focus when they are shown or change (a revoked key's button goes away).
  useFocusOnShow(keysRef, keys);

  const userList = users.value?.items ?? [];
  const orgList = orgs.value?.items ?? [];
  const usernameOf = (id: string) => userList.find((u) => u.id === id)?.username ?? id;

  async function run(what: () => Promise<string | undefined>) {
    setError(undefined);
    setNote(undefined);
    try {
      setNote(await what());
    } catch (err) {
      setError(err);
    }
  }
  const showKeys = async (user: User) => {
    const r = await api<{ data: Key[] }>("GET", `/v1/admin/users/${encodeURIComponent(user.id)}/keys`);
    setKeysOf(user);
    setKeys((old) => ({ list: r.data, n: (old?.n ?? 0) + 1 }));
  };
  const orgColumns: Column<Org>[] = [
    { label: "Organization", cell: (o) => o.orgname },
    { label: "Name", cell: (o) => o.name },
    { label: "Owner", cell: (o) => usernameOf(o.owner_id) },
    { label: "Created", cell: (o) => formatTime(o.created_at) },
  ];
  const userOptions = userList.map((u): [string, string] => [u.id, `${u.username} (${u.email})`]);
  return (
    <>
      <Title text="Admin" />
      <p aria-live="polite" class="note">
        {note}
      </p>
      <ErrorNote error={error ?? users.error ?? orgs.error} />
      {secret && (
        <section class="secret" aria-label="New API key" tabIndex={-1} ref={secretRef}>
          <p>The new API key, shown once:</p>
          <code>{secret.key}</code> <CopyButton text={secret.key} label="Copy key" />
        </section>
      )}

      <section aria-labelledby="users-heading">
        <h2 id="users-heading">Users</h2>
        {users.value && (
          <Paged
            what="Users"
            listed={users.value}
            columns={userColumns}
            rowKey={(u) => u.id}
            actions={(u) => (
              <button
                type="button"
                aria-label={`API keys of ${u.username}`}
                onClick={() =>
                  run(async () => {
                    await showKeys(u);
                    return undefined;
                  })
                }
              >
                API keys
              </button>
            )}
          />
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
              setSecret((old) => ({ key: r.data.api_key, n: (old?.n ?? 0) + 1 }));
              users.reload();
              return `User ${username} created (${r.data.id}).`;
            });
          }}
        >
          <h3>New user</h3>
          <TextField id="adm-username" label="Username" required value={username} onValue={setUsername} />
          <TextField id="adm-email" label="Email" type="email" required value={email} onValue={setEmail} />
          <div class="actions">
            <button type="submit">Create user</button>
          </div>
        </form>
      </section>

      {keysOf && keys && (
        <section aria-labelledby="keys-heading">
          <h2 id="keys-heading" tabIndex={-1} ref={keysRef}>
            API keys of {keysOf.username}
          </h2>
          <div class="actions">
            <button
              type="button"
              onClick={() =>
                run(async () => {
                  const r = await api<{ data: { api_key: string } }>(
                    "POST",
                    `/v1/admin/users/${encodeURIComponent(keysOf.id)}/keys`,
                    {},
                  );
                  setSecret((old) => ({ key: r.data.api_key, n: (old?.n ?? 0) + 1 }));
                  await showKeys(keysOf);
                  return "Key created.";
                })
              }
            >
              Create key
            </button>
          </div>
          <DataTable
            caption={`Keys of ${keysOf.username}`}
            columns={keyColumns}
            rows={keys.list}
            rowKey={(k) => k.id}
            empty="No keys."
            actions={(k) =>
              k.revoked_at === null && (
                <DangerButton
                  label="Revoke"
                  what={`key ${k.prefix}`}
                  onClick={() =>
                    run(async () => {
                      await api("DELETE", `/v1/admin/keys/${k.id}`);
                      await showKeys(keysOf);
                      return "Key revoked.";
                    })
                  }
                />
              )
            }
          />
        </section>
      )}

      <section aria-labelledby="orgs-heading">
        <h2 id="orgs-heading">Organizations</h2>
        {orgs.value && (
          <Paged
            what="Organizations"
            listed={orgs.value}
            columns={orgColumns}
            rowKey={(o) => o.id}
            empty="No organizations yet."
          />
        )}
        <form
          class="form inline"
          onSubmit={(e) => {
            e.preventDefault();
            run(async () => {
              const r = await api<{ data: { id: string } }>("POST", "/v1/admin/orgs", {
                orgname,
                owner_id: owner,
              });
              orgs.reload();
              return `Organization ${orgname} created (${r.data.id}).`;
            });
          }}
        >
          <h3>New organization</h3>
          <TextField
            id="adm-orgname"
            label="Organization name"
            required
            value={orgname}
            onValue={setOrgname}
          />
          <SelectField
            id="adm-owner"
            label="Owner"
            prompt="Choose a user"
            options={userOptions}
            value={owner}
            onValue={setOwner}
          />
          <div class="actions">
            <button type="submit">Create organization</button>
          </div>
        </form>
        <form
          class="form inline"
          onSubmit={(e) => {
            e.preventDefault();
            run(async () => {
              await api("POST", `/v1/admin/orgs/${encodeURIComponent(memberOrg)}/members`, {
                user_id: memberUser,
              });
              return "Member added.";
            });
          }}
        >
          <h3>Members</h3>
          <SelectField
            id="adm-member-org"
            label="Organization"
            prompt="Choose an organization"
            options={orgList.map((o) => [o.id, o.orgname])}
            value={memberOrg}
            onValue={setMemberOrg}
          />
          <SelectField
            id="adm-member-user"
            label="User"
            prompt="Choose a user"
            options={userOptions}
            value={memberUser}
            onValue={setMemberUser}
          />
          <div class="actions">
            <button type="submit">Add member</button>
            <button
              type="button"
              class="danger"
              disabled={!memberOrg || !memberUser}
              onClick={() =>
                run(async () => {
                  const q = new URLSearchParams({ user_id: memberUser });
                  await api("DELETE", `/v1/admin/orgs/${encodeURIComponent(memberOrg)}/members?${q}`);
                  return "Member removed.";
                })
              }
            >
              Remove member
            </button>
          </div>
        </form>
      </section>
    </>
  );
}

/** A list's table, `pageSize` rows at a time, with the count and Previous/Next. */
function Paged<T>({
  what,
  listed,
  columns,
  rowKey,
  actions,
  empty,
}: {
  what: string;
  listed: Listed<T>;
  columns: Column<T>[];
  rowKey: (row: T) => string;
  actions?: (row: T) => ComponentChildren;
  empty?: string;
}) {
  const [page, setPage] = useState(0);
  const pages = Math.max(1, Math.ceil(listed.items.length / pageSize));
  const at = Math.min(page, pages - 1);
  const rows = listed.items.slice(at * pageSize, (at + 1) * pageSize);
  const shown = listed.total > listed.items.length ? `, the newest ${listed.items.length} listed` : "";
  return (
    <>
      <DataTable
        caption={`${what}: ${listed.total}${shown}${pages > 1 ? `, page ${at + 1} of ${pages}` : ""}`}
        columns={columns}
        rows={rows}
        rowKey={rowKey}
        actions={actions}
        empty={empty}
      />
      {pages > 1 && (
        <nav aria-label={`${what} pages`} class="pager actions">
          <button type="button" disabled={at === 0} onClick={() => setPage(at - 1)}>
            Previous page
          </button>
          <button type="button" disabled={at >= pages - 1} onClick={() => setPage(at + 1)}>
            Next page
          </button>
        </nav>
      )}
    </>
  );
}
