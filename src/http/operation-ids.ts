/**
 * The `operationId` of every operation in `/openapi.json`, in one place: derived from the method and the
 * route's path (`GET /v1/sources/:id/events` is `listSourceEvents`), with the few that a rule reads badly
 * named here. Code generators name their methods after these, so a route keeps its ID when its file is
 * edited; a test checks that every operation has one and that no two share it.
 */

/** Names the derivation gets wrong or reads badly, by `METHOD /path` as registered. */
const named: Record<string, string> = {
  "GET /healthz": "checkLiveness",
  "GET /readyz": "checkReadiness",
  "GET /v1/users/me": "getCurrentUser",
  "POST /v1/admin/orgs/:org_id/members": "addOrgMember",
  "DELETE /v1/admin/orgs/:org_id/members": "removeOrgMember",
  "POST /v1/admin/registry": "publishRegistryComponent",
  "DELETE /v1/admin/keys/:key_id": "revokeKey",
  "DELETE /v1/subscriptions": "deleteSubscriptions",
  "GET /v1/components/registry": "listRegistryComponents",
  "GET /v1/components/registry/:key": "getRegistryComponent",
  "GET /v1/components/search": "searchComponents",
  "POST /v1/components/:key/props/reload": "reloadComponentProps",
  "POST /v1/components/:key/props/:prop/options": "listComponentPropOptions",
  "POST /v1/sources/:id/run": "runSource",
  "DELETE /v1/sources/:id/events": "deleteSourceEvents",
  "GET /v1/sources/:id/events/export": "exportSourceEvents",
  "POST /v1/webhooks/:id/redeliver": "redeliverFailedWebhookDeliveries",
  "POST /v1/webhooks/:id/deliveries/:delivery_id/redeliver": "redeliverWebhookDelivery",
  "POST /v1/workflows/:id/emits": "recordWorkflowEmit",
  "POST /v1/workflows/:id/errors": "recordWorkflowError",
  "GET /v1/workflows/:id/$errors/event_summaries": "listWorkflowErrors",
  "GET /sources/:id/sse": "streamSourceEvents",
  "GET /sse/dc/:id/emits": "streamSourceEmits",
  "GET /sse/dc/:id/observations": "streamSourceObservations",
};

const verbs: Record<string, string> = { POST: "create", PUT: "update", PATCH: "update", DELETE: "delete" };

function pascal(segment: string): string {
  return segment
    .replace(/^\$/, "")
    .split(/[_-]/)
    .filter(Boolean)
    .map((word) => word[0]!.toUpperCase() + word.slice(1))
    .join("");
}

function singular(noun: string): string {
  if (noun.endsWith("ies")) return `${noun.slice(0, -3)}y`;
  return noun.endsWith("s") ? noun.slice(0, -1) : noun;
}

/**
 * The operation's ID: `named` first; otherwise a verb (GET: `get` an item or `list` a collection;
 * POST `create`, PUT `update`, DELETE `delete`) and the path's nouns, singular before a parameter and for
 * what a POST, PUT or DELETE acts on, with `/users/me` read as `My`, `/v1` and `/admin` left out.
 */
export function operationId(method: string, url: string): string {
  const given = named[`${method} ${url}`];
  if (given) return given;
  const parts = url.split("/").filter((p) => p !== "" && p !== "v1" && p !== "admin");
  const nouns: string[] = [];
  let endsWithParam = false;
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i]!;
    endsWithParam = part.startsWith(":");
    if (endsWithParam) continue;
    if (part === "users" && parts[i + 1] === "me") {
      nouns.push("My");
      i++;
      continue;
    }
    const next = parts[i + 1];
    const one = next?.startsWith(":") || (method !== "GET" && next === undefined);
    nouns.push(pascal(one ? singular(part) : part));
  }
  const verb = verbs[method] ?? (endsWithParam ? "get" : "list");
  return verb + nouns.join("");
}
