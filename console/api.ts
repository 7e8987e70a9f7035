/**
 * The console's API client: same-origin fetch with the session cookie (never a key in page scripts),
 * the console header that state-changing cookie requests need, and errors with the field they concern.
 */

/** An error answer of the API: its message, stable code and the field or prop it concerns, if any. */
export class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  readonly field: string | undefined;
  /** The answer's `details` (for example `line` and `column` of a build error). */
  readonly details: Record<string, unknown>;

  constructor(
    status: number,
    code: string,
    message: string,
    field: string | undefined,
    details: Record<string, unknown> = {},
  ) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field;
    this.details = details;
  }
}

/** Called when an API call finds the session gone (expired or signed out elsewhere). */
let onSignedOut: () => void = () => undefined;
export function whenSignedOut(handler: () => void): void {
  onSignedOut = handler;
}

/** The API calls under way, which signing out cancels. */
const underWay = new Set<AbortController>();
/** From the start of a sign-out to the next sign-in: the pages being left send nothing more. */
let signingOut = false;
const signedOut = () => new ApiError(401, "signed_out", "Signed out.", undefined);

/**
 * Ends the session. What the pages still have under way is cancelled first, and they start nothing
 * more: a call that reached the server after the session had ended would be refused with a 401 (and
 * the browser would log it) for the page that is going away.
 */
export async function endSession(): Promise<void> {
  signingOut = true;
  for (const call of underWay) call.abort();
  await api("DELETE", "/console/session").catch(() => undefined);
}

export async function api<T = any>(method: string, path: string, body?: unknown): Promise<T> {
  const sessionCall = path.startsWith("/console/session");
  if (signingOut && !sessionCall) throw signedOut();
  const headers: Record<string, string> = { "x-fount-console": "1", accept: "application/json" };
  if (body !== undefined) headers["content-type"] = "application/json";
  const call = new AbortController();
  underWay.add(call);
  let res: Response;
  try {
    res = await fetch(path, {
      method,
      headers,
      credentials: "same-origin",
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: call.signal,
    });
  } catch (err) {
    throw call.signal.aborted ? signedOut() : err;
  } finally {
    underWay.delete(call);
  }
  if (sessionCall && method === "POST" && res.ok) signingOut = false;
  const text = await res.text();
  let parsed: any;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = undefined;
  }
  if (!res.ok) {
    const details = parsed?.details ?? {};
    const field = typeof details.field === "string" ? details.field : details.prop;
    if (res.status === 401 && !sessionCall) onSignedOut();
    throw new ApiError(res.status, parsed?.code ?? "error", parsed?.error ?? res.statusText, field, details);
  }
  return parsed as T;
}

/** Adds `org_id` to a path when acting for an organization. */
export function withOrg(path: string, orgId: string | undefined): string {
  if (!orgId) return path;
  return `${path}${path.includes("?") ? "&" : "?"}org_id=${encodeURIComponent(orgId)}`;
}

/** The signed-in user as the session endpoint gives it. */
export interface Session {
  user: { id: string; username: string; email: string; is_admin: boolean };
  orgs: Array<{ id: string; orgname: string; name: string }>;
}

export function formatTime(value: number | null | undefined, unit: "s" | "ms" = "s"): string {
  if (value === null || value === undefined) return "—";
  const d = new Date(unit === "s" ? value * 1000 : value);
  return d.toISOString().replace("T", " ").slice(0, 19);
}
