/**
 * The NUL character (U+0000) in request input. PostgreSQL's text refuses it, so an identifier, a name or
 * a URL holding one failed deep in a store operation (a 500 on PostgreSQL, stored on SQLite), and no
 * field of the API needs it. Every string of the path, the query and the body is therefore refused with
 * a 400 naming the field, before the route runs, on every route and both drivers alike. The exception is
 * a body field that takes any JSON value (an event's payload, as `event` of `POST /v1/sources/{id}/run`):
 * it is stored as JSON, where U+0000 is written `\u0000`, so it is kept and read back as sent.
 */
import type { FastifyInstance, FastifyRequest } from "fastify";
import { invalidParameter } from "../../errors.ts";

type Obj = Record<string, unknown>;

/** Refuses U+0000 in the input of routes registered after it, in this context and its children. */
export function refuseNulCharacters(app: FastifyInstance): void {
  app.addHook("preValidation", (request, _reply, done) => {
    const field = nulField(request.params, "") ?? nulField(request.query, "") ?? bodyNulField(request);
    done(
      field === undefined
        ? undefined
        : invalidParameter(field, `${field} must not contain the NUL character (U+0000)`),
    );
  });
}

/** The body's first field holding U+0000, leaving out the fields whose schema takes any JSON value. */
function bodyNulField(request: FastifyRequest): string | undefined {
  const body = request.body;
  if (body === undefined || body === null || Buffer.isBuffer(body)) return undefined;
  if (typeof body !== "object" || Array.isArray(body)) return nulField(body, "");
  const schema = request.routeOptions.schema?.body as { properties?: Record<string, Obj> } | undefined;
  for (const [key, value] of Object.entries(body as Obj)) {
    const property = schema?.properties?.[key];
    if (property && takesAnyValue(property)) continue;
    if (key.includes("\0")) return printable(key);
    const found = nulField(value, key);
    if (found !== undefined) return found;
  }
  return undefined;
}

/** A schema that says nothing of its value's type (TypeBox `Unknown`): any JSON value. */
function takesAnyValue(schema: Obj): boolean {
  return !["type", "anyOf", "oneOf", "allOf", "enum", "const", "$ref", "not"].some((k) => k in schema);
}

/**
 * Where in `value` a string or a property name holds U+0000, as a field path (`a.b[2]`, `path` its
 * own); undefined when nowhere. Bodies are bounded in depth before they are parsed (app/json-bodies.ts).
 */
function nulField(value: unknown, path: string): string | undefined {
  if (typeof value === "string") return value.includes("\0") ? path || "value" : undefined;
  if (typeof value !== "object" || value === null) return undefined;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = nulField(value[i], `${path}[${i}]`);
      if (found !== undefined) return found;
    }
    return undefined;
  }
  for (const [key, item] of Object.entries(value)) {
    const at = path ? `${path}.${printable(key)}` : printable(key);
    if (key.includes("\0")) return at;
    const found = nulField(item, at);
    if (found !== undefined) return found;
  }
  return undefined;
}

/** A property name as an error message can show it. */
function printable(key: string): string {
  return key.replaceAll("\0", "\\u0000");
}
