/**
 * Source HTTP endpoints, `<FOUNT_ENDPOINT_URL>/e/{endpoint_id}[/any/path]` (or, with a host pattern,
 * `https://{endpoint_id}.hooks.example.com[/any/path]`): any method, any query, on an origin of their own
 * (src/endpoint-origin.ts). run(event) gets {method, path, query, headers, bodyRaw, body, url}, the
 * headers without Fount's own cookies and API keys. Without customResponse the answer is 200
 * {"success": true} once run finished and its emits are stored; with it, the first respond() wins and a
 * run that never responds gets 204. Either way the answer leaves once the run's commit is durable, so an
 * acknowledged event is a stored one; only `respond({ immediate: true, … })` answers at once.
 *
 * This is the hot path of ingestion, so it is served by Node's HTTP server directly (the endpoint
 * listener, http/endpoint-listener.ts; and the API's, for requests naming the endpoint host, before
 * Fastify sees them): these requests need none of the API's routing, authentication, schema
 * validation or serialization, and skipping them halves the main thread's HTTP cost per request
 * (docs/architecture.md#performance). It keeps the API's conventions: `x-request-id`, catalogue error
 * bodies, 503 and `connection: close` while shutting down, and one log line per request at `info`. Every
 * answer is `Content-Security-Policy: sandbox` (a page a source serves runs in an opaque origin) unless
 * the component opts out where that is safe, and a component's answer never sets Fount's cookies
 * (docs/isolation.md, "What a source can reach in a browser").
 */
import { randomUUID } from "node:crypto";
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from "node:http";
import type { Elsewhere, ForwardedHit, HitAnswer } from "../../domain/cluster/forwarding-protocol.ts";
import type { ForwardTarget } from "../../domain/cluster/hit-forwarding.ts";
import { LeaseMoved } from "../../domain/cluster/source-leases.ts";
import type { RunOutcome } from "../../domain/sources/runner.ts";
import {
  type EndpointHosts,
  endpointHostsFor,
  endpointPlace,
  endpointUrlOf,
  idPlaceholder,
} from "../../endpoint-origin.ts";
import { AppError } from "../../errors.ts";
import type { HttpResponse } from "../../runtime/types.ts";
import type { Services } from "../../services.ts";
import { contextText, type Span, tracing } from "../../tracing.ts";
import { unsendableAnswer } from "../answer-headers.ts";
import { bearerToken } from "../conventions.ts";
import { componentCookies, withoutFountCookies } from "../fount-cookies.ts";
import { endHitSpan, startHitSpan, type TracedHit } from "../hit-span.ts";
import { toAppError } from "../plugins/errors.ts";
import { logAnswer } from "../request-log.ts";

/** Bodies above this get 413, as on Pipedream. */
export const endpointBodyLimit = 512 * 1024;

/** The path prefix of source endpoints under a base URL (the API's origin answers it with `wrong_origin`). */
export const endpointPrefix = "/e/";

/** Every answer may be read cross-origin; the allowed methods matter to preflight answers only. */
const allowOrigin = "*";
const allowMethods = "GET,HEAD,PUT,PATCH,POST,DELETE";
/** The header names a preflight may ask for, to be allowed as asked: a comma-separated list of tokens. */
const headerList = /^[\w-]+(\s*,\s*[\w-]+)*$/;
/**
 * A page an endpoint answers runs in an opaque origin, with no script, form or pop-up: even where a
 * browser shared something with the console's origin, that page could not use it.
 */
const sandbox = "sandbox";
/** Headers of a component's answer that are the server's to set, or that no source may send. */
const refusedAnswerHeaders = new Set([
  // Framing.
  "content-length",
  "transfer-encoding",
  "connection",
  // Clears the cookies of the whole site, the console's included.
  "clear-site-data",
  // Fount's to set on every answer.
  "x-content-type-options",
  // Would let a service worker one endpoint registers control paths beyond its own `/e/<id>/`.
  "service-worker-allowed",
]);

/** A Fount API key as an `Authorization` header; it is the key's owner's to keep, never a source's to see. */
function carriesFountKey(authorization: string): boolean {
  return bearerToken(authorization)?.startsWith("fnt_") === true;
}

/**
 * The request headers a source sees and its events may store: one string per name (repeated ones joined),
 * without Fount's cookies and API keys (docs/isolation.md, "What a source can reach in a browser").
 */
function sourceHeaders(given: IncomingHttpHeaders): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const k in given) {
    const v = given[k];
    if (v !== undefined) headers[k] = Array.isArray(v) ? v.join(", ") : v;
  }
  if (headers.cookie !== undefined) {
    const cookie = withoutFountCookies(headers.cookie);
    if (cookie === undefined) delete headers.cookie;
    else headers.cookie = cookie;
  }
  if (headers.authorization !== undefined && carriesFountKey(headers.authorization))
    delete headers.authorization;
  return headers;
}

/** What an endpoint ID looks like. */
const endpointIdFormat = /^[a-z0-9]{1,64}$/;

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

/** One request to a source endpoint: from a client, or sent on by another node (domain/cluster/hit-forwarding.ts). */
interface Hit extends TracedHit {
  /** The whole body, or null once it passes the limit. */
  readBody(): Promise<Buffer | null>;
  /** The body will not be read (answered before). */
  discardBody(): void;
  /** Sent on by another node: that node, when it said (placement counts where hits come in). */
  from?: string | undefined;
  /** Aborts once a client went away unanswered: a hit still waiting for its run is dropped, not run. */
  signal?: AbortSignal;
}

export interface EndpointHandler {
  /**
   * The request listener of the endpoint listener (http/endpoint-listener.ts), and of the API's for
   * requests to the endpoint origin's host (`onEndpointOrigin`).
   */
  listener: (req: IncomingMessage, res: ServerResponse) => void;
  /** Whether a request names the endpoint origin in its Host: the API and console never answer it. */
  onEndpointOrigin: (req: IncomingMessage) => boolean;
  /** Runs a hit another node sent on, answering as to a client; `Elsewhere` when its source runs elsewhere. */
  serveForwarded: (hit: ForwardedHit) => Promise<HitAnswer | Elsewhere>;
}

/** Serves source endpoints, to clients and to the other nodes of a cluster. */
export function endpointHandler(services: Services, serving: EndpointServing): EndpointHandler {
  const { store, runner, config, logger, forwarding } = services;
  let hosts: EndpointHosts | undefined;
  /** The endpoint origin of the current settings (tests set them once the listeners are bound). */
  const origin = () => {
    hosts = endpointHostsFor(config.endpointUrl, config.publicUrl, hosts);
    return hosts;
  };
  /** The answer to a request the endpoint origin does not serve: `url` "" when its Host names no endpoint. */
  const misdirected = (url: string) =>
    url === ""
      ? new AppError(
          "not_found",
          `This host names no source endpoint (they are at ${endpointPlace(config.endpointUrl)})`,
        )
      : new AppError(
          "wrong_origin",
          `This origin serves source endpoints only (${endpointPlace(config.endpointUrl)}); the API and the console are at ${config.publicUrl}`,
        );

  /** The error answers given, with their code and message (and what was thrown), for their log line. */
  const errorAnswers = new WeakMap<HitAnswer, { code: string; message: string; err?: unknown }>();
  /**
   * Counts and logs an answer given, in one line as the API's requests are (http/request-log.ts);
   * `forwarded`: another node ran it (counted there as a hit, and a failure logged there).
   */
  const record = (hit: Hit, answer: HitAnswer, forwarded: boolean, startedAt: number) => {
    if (forwarded) services.metrics.endpointForwarded(answer.status);
    else services.metrics.endpointHit(answer.status);
    logAnswer(logger, {
      method: hit.method,
      url: hit.url,
      statusCode: answer.status,
      durationMs: performance.now() - startedAt,
      ...errorAnswers.get(answer),
      ranElsewhere: forwarded,
      fields: { reqId: answer.headers["x-request-id"], ...(hit.elsewhere ? { fromNode: true } : {}) },
    });
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
  const failure = (base: Record<string, string>, err: AppError, thrown?: unknown): HitAnswer => {
    const answer = {
      status: err.status,
      headers: { ...base, "content-type": jsonType, ...err.headers },
      body: JSON.stringify(err.toJSON()),
    };
    errorAnswers.set(answer, { code: err.code, message: err.message, ...(thrown ? { err: thrown } : {}) });
    return answer;
  };

  /**
   * Endpoint `id`'s answer as its component wrote it, but for what no source may send: framing, cookies
   * of Fount's names or none, cookies that reach past the endpoint (`componentCookie`), `Clear-Site-Data`,
   * and the sandbox (kept, beside any policy of its own, unless it opts out where safe: `scriptsMayRun`).
   */
  const componentAnswer = (base: Record<string, string>, r: HttpResponse, id: string): HitAnswer => {
    const headers: Record<string, string | string[]> = { ...base };
    // Headers of these names may come in several spellings and values; each value is a line of its own.
    const cookies: string[] = [];
    const policies: string[] = [];
    for (const [k, v] of Object.entries(r.headers)) {
      const name = k.toLowerCase();
      if (refusedAnswerHeaders.has(name)) continue;
      if (name === "set-cookie") cookies.push(...componentCookies(v, origin().cookieScope(id)));
      else if (name === "content-security-policy") policies.push(...(Array.isArray(v) ? v : [v]));
      else headers[name] = v;
    }
    if (cookies.length > 0) headers["set-cookie"] = cookies;
    const sandboxed = r.sandbox !== false || !origin().scriptsMayRun;
    if (policies.length > 0)
      headers["content-security-policy"] = sandboxed ? [...policies, sandbox] : policies;
    else if (!sandboxed) delete headers["content-security-policy"];
    let body: string | Buffer | null = null;
    if (r.body !== null) {
      body = r.bodyBase64 ? Buffer.from(r.body, "base64") : r.body;
      headers["content-type"] ??= r.bodyBase64 ? "application/octet-stream" : "text/plain; charset=utf-8";
    }
    const unsendable = unsendableAnswer(headers);
    return unsendable ? failure(base, unsendable) : { status: r.status, headers, body };
  };

  /** Runs the hit (here, or on the node that runs its source) and answers it through `reply`. */
  const serve = async (
    hit: Hit,
    base: Record<string, string>,
    reply: (answer: HitAnswer, forwarded?: boolean) => void,
    span: Span | undefined,
  ): Promise<void> => {
    if (serving.closing()) return reply(failure(base, new AppError("shutting_down")));
    if (!hit.url.startsWith(endpointPrefix)) {
      hit.discardBody();
      return reply(failure(base, misdirected(hit.url)));
    }
    const method = hit.method;
    if (method === "OPTIONS" && hit.headers["access-control-request-method"]) {
      hit.discardBody();
      // Whatever a page asks to send may be sent: no credentials are honoured here (`sourceHeaders`).
      const asked = hit.headers["access-control-request-headers"];
      return reply({
        status: 204,
        headers: {
          ...base,
          "access-control-allow-methods": allowMethods,
          ...(typeof asked === "string" && headerList.test(asked)
            ? { "access-control-allow-headers": asked }
            : {}),
        },
        body: null,
      });
    }
    const { endpointId, path, query, search } = target(hit.url, config.publicUrl);
    const source = endpointIdFormat.test(endpointId)
      ? await store.getSourceByEndpoint(endpointId)
      : undefined;
    if (!source?.active) {
      hit.discardBody();
      return reply(failure(base, new AppError("not_found", "No active source has this endpoint")));
    }
    span?.setAttribute("fount.source_id", source.id);
    const bytes = await hit.readBody();
    if (bytes === null) {
      base.connection = "close";
      return reply(failure(base, new AppError("payload_too_large")));
    }
    // Made before the hit goes on, so Fount's cookies and keys never cross to another node either.
    const headers = sourceHeaders(hit.headers);
    // Several nodes: a hit of a source another node runs goes there (domain/cluster/hit-forwarding.ts).
    // Sends the hit on to the node that runs its source (`first`, when known) and relays the answer;
    // false: it runs here.
    const sendOn = async (first?: ForwardTarget): Promise<boolean> => {
      if (!forwarding) return false;
      let sent: ForwardedHit | undefined;
      // A node that no longer runs the source says so (naming the node it went to, if it knows): tried
      // once more, then run here.
      for (let tries = 0; tries < 2; tries++) {
        const routed = tries === 0 && first ? first : forwarding.route(source.id);
        const to = routed instanceof Promise ? await routed : routed;
        if (!to) return false;
        // Made only for a hit that goes on (most hits of a node run where they came in).
        sent ??= {
          method,
          url: hit.url,
          headers: { ...headers, "x-request-id": base["x-request-id"] },
          body: bytes,
          trace: span ? contextText(span.spanContext()) : undefined,
        };
        const result = await forwarding.forward(to, sent);
        if (result === "not-sent") return false;
        if (!("elsewhere" in result)) {
          reply(result, true);
          return true;
        }
        forwarding.moved(source.id, result.elsewhere);
      }
      return false;
    };
    if (forwarding && hit.elsewhere) {
      // Sent here by a node that took this one for the source's: it goes where this node knows it runs.
      if (!forwarding.runsHere(source.id)) return hit.elsewhere(forwarding.holderOf(source.id));
    } else if (await sendOn()) return;
    forwarding?.ranHere(source.id, hit.from);
    const raw = bytes.toString("utf8");
    const event = {
      method,
      path,
      query,
      headers,
      // `body` is parsed from this by the executor (runtime/child/component/http-body.ts).
      bodyRaw: raw,
      url: `${endpointUrlOf(config.endpointUrl, endpointId)}${path === "/" ? "" : path}${search}`,
    };

    // Only a response the component marked `immediate` arrives here before the run's result (the
    // executor sends no other); every other one is held until the run's commit is durable, below.
    let responded = false;
    const runHere = async (movable: boolean) =>
      runner.invoke(
        source,
        { kind: "run", event, parseBody: true },
        {
          trigger: "http",
          // Its place in the day's quota: taken now, or (a hit that may move on) once the lease is held.
          ...(await runner.quotaOf(source, movable, bytes.length)),
          // Several nodes: the hit fails with LeaseMoved rather than take back a source this node gives away.
          movable,
          trace: span?.spanContext(),
          // Dropped, unrun, once its client left while it waits.
          signal: hit.signal,
          onRespond: (r) => {
            if (responded) return;
            responded = true;
            reply(componentAnswer(base, r, endpointId));
          },
        },
      );
    let result: RunOutcome;
    try {
      result = await runHere(forwarding !== undefined);
    } catch (err) {
      if (!(err instanceof LeaseMoved) || !forwarding) throw err;
      // While the hit waited for its turn, this node gave the source to another (domain/cluster/source-leases.ts):
      // the hit goes there, and the source stays where it runs now. Nothing ran, nor counted in the quota.
      forwarding.moved(source.id, err.to);
      if (hit.elsewhere) return hit.elsewhere(err.to);
      // Straight to that node: this one may still count as running the source until its release ends.
      if (await sendOn(forwarding.targetOf(err.to))) return;
      result = await runHere(false);
    }
    if (responded) return;
    // A run that failed after respond() committed none of its emits: the caller gets the error, never
    // an answer that would acknowledge events that were not stored.
    if (!result.ok) {
      // The caller is anonymous: the thrown message may hold secrets or internal host names, so it goes to
      // $errors only; the answer names the request, to find it there and in the server's log.
      const code = result.error?.code;
      return reply(
        failure(
          base,
          new AppError("component_error", undefined, {
            details: {
              request_id: base["x-request-id"],
              ...(code && platformFailures.has(code) ? { reason: code } : {}),
            },
          }),
        ),
      );
    }
    if (result.response) return reply(componentAnswer(base, result.response, endpointId));
    if (result.customResponse) return reply({ status: 204, headers: base, body: null });
    base["content-type"] = jsonType;
    reply({ status: 200, headers: base, body: successBody });
  };

  /** Serves `hit`, answering through `send` once; a failure becomes its catalogue error. */
  const run = (hit: Hit, requestId: string | string[] | undefined, send: (answer: HitAnswer) => void) => {
    const base: Record<string, string> = {
      "access-control-allow-origin": allowOrigin,
      "content-security-policy": sandbox,
      "x-content-type-options": "nosniff",
      "x-request-id":
        typeof requestId === "string" && /^[\w.-]{1,128}$/.test(requestId) ? requestId : randomUUID(),
    };
    let answered = false;
    const startedAt = performance.now();
    const span = tracing.on ? startHitSpan(hit) : undefined;
    const reply = (answer: HitAnswer, forwarded = false) => {
      if (answered) return;
      answered = true;
      send(answer);
      record(hit, answer, forwarded, startedAt);
      if (span) endHitSpan(span, answer.status, errorAnswers.get(answer)?.code);
    };
    serve(hit, base, reply, span).catch((err: unknown) => {
      // Catalogue errors, and a lost store (503 with Retry-After, logged once when it was found lost);
      // what was thrown is logged with the answer's line when it is a failure of Fount's own.
      const known = toAppError(err);
      // The body may not have been read (the store failed before): drained, the connection stays usable.
      hit.discardBody();
      reply(failure(base, known, known.status >= 500 ? err : undefined));
    });
  };

  /** `/e/{id}` then the path: with a host pattern, the endpoint ID comes from the Host ("" when none). */
  const targetOf = (req: IncomingMessage): string => {
    const url = req.url ?? "/";
    if (!config.endpointUrl.includes(idPlaceholder)) return url;
    const id = origin().match(req.headers.host);
    if (id === undefined || !endpointIdFormat.test(id)) return "";
    if (url.startsWith("/")) return `${endpointPrefix}${id}${url}`;
    // An absolute request target (`http://host/path?q`, meant for proxies) names its path after the host.
    const parsed = URL.parse(url);
    return `${endpointPrefix}${id}${parsed ? parsed.pathname + parsed.search : "/"}`;
  };

  return {
    onEndpointOrigin: (req) => origin().match(req.headers.host) !== undefined,
    listener: (req, res) => {
      const gone = new AbortController();
      res.once("close", () => res.writableFinished || gone.abort());
      const hit: Hit = {
        method: req.method ?? "GET",
        url: targetOf(req),
        headers: req.headers,
        readBody: () => readBody(req),
        discardBody: () => req.resume(),
        elsewhere: undefined,
        signal: gone.signal,
      };
      run(hit, req.headers["x-request-id"], (answer) => {
        if (res.headersSent || res.destroyed) return;
        const headers = answer.headers;
        if (serving.closing()) headers.connection = "close";
        if (answer.body !== null) headers["content-length"] = String(Buffer.byteLength(answer.body));
        res.writeHead(answer.status, headers);
        res.end(answer.body ?? undefined);
      });
    },
    serveForwarded: ({ body, ...sent }) => {
      // Read before the promise: a throw in its executor would be its rejection, not the caller's error.
      const requestId = sent.headers["x-request-id"];
      const readBody = async () => (body.length > endpointBodyLimit ? null : body);
      return new Promise((resolve) => {
        const elsewhere = (to: string | undefined) => resolve({ elsewhere: to });
        run({ ...sent, readBody, discardBody: () => undefined, elsewhere }, requestId, resolve);
      });
    },
  };
}
