/**
 * Answers the requests component code sends to https://api.pipedream.com (Pipedream's app files
 * hard-code it; runtime/child/realm/pipedream-api.ts routes them here over the executor's IPC) with this
 * server's own API, through Fastify's `inject`: the same routes, hooks, authentication, rate limit and
 * body limit as for any client, with the credentials the component sent and nothing more.
 */
import type { FastifyInstance, InjectOptions } from "fastify";
import type { ComponentApiHandler } from "../runtime/types.ts";

/** Connection-level headers of the injected answer; the realm's own server sets its own. */
const hopByHop = new Set(["connection", "keep-alive", "transfer-encoding"]);
/** Methods whose request always has a body (length 0 when empty), as an HTTP client sends them. */
const bodyMethods = new Set(["POST", "PUT", "PATCH"]);

export function componentApiHandler(app: Pick<FastifyInstance, "inject">): ComponentApiHandler {
  return async (request, caller) => {
    const body = Buffer.from(request.body, "base64");
    const res = await app.inject({
      method: request.method as InjectOptions["method"],
      url: request.url,
      // The answer crosses a local IPC channel, not a network: compressing it would only cost CPU.
      headers: { ...request.headers, "accept-encoding": "identity" },
      ...(body.length > 0 || bodyMethods.has(request.method) ? { payload: body } : {}),
      // What the auth throttle counts wrong keys by: an account's executors are one client to it, so a
      // component guessing keys is throttled without touching other accounts or outside clients.
      remoteAddress: `executor:${caller.ownerId}`,
    });
    const headers: Record<string, string | string[]> = {};
    for (const [name, value] of Object.entries(res.headers)) {
      if (value === undefined || hopByHop.has(name)) continue;
      headers[name] = Array.isArray(value) ? value.map(String) : String(value);
    }
    return { status: res.statusCode, headers, body: res.rawPayload.toString("base64") };
  };
}
