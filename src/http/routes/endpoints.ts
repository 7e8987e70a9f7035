/**
 * Source HTTP endpoints, `PUBLIC_URL/e/{endpoint_id}[/any/path]`: any method, any query. run(event) gets
 * {method, path, query, headers, bodyRaw, body, url}. Without customResponse the answer is 200
 * {"success": true} once run finished and its emits are stored; with it, the first respond() wins and a
 * run that never responds gets 204. Either way the answer leaves once the run's commit is durable, so an
 * acknowledged event is a stored one; only `respond({ immediate: true, … })` answers at once.
 *
 * This is the hot path of ingestion, so it is served by Node's HTTP server directly (app.ts routes
 * `/e/` here before Fastify): these requests need none of the API's routing, authentication, schema
 * validation or serialization, and skipping them halves the main thread's HTTP cost per request
 * (docs/architecture.md#performance). It keeps the API's conventions: `x-request-id`, catalogue error
 * bodies, 503 and `connection: close` while shutting down, and one log line per request at `info`.
 */
import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { AppError } from "../../errors.ts";
import type { HttpResponse } from "../../runtime/types.ts";
import type { Services } from "../../services.ts";
import { toAppError } from "../plugins/errors.ts";

/** Bodies above this get 413, as on Pipedream. */
export const endpointBodyLimit = 512 * 1024;

/** The path prefix of source endpoints; requests under it never reach Fastify. */
export const endpointPrefix = "/e/";

/** Every answer may be read cross-origin; the allowed methods matter to preflight answers only. */
const allowOrigin = "*";
const allowMethods = "GET,HEAD,PUT,PATCH,POST,DELETE";

/** `/e/{id}` with no sub-path and no query: the usual request, split without a URL parser. */
const plainEndpointPath = /^\/e\/([a-z0-9]{1,64})\/?$/;

/** Endpoint ID, sub-path, query and search string of a request target. */
function target(
  rawUrl: string,
  base: string,
): { endpointId: string; path: string; query: Record<string, string>; search: string } {
  const plain = plainEndpointPath.exec(rawUrl);
  if (plain) return { endpointId: plain[1]!, path: "/", query: {}, search: "" };
  const url = new URL(rawUrl, base);
  const rest = url.pathname.slice(endpointPrefix.length);
  const slash = rest.indexOf("/");
  const query: Record<string, string> = {};
  for (const [k, v] of url.searchParams) query[k] = v;
  return {
    endpointId: slash === -1 ? rest : rest.slice(0, slash),
    path: slash === -1 || slash === rest.length - 1 ? "/" : rest.slice(slash),
    query,
    search: url.search,
  };
}

const jsonType = "application/json; charset=utf-8";
/** The answer of a run that stored its emits, without customResponse. */
const successBody = '{"success":true}';

/** Levels at which Fastify logs each request; endpoint requests are logged at the same ones. */
const requestLogLevels = new Set(["trace", "debug", "info"]);

/** Reads the whole body, or answers null once it exceeds the limit (declared or counted). */
function readBody(req: IncomingMessage): Promise<Buffer | null> {
  const declared = Number(req.headers["content-length"]);
  if (declared > endpointBodyLimit) return Promise.resolve(null);
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size > endpointBodyLimit) {
        req.removeAllListeners("data");
        req.resume();
        resolve(null);
      } else chunks.push(chunk);
    });
    req.once("end", () => resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)));
    // A client that goes away mid-body has nobody to answer; the source does not run.
    const cutOff = () => reject(new AppError("invalid_parameter", "The request body was cut off"));
    req.once("error", cutOff);
    req.once("close", () => {
      if (!req.complete) cutOff();
    });
  });
}

export interface EndpointServing {
  /** True from the start of shutdown: requests get 503 and connections close after their answer. */
  closing(): boolean;
}

/** The request listener for `/e/…` paths. */
export function endpointHandler(
  services: Services,
  serving: EndpointServing,
): (req: IncomingMessage, res: ServerResponse) => void {
  const { store, runner, config, logger } = services;

  const finish = (
    req: IncomingMessage,
    res: ServerResponse,
    status: number,
    headers: Record<string, string>,
    body: string | Buffer | null,
  ) => {
    if (res.headersSent || res.destroyed) return;
    if (serving.closing()) headers.connection = "close";
    if (body !== null) headers["content-length"] = String(Buffer.byteLength(body));
    res.writeHead(status, headers);
    res.end(body ?? undefined);
    services.metrics.endpointHit(status);
    if (requestLogLevels.has(logger.level)) {
      logger.info(
        {
          reqId: headers["x-request-id"],
          req: { method: req.method, url: req.url },
          res: { statusCode: status },
        },
        "request completed",
      );
    }
  };

  /** Failures of Fount's own making (limits, crashes), named in the answer; a component's own codes are not. */
  const platformFailures = new Set([
    "timeout",
    "out_of_memory",
    "scratch_full",
    "executor_crash",
    "executor_stopped",
    "process_exit",
  ]);

  const fail = (
    req: IncomingMessage,
    res: ServerResponse,
    base: Record<string, string>,
    err: AppError | { status: number; code: string; error: string },
  ) => {
    const headers = { ...base, "content-type": jsonType };
    if (err instanceof AppError) {
      Object.assign(headers, err.headers);
      finish(req, res, err.status, headers, JSON.stringify(err.toJSON()));
    } else {
      finish(req, res, err.status, headers, JSON.stringify({ error: err.error, code: err.code }));
    }
  };

  const sendComponentResponse = (
    req: IncomingMessage,
    res: ServerResponse,
    base: Record<string, string>,
    r: HttpResponse,
  ) => {
    const headers = { ...base };
    for (const [k, v] of Object.entries(r.headers)) {
      // Framing headers are the server's to set.
      if (!/^(content-length|transfer-encoding|connection)$/i.test(k)) headers[k.toLowerCase()] = v;
    }
    let body: string | Buffer | null = null;
    if (r.body !== null) {
      body = r.bodyBase64 ? Buffer.from(r.body, "base64") : r.body;
      headers["content-type"] ??= r.bodyBase64 ? "application/octet-stream" : "text/plain; charset=utf-8";
    }
    finish(req, res, r.status, headers, body);
  };

  const handle = async (req: IncomingMessage, res: ServerResponse, base: Record<string, string>) => {
    if (serving.closing()) return fail(req, res, base, new AppError("shutting_down"));
    const method = req.method ?? "GET";
    if (method === "OPTIONS" && req.headers["access-control-request-method"]) {
      req.resume();
      return finish(req, res, 204, { ...base, "access-control-allow-methods": allowMethods }, null);
    }
    const { endpointId, path, query, search } = target(req.url ?? "/", config.publicUrl);
    const source = /^[a-z0-9]{1,64}$/.test(endpointId)
      ? await store.getSourceByEndpoint(endpointId)
      : undefined;
    if (!source?.active) {
      req.resume();
      return fail(req, res, base, new AppError("not_found", "No active source has this endpoint"));
    }
    const bytes = await readBody(req);
    if (bytes === null) {
      base.connection = "close";
      return fail(req, res, base, new AppError("payload_too_large"));
    }
    const raw = bytes.toString("utf8");
    const headers: Record<string, string> = {};
    const given = req.headers;
    for (const k in given) {
      const v = given[k];
      if (v !== undefined) headers[k] = Array.isArray(v) ? v.join(", ") : v;
    }
    const event = {
      method,
      path,
      query,
      headers,
      // `body` is parsed from this by the executor (runtime/child/http-body.ts).
      bodyRaw: raw,
      url: `${config.publicUrl}${endpointPrefix}${endpointId}${path === "/" ? "" : path}${search}`,
    };

    // Only a response the component marked `immediate` arrives here before the run's result (the
    // executor sends no other); every other one is held until the run's commit is durable, below.
    let responded = false;
    const hold = await runner.checkQuota(source);
    const result = await runner.invoke(
      source,
      { kind: "run", event, parseBody: true },
      {
        trigger: "http",
        hold,
        onRespond: (r) => {
          if (responded) return;
          responded = true;
          sendComponentResponse(req, res, base, r);
        },
      },
    );
    if (responded) return;
    // A run that failed after respond() committed none of its emits: the caller gets the error, never
    // an answer that would acknowledge events that were not stored.
    if (!result.ok) {
      // The caller is anonymous: the thrown message may hold secrets or internal host names, so it goes to
      // $errors only; the answer names the request, to find it there and in the server's log.
      const code = result.error?.code;
      return fail(
        req,
        res,
        base,
        new AppError("component_error", undefined, {
          details: {
            request_id: base["x-request-id"],
            ...(code && platformFailures.has(code) ? { reason: code } : {}),
          },
        }),
      );
    }
    if (result.response) return sendComponentResponse(req, res, base, result.response);
    if (result.customResponse) return finish(req, res, 204, base, null);
    base["content-type"] = jsonType;
    finish(req, res, 200, base, successBody);
  };

  return (req, res) => {
    const given = req.headers["x-request-id"];
    const base: Record<string, string> = {
      "access-control-allow-origin": allowOrigin,
      "x-request-id": typeof given === "string" && /^[\w.-]{1,128}$/.test(given) ? given : randomUUID(),
    };
    handle(req, res, base).catch((err: unknown) => {
      // Catalogue errors, and a lost store (503 with Retry-After, logged once when it was found lost).
      const known = toAppError(err);
      if (known.code === "internal") logger.error({ err, reqId: base["x-request-id"] }, "request failed");
      // The body may not have been read (the store failed before): drained, the connection stays usable.
      req.resume();
      fail(req, res, base, known);
    });
  };
}
