/** The shell: session check, sign-in, navigation, organization switcher and the page of the route. */
import { useEffect, useRef, useState } from "preact/hooks";
import { ApiError, api, endSession, type Session, whenSignedOut } from "./api.ts";
import { focusHeadingSoon } from "./focus.ts";
import { AccountsPage } from "./pages/accounts.tsx";
import { AdminPage } from "./pages/admin.tsx";
import { DeliveryPage } from "./pages/delivery.tsx";
import { EventPage } from "./pages/event.tsx";
import { NewSourcePage } from "./pages/new-source.tsx";
import { SourcePage } from "./pages/source.tsx";
import { SourcesPage } from "./pages/sources.tsx";
import { SubscriptionsPage } from "./pages/subscriptions.tsx";
import { WebhookPage, WebhooksPage } from "./pages/webhooks.tsx";
import { useRoute } from "./router.ts";

function pageSession(): Session | null | undefined {
  const given = document.body.dataset.session;
  if (given === undefined) return undefined;
  try {
    return JSON.parse(given) as Session | null;
  } catch {
    return undefined;
  }
}

export function App() {
  // The server puts the session into the page (data-session); asking for it is the fallback.
  const [session, setSession] = useState<Session | null | undefined>(pageSession);
  useEffect(() => {
    whenSignedOut(() => setSession(null));
    if (session !== undefined) return;
    api<{ data: Session | null }>("GET", "/console/session")
      .then((r) => setSession(r.data))
      .catch(() => setSession(null));
  }, []);
  if (session === undefined)
    return (
      <main id="main">
        <p>Loading…</p>
      </main>
    );
  if (session === null) return <SignIn onSignedIn={setSession} />;
  return <Shell session={session} onSignedOut={() => setSession(null)} />;
}

function SignIn({ onSignedIn }: { onSignedIn: (s: Session) => void }) {
  const [key, setKey] = useState("");
  const [error, setError] = useState<string | undefined>();
  const [busy, setBusy] = useState(false);
  useEffect(() => {
    document.title = "Sign in · Fount";
  }, []);
  async function submit(e: Event) {
    e.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      const r = await api<{ data: Session }>("POST", "/console/session", { api_key: key });
      setKey("");
      focusHeadingSoon();
      onSignedIn(r.data);
    } catch (err) {
      setError(err instanceof ApiError && err.status === 401 ? "That API key is not valid." : String(err));
    } finally {
      setBusy(false);
    }
  }
  return (
    <main id="main" class="signin">
      <h1>Fount</h1>
      <form onSubmit={submit} aria-describedby={error ? "signin-error" : undefined}>
        <h2 tabIndex={-1} data-page-heading>
          Sign in
        </h2>
        <label for="api-key">API key</label>
        <input
          id="api-key"
          type="password"
          autoComplete="off"
          required
          value={key}
          onInput={(e) => setKey(e.currentTarget.value)}
          aria-invalid={error ? true : undefined}
        />
        {error && (
          <p id="signin-error" role="alert" class="error">
            {error}
          </p>
        )}
        <button type="submit" disabled={busy}>
          Sign in
        </button>
      </form>
    </main>
  );
}

const nav: Array<[string, string, boolean]> = [
  ["/", "Sources", false],
  ["/webhooks", "Webhooks", false],
  ["/subscriptions", "Subscriptions", false],
  ["/accounts", "Accounts", false],
  ["/admin", "Admin", true],
];

function Shell({ session, onSignedOut }: { session: Session; onSignedOut: () => void }) {
  const route = useRoute();
  const [orgId, setOrgId] = useState<string | undefined>(undefined);
  const main = useRef<HTMLElement>(null);
  async function signOut() {
    await endSession();
    onSignedOut();
  }
  const section = `/${route.split("/")[1] ?? ""}`;
  return (
    <>
      <button type="button" class="skip" onClick={() => main.current?.focus()}>
        Skip to content
      </button>
      <header class="top">
        <span class="brand">Fount</span>
        <nav aria-label="Main">
          <ul>
            {nav
              .filter(([, , admin]) => !admin || session.user.is_admin)
              .map(([path, label]) => {
                const active =
                  path === "/"
                    ? section === "/" || section === "/sources" || section === "/new"
                    : section === path;
                return (
                  <li key={path}>
                    <a href={`#${path}`} aria-current={active ? "page" : undefined}>
                      {label}
                    </a>
                  </li>
                );
              })}
          </ul>
        </nav>
        <div class="who">
          {session.orgs.length > 0 && (
            <label>
              Acting as{" "}
              <select value={orgId ?? ""} onChange={(e) => setOrgId(e.currentTarget.value || undefined)}>
                <option value="">{session.user.username} (personal)</option>
                {session.orgs.map((o) => (
                  <option key={o.id} value={o.id}>
                    {o.name} (organization)
                  </option>
                ))}
              </select>
            </label>
          )}
          {session.orgs.length === 0 && <span>{session.user.username}</span>}
          <button type="button" onClick={signOut}>
            Sign out
          </button>
        </div>
      </header>
      <main id="main" ref={main} tabIndex={-1}>
        <Page route={route} orgId={orgId} session={session} />
      </main>
    </>
  );
}

function Page({ route, orgId, session }: { route: string; orgId: string | undefined; session: Session }) {
  const parts = route.split("/").filter(Boolean);
  const key = `${route}|${orgId ?? ""}`;
  // Every part after the first goes into an API path: an ID, a slug or an event ID, nothing else. A
  // link with `..\admin\users\…#` in it (the URL parser reads `\` as `/`) once sent the admin's
  // session to a path of the link's choosing, past the console's CSRF header.
  if (parts.slice(1).some((part) => !/^[A-Za-z0-9_-]+$/.test(part)))
    return <SourcesPage key={key} orgId={orgId} />;
  if (parts[0] === "new") return <NewSourcePage key={key} orgId={orgId} />;
  if (parts[0] === "sources" && parts[1] && parts[2] === "events" && parts[3])
    return <EventPage key={key} sourceId={parts[1]} eventId={parts[3]} />;
  if (parts[0] === "sources" && parts[1]) return <SourcePage key={key} id={parts[1]} />;
  if (parts[0] === "deliveries" && parts[1]) return <DeliveryPage key={key} id={parts[1]} />;
  if (parts[0] === "webhooks" && parts[1] && parts[2] === "deliveries" && parts[3])
    return <DeliveryPage key={key} id={parts[3]} />;
  if (parts[0] === "webhooks" && parts[1]) return <WebhookPage key={key} id={parts[1]} />;
  if (parts[0] === "webhooks") return <WebhooksPage key={key} orgId={orgId} />;
  if (parts[0] === "subscriptions") return <SubscriptionsPage key={key} orgId={orgId} />;
  if (parts[0] === "accounts") return <AccountsPage key={key} orgId={orgId} />;
  if (parts[0] === "admin" && session.user.is_admin) return <AdminPage key={key} />;
  return <SourcesPage key={key} orgId={orgId} />;
}
