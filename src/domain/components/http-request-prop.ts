/**
 * `http_request` props: Pipedream's request builder. The configured value is the object Pipedream's
 * UI stores (`@pipedream/types` `DefaultHttpRequestPropConfig`): `{url, method, headers, params, body,
 * auth, tab}`, with headers and params as `[{name, value}]` lists and the body as `{mode, contentType,
 * fields, raw}`. This checks it at deploy, stores it with its credentials sealed, and shows them masked.
 */
import { AppError } from "../../errors.ts";
import type { PropMeta } from "../../runtime/types.ts";
import { isSealed, type Sealer, secretMask } from "./sealed-values.ts";

type Obj = Record<string, unknown>;

const methods = new Set(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]);
/** RFC 9110 token characters: what fetch accepts as a header name. */
const headerName = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** Fields of `auth` that hold credentials, sealed in the store like secret props. */
const credentialFields = ["password", "token"] as const;

function isObject(value: unknown): value is Obj {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function invalid(prop: string, message: string): AppError {
  return new AppError("props_invalid", message, { details: { prop } });
}

/**
 * A `[{name, value}]` list; an object `{name: value}` is taken too (scripts write that). Blank rows, which
 * a form leaves behind, are dropped.
 */
function fieldList(
  prop: string,
  label: string,
  raw: unknown,
  names?: RegExp,
): Array<{ name: string; value: string }> {
  if (raw === undefined || raw === null) return [];
  const entries = Array.isArray(raw)
    ? raw
    : isObject(raw)
      ? Object.entries(raw).map(([name, value]) => ({ name, value }))
      : null;
  if (!entries) throw invalid(prop, `${prop}.${label} must be a list of {name, value}`);
  const out: Array<{ name: string; value: string }> = [];
  entries.forEach((entry, i) => {
    if (!isObject(entry)) throw invalid(prop, `${prop}.${label}[${i}] must be an object {name, value}`);
    const { name, value } = entry;
    if (typeof name !== "string") throw invalid(prop, `${prop}.${label}[${i}].name must be a string`);
    if (value !== undefined && value !== null && !["string", "number", "boolean"].includes(typeof value)) {
      throw invalid(prop, `${prop}.${label}[${i}].value must be a string`);
    }
    const text = value === undefined || value === null ? "" : String(value);
    if (name === "" && text === "") return;
    if (name === "") throw invalid(prop, `${prop}.${label}[${i}] has a value but no name`);
    if (names && !names.test(name))
      throw invalid(prop, `${prop}.${label}[${i}]: ${JSON.stringify(name)} is not a valid header name`);
    if (/[\r\n\0]/.test(text)) throw invalid(prop, `${prop}.${label}[${i}].value may not hold line breaks`);
    out.push({ name, value: text });
  });
  return out;
}

function parseBody(prop: string, raw: unknown): Obj | undefined {
  if (raw === undefined || raw === null) return undefined;
  if (!isObject(raw)) throw invalid(prop, `${prop}.body must be an object {mode, contentType, fields, raw}`);
  const body: Obj = { ...raw };
  for (const key of ["mode", "type"] as const) {
    if (body[key] === undefined || body[key] === null) delete body[key];
    else if (body[key] !== "fields" && body[key] !== "raw")
      throw invalid(prop, `${prop}.body.${key} must be "fields" or "raw"`);
  }
  if (body.contentType !== undefined && typeof body.contentType !== "string")
    throw invalid(prop, `${prop}.body.contentType must be a string`);
  if (body.fields !== undefined) body.fields = fieldList(prop, "body.fields", body.fields);
  // A JSON body written as an object rather than as text is sent as its JSON.
  if (isObject(body.raw) || Array.isArray(body.raw)) body.raw = JSON.stringify(body.raw);
  if (body.raw !== undefined && body.raw !== null && typeof body.raw !== "string")
    throw invalid(prop, `${prop}.body.raw must be a string`);
  return body;
}

function parseAuth(prop: string, raw: unknown, previous: unknown, sealer: Sealer): Obj | undefined {
  if (raw === undefined || raw === null) return undefined;
  if (!isObject(raw)) throw invalid(prop, `${prop}.auth must be an object {type, username, password, token}`);
  const auth: Obj = { ...raw };
  const type =
    auth.type ?? (auth.token !== undefined ? "bearer" : auth.username !== undefined ? "basic" : "none");
  if (type !== "basic" && type !== "bearer" && type !== "none")
    throw invalid(prop, `${prop}.auth.type must be "basic", "bearer" or "none"`);
  auth.type = type;
  const kept = isObject(previous) && isObject(previous.auth) ? previous.auth : {};
  for (const key of ["username", ...credentialFields] as const) {
    const v = auth[key];
    // The stored form, carried over by an update that gives no props, keeps its sealed credential.
    const carried = isSealed(v) && isSealed(kept[key]) && v.$sealed === kept[key].$sealed;
    if (v !== undefined && v !== null && typeof v !== "string" && !carried)
      throw invalid(prop, `${prop}.auth.${key} must be a string`);
  }
  if (type === "basic" && !auth.username) throw invalid(prop, `${prop}.auth of type basic needs a username`);
  if (type === "bearer" && !auth.token) throw invalid(prop, `${prop}.auth of type bearer needs a token`);
  for (const key of credentialFields) {
    const value = auth[key];
    if (typeof value !== "string" || value === "") continue;
    // The mask sent back unchanged (a form round-tripping a GET) keeps the stored credential.
    if (value === secretMask && isSealed(kept[key])) auth[key] = kept[key];
    else auth[key] = { $sealed: sealer.seal(value) };
  }
  return auth;
}

/**
 * Checks a configured `http_request` value and returns its stored form. Keys the prop's `default`
 * has and the value lacks are taken from the default (`{method: "POST"}` makes a POST), and a bare
 * string is taken as the URL. Keys Fount does not know are kept as given.
 */
export function parseHttpRequest(p: PropMeta, value: unknown, previous: unknown, sealer: Sealer): Obj {
  const given = typeof value === "string" ? { url: value } : value;
  if (!isObject(given)) {
    throw invalid(p.name, `${p.name} must be an object {url, method, headers, params, body, auth}`);
  }
  const merged: Obj = { ...(isObject(p.default) ? p.default : {}), ...given };
  if (typeof merged.url !== "string" || merged.url.trim() === "")
    throw invalid(p.name, `${p.name}.url is required`);
  let url: URL;
  try {
    url = new URL(merged.url.trim());
  } catch {
    throw invalid(p.name, `${p.name}.url is not a URL: ${JSON.stringify(merged.url)}`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:")
    throw invalid(p.name, `${p.name}.url must be an http or https URL`);
  const method = merged.method ?? "GET";
  if (typeof method !== "string" || !methods.has(method.toUpperCase())) {
    throw new AppError("props_invalid", `${p.name}.method must be one of ${[...methods].join(", ")}`, {
      details: { prop: p.name, allowed: [...methods] },
    });
  }
  const out: Obj = {
    ...merged,
    url: merged.url.trim(),
    method: method.toUpperCase(),
    headers: fieldList(p.name, "headers", merged.headers, headerName),
    params: fieldList(p.name, "params", merged.params),
  };
  const body = parseBody(p.name, merged.body);
  if (body) out.body = body;
  else delete out.body;
  const auth = parseAuth(p.name, merged.auth, previous, sealer);
  if (auth) out.auth = auth;
  else delete out.auth;
  return out;
}

/** Applies `f` to each sealed credential of a stored value; the rest is copied as it is. */
function mapCredentials(stored: unknown, f: (sealed: string) => string): unknown {
  if (!isObject(stored) || !isObject(stored.auth)) return stored;
  const auth: Obj = { ...stored.auth };
  for (const key of credentialFields) {
    const v = auth[key];
    if (isSealed(v)) auth[key] = f(v.$sealed);
  }
  return { ...stored, auth };
}

/** The stored value as the API shows it: credentials masked. */
export function maskHttpRequest(stored: unknown): unknown {
  return mapCredentials(stored, () => secretMask);
}

/** The stored value as the component gets it: credentials opened. */
export function openHttpRequest(stored: unknown, sealer: Sealer): unknown {
  return mapCredentials(stored, (sealed) => sealer.open(sealed));
}
