/**
 * Characters of request input that no store can keep as text. The NUL character (U+0000): PostgreSQL's
 * text refuses it, so an identifier, a name or a URL holding one failed deep in a store operation (a 500
 * on PostgreSQL, stored on SQLite), and no field of the API needs it. An unpaired surrogate (`\ud800` in
 * a JSON body; a query string or a path cannot carry one, as they are decoded as UTF-8): no UTF-8 text
 * holds it, PostgreSQL's jsonb refuses its escape (a `where` of the event search holding one was a 500),
 * and a text column would keep U+FFFD in its place. Every string of the path, the query and the body is
 * therefore refused with a 400 naming the field if it holds either, before the route runs, on every
 * route and both drivers alike. The exception is a body field that takes any JSON value (an event's
 * payload, as `event` of `POST /v1/sources/{id}/run`): it is stored as JSON, where U+0000 is written
 * `\u0000` and an unpaired surrogate `\ud800`, so it is kept and read back as sent.
 */
import type { FastifyInstance, FastifyRequest } from "fastify";
import { invalidParameter } from "../../errors.ts";

type Obj = Record<string, unknown>;

/** A field holding a character no store keeps as text, and which. */
interface Found {
  field: string;
  what: "nul" | "surrogate";
}

const refusals: Record<Found["what"], string> = {
  nul: "the NUL character (U+0000)",
  surrogate: "an unpaired surrogate (U+D800 to U+DFFF without its pair)",
};

/** Refuses U+0000 and unpaired surrogates in the input of routes registered after it, in this context and its children. */
export function refuseNulCharacters(app: FastifyInstance): void {
  app.addHook("preValidation", (request, _reply, done) => {
    const found = badField(request.params, "") ?? badField(request.query, "") ?? bodyBadField(request);
    done(
      found === undefined
        ? undefined
        : invalidParameter(found.field, `${found.field} must not contain ${refusals[found.what]}`),
    );
  });
}

/** Which character of `text` no store keeps as text, if any. */
function badText(text: string): Found["what"] | undefined {
  if (text.includes("\0")) return "nul";
  return text.isWellFormed() ? undefined : "surrogate";
}

/** The body's first field holding such a character, leaving out the fields whose schema takes any JSON value. */
function bodyBadField(request: FastifyRequest): Found | undefined {
  const body = request.body;
  if (body === undefined || body === null || Buffer.isBuffer(body)) return undefined;
  if (typeof body !== "object" || Array.isArray(body)) return badField(body, "");
  const schema = request.routeOptions.schema?.body as { properties?: Record<string, Obj> } | undefined;
  for (const [key, value] of Object.entries(body as Obj)) {
    const property = schema?.properties?.[key];
    if (property && takesAnyValue(property)) continue;
    const inKey = badText(key);
    if (inKey) return { field: printable(key), what: inKey };
    const found = badField(value, key);
    if (found !== undefined) return found;
  }
  return undefined;
}

/** A schema that says nothing of its value's type (TypeBox `Unknown`): any JSON value. */
function takesAnyValue(schema: Obj): boolean {
  return !["type", "anyOf", "oneOf", "allOf", "enum", "const", "$ref", "not"].some((k) => k in schema);
}

/**
 * Where in `value` a string or a property name holds U+0000 or an unpaired surrogate, as a field path
 * (`a.b[2]`, `path` its own); undefined when nowhere. Bodies are bounded in depth before they are parsed
 * (app/json-bodies.ts).
 */
function badField(value: unknown, path: string): Found | undefined {
  if (typeof value === "string") {
    const what = badText(value);
    return what ? { field: path || "value", what } : undefined;
  }
  if (typeof value !== "object" || value === null) return undefined;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = badField(value[i], `${path}[${i}]`);
      if (found !== undefined) return found;
    }
    return undefined;
  }
  for (const [key, item] of Object.entries(value)) {
    const at = path ? `${path}.${printable(key)}` : printable(key);
    const inKey = badText(key);
    if (inKey) return { field: at, what: inKey };
    const found = badField(item, at);
    if (found !== undefined) return found;
  }
  return undefined;
}

/** A property name as an error message can show it: U+0000 and unpaired surrogates as `\uXXXX`. */
function printable(key: string): string {
  if (badText(key) === undefined) return key;
  return key
    .replaceAll("\0", "\\u0000")
    .replace(
      /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g,
      (c) => `\\u${c.charCodeAt(0).toString(16)}`,
    );
}
