/**
 * `include`/`exclude` drop top-level fields of each item in `data` (conventions.ts `filterFields`), on the
 * routes whose schema declares them, and only there. Both halves are decided per route, here: the filter
 * runs as a hook of the route itself, and a response schema that lists a field as required would make the
 * serializer throw when it is missing (a 500 for `?include=name`), so on those routes the fields of `data`
 * (an item, or each item of a list) are optional in the response schema; the schema still decides which
 * fields exist, so nothing unlisted is ever serialized. A route that does not declare them (the console's,
 * say) ignores them like any unknown parameter.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { filterFields } from "../conventions.ts";

type Obj = Record<string, unknown>;

function isObj(value: unknown): value is Obj {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** A copy of an object schema without `required`, also in each branch of allOf/anyOf/oneOf. */
function withoutRequired(schema: Obj): Obj {
  const out: Obj = { ...schema };
  delete out.required;
  for (const key of ["allOf", "anyOf", "oneOf"]) {
    const branches = out[key];
    if (Array.isArray(branches)) out[key] = branches.map((b) => (isObj(b) ? withoutRequired(b) : b));
  }
  return out;
}

function takesFilter(schema: unknown): boolean {
  const props = isObj(schema) && isObj(schema.properties) ? schema.properties : {};
  return "include" in props || "exclude" in props;
}

/**
 * Applies `include`/`exclude` from the query (GET, DELETE) or the body (POST, PUT, which merge the query
 * in). It answers through `done`, not a promise, which would cost every response a microtask turn.
 */
function applyFilter(
  request: FastifyRequest,
  _reply: FastifyReply,
  payload: unknown,
  done: (err: Error | null, payload: unknown) => void,
): void {
  const p = (request.method === "POST" || request.method === "PUT" ? request.body : request.query) as
    | { include?: unknown; exclude?: unknown }
    | undefined;
  const include = typeof p?.include === "string" ? p.include : undefined;
  const exclude = typeof p?.exclude === "string" ? p.exclude : undefined;
  done(null, filterFields(payload, include, exclude));
}

/** Applies to routes registered after it, in this context and its children. */
export function filteredResponses(app: FastifyInstance): void {
  app.addHook("onRoute", (route) => {
    const schema = route.schema as Obj | undefined;
    if (!schema || (route.config as { rawBody?: boolean } | undefined)?.rawBody) return;
    if (!takesFilter(schema.querystring) && !takesFilter(schema.body)) return;
    const own = route.preSerialization;
    route.preSerialization = [...(own === undefined ? [] : Array.isArray(own) ? own : [own]), applyFilter];
    if (!isObj(schema.response)) return;
    const response: Obj = { ...schema.response };
    for (const [status, body] of Object.entries(response)) {
      if (!status.startsWith("2") || !isObj(body) || !isObj(body.properties)) continue;
      const data = body.properties.data;
      if (!isObj(data)) continue;
      const relaxed = isObj(data.items)
        ? { ...data, items: withoutRequired(data.items) }
        : withoutRequired(data);
      response[status] = { ...body, properties: { ...body.properties, data: relaxed } };
    }
    route.schema = { ...schema, response };
  });
}
