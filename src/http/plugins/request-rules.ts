/**
 * Request rules every API route shares that the root context does not enforce yet: JSON bodies are
 * validated without type coercion (`{"name": 123}` is a 400, not the string "123"), a body that is not
 * `application/json` is a 415 (Fastify parses `text/plain` by default), and `org_id` names an
 * organization of the caller on every route, also on those that do not otherwise use it.
 */
import { Ajv, type Options } from "ajv";
import addFormats from "ajv-formats";
import fastUri from "fast-uri";
import type { FastifyInstance, FastifySchemaCompiler } from "fastify";
import { actingOwner, params } from "../conventions.ts";
import type { RouteSchemas } from "../schema-compilers.ts";

// Same options as the root's Ajv (app.ts); only `coerceTypes` differs between the two instances.
const shared: Options = {
  removeAdditional: false,
  useDefaults: true,
  // allErrors would let one request make Ajv do unbounded work; the first error is enough to answer.
  allErrors: false,
  uriResolver: fastUri,
  addUsedSchema: false,
};
// Query strings and path parameters are text, so they are converted to the schema's types; JSON bodies
// already carry types, so a mismatch there is the client's mistake. Query values merged into a POST body
// are converted before validation (app/json-bodies.ts `coerceQueryValue`).
const bodies = addFormats.default(new Ajv({ ...shared, coerceTypes: false }));
const texts = addFormats.default(new Ajv({ ...shared, coerceTypes: "array" }));
// Query strings drop parameters their route does not know: clients written for Pipedream send `limit`
// and `after` to every route. A known parameter with a bad value is still a 400.
const queries = addFormats.default(new Ajv({ ...shared, coerceTypes: "array", removeAdditional: true }));

/** The API's validators, each compiled at its route's first use (`schemas`). */
function validatorCompiler(schemas: RouteSchemas): FastifySchemaCompiler<object> {
  return ({ schema, httpPart }) => schemas.validator(() => compiledValidator(schema, httpPart));
}

function compiledValidator(schema: object, httpPart: string | undefined) {
  if (httpPart === "body") return bodies.compile(schema);
  const validate = (httpPart === "querystring" ? queries : texts).compile(schema);
  // Ajv converts "1e400" to Infinity and lets it pass `integer` and `maximum`; no parameter means that.
  const checked = (data: unknown) => {
    const ok = validate(data);
    checked.errors = validate.errors;
    if (!ok || !data || typeof data !== "object") return ok;
    for (const [key, value] of Object.entries(data)) {
      if (typeof value === "number" && !Number.isFinite(value)) {
        checked.errors = [
          {
            keyword: "type",
            instancePath: `/${key}`,
            schemaPath: "#/type",
            params: { type: "number" },
            message: "must be a finite number",
          },
        ];
        return false;
      }
    }
    return true;
  };
  checked.errors = validate.errors;
  return checked;
}

/** Applies the rules to an encapsulated context (a route plugin, or the `/v1` scope). */
export function applyRequestRules(app: FastifyInstance): void {
  app.setValidatorCompiler(validatorCompiler(app.routeSchemas));
  app.removeContentTypeParser("text/plain");
  // Unknown and foreign organizations are both 404, so an org ID's existence does not leak.
  app.addHook("preHandler", (request, _reply, done) => {
    const orgId = request.principal ? params<{ org_id?: unknown } | undefined>(request)?.org_id : undefined;
    try {
      if (typeof orgId === "string") actingOwner(request, orgId);
    } catch (err) {
      done(err as Error);
      return;
    }
    done();
  });
}
