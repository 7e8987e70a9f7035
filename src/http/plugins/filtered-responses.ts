/**
 * `include`/`exclude` may drop any top-level field of each item in `data` (conventions.ts `filterFields`),
 * but a response schema that lists a field as required makes the serializer throw when it is missing: a
 * 500 for `?include=name` on such a route. On routes that take `include` or `exclude`, the fields of
 * `data` (an item, or each item of a list) are therefore optional in the response schema; the schema
 * still decides which fields exist, so nothing unlisted is ever serialized.
 */
import type { FastifyInstance } from "fastify";

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

/** Applies to routes registered after it, in this context and its children. */
export function relaxFilteredResponses(app: FastifyInstance): void {
  app.addHook("onRoute", (route) => {
    const schema = route.schema as Obj | undefined;
    if (!schema || !isObj(schema.response)) return;
    if (!takesFilter(schema.querystring) && !takesFilter(schema.body)) return;
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
