/**
 * Source HTTP endpoints, `PUBLIC_URL/e/{endpoint_id}[/any/path]`: any method, any query. run(event) gets
 * {method, path, query, headers, bodyRaw, body, url}. Without customResponse the answer is 200
 * {"success": true} once run finished and its emits are stored; with it, the first respond() wins and a
 * run that never responds gets 204.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { AppError } from "../../errors.ts";
import type { HttpResponse } from "../../runtime/types.ts";
import { sendError } from "../plugins/errors.ts";

/** Bodies above this get 413, as on Pipedream. */
export const endpointBodyLimit = 512 * 1024;

const corsHeaders = {
  "access-control-allow-origin": "*",
  "access-control-allow-methods": "GET,HEAD,PUT,PATCH,POST,DELETE",
};

function parseBody(raw: string, contentType: string): unknown {
  if (raw === "") return undefined;
  if (/\bjson\b/i.test(contentType)) {
    try {
      return JSON.parse(raw);
    } catch {
      return raw;
    }
  }
  if (/application\/x-www-form-urlencoded/i.test(contentType)) {
    const out: Record<string, string | string[]> = {};
    for (const [k, v] of new URLSearchParams(raw)) {
      const prev = out[k];
      out[k] = prev === undefined ? v : Array.isArray(prev) ? [...prev, v] : [prev, v];
    }
    return out;
  }
  return raw;
}

function sendComponentResponse(reply: FastifyReply, r: HttpResponse): FastifyReply {
  reply.code(r.status);
  for (const [k, v] of Object.entries(r.headers)) {
    // Framing headers are the server's to set.
    if (!/^(content-length|transfer-encoding|connection)$/i.test(k)) reply.header(k, v);
  }
  if (r.body === null) return reply.send();
  return reply.send(r.bodyBase64 ? Buffer.from(r.body, "base64") : r.body);
}

export async function endpointRoutes(app: FastifyInstance): Promise<void> {
  const { store, runner } = app.fount;
  // Any content type is accepted here, kept as raw bytes (the app-wide query merge leaves Buffers alone).
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("*", { parseAs: "buffer", bodyLimit: endpointBodyLimit }, (_req, body, done) => {
    done(null, body);
  });

  const handler = async (request: FastifyRequest, reply: FastifyReply) => {
    reply.headers(corsHeaders);
    const { endpoint_id } = request.params as { endpoint_id: string };
    if (request.method === "OPTIONS" && request.headers["access-control-request-method"]) {
      return reply.code(204).send();
    }
    const source = /^[a-z0-9]{1,64}$/.test(endpoint_id)
      ? await store.getSourceByEndpoint(endpoint_id)
      : undefined;
    if (!source?.active)
      return sendError(reply, new AppError("not_found", "No active source has this endpoint"));

    const url = new URL(request.url, app.fount.config.publicUrl);
    const prefix = `/e/${endpoint_id}`;
    const path = url.pathname.slice(url.pathname.indexOf(prefix) + prefix.length) || "/";
    const raw = Buffer.isBuffer(request.body) ? request.body.toString("utf8") : "";
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(request.headers)) {
      if (v !== undefined) headers[k.toLowerCase()] = Array.isArray(v) ? v.join(", ") : v;
    }
    const query: Record<string, string> = {};
    for (const [k, v] of url.searchParams) query[k] = v;
    const event = {
      method: request.method,
      path,
      query,
      headers,
      bodyRaw: raw,
      body: parseBody(raw, headers["content-type"] ?? ""),
      url: `${app.fount.config.publicUrl}${prefix}${path === "/" ? "" : path}${url.search}`,
    };

    let responded = false;
    const hold = await runner.checkQuota(source);
    const outcome = runner.invoke(
      source,
      { kind: "run", event },
      {
        trigger: "http",
        hold,
        onRespond: (r) => {
          if (responded || reply.sent) return;
          responded = true;
          sendComponentResponse(reply, r);
        },
      },
    );
    const result = await outcome;
    if (responded || reply.sent) return reply;
    if (result.response) return sendComponentResponse(reply, result.response);
    if (!result.ok) {
      return reply.code(500).send({
        error: result.error?.message ?? "The source failed",
        code: result.error?.code ?? "component_error",
      });
    }
    const http = (await app.fount.catalog.load(source.componentId)).record.meta.props.find(
      (p) => p.type === "$.interface.http",
    );
    if (http?.customResponse) return reply.code(204).send();
    return reply.code(200).send({ success: true });
  };

  const config = { public: true, rawBody: true };
  const schema = { hide: true };
  app.all("/e/:endpoint_id", { config, schema }, handler);
  app.all("/e/:endpoint_id/*", { config, schema }, handler);
}
