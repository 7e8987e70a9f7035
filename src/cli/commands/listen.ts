/**
 * `fount listen`, like `stripe listen`: a local receiver for webhook deliveries. It starts an HTTP server,
 * creates a webhook pointing at it and a subscription of your sources (or one), prints each delivery as it
 * arrives with its Standard Webhooks signature checked, optionally passes it on (`--forward-to`), and
 * deletes the webhook (and so the subscription) when stopped; one stopped outright leaves its webhook, which
 * the next `fount listen` on the machine removes.
 *
 * The delivery guard refuses loopback and private destinations, so the webhook asks for `allow_private`,
 * which the server grants to admin keys only; with another key, a server that would refuse the receiver's
 * address is reported at once instead of failing every delivery.
 */
import http from "node:http";
import { isIP } from "node:net";
import os from "node:os";
import { isPublicAddress } from "../../delivery/address-guard.ts";
import { verifySignature } from "../../delivery/signature.ts";
import { ApiError } from "../client.ts";
import { CliError, type Command, type Context, UsageError } from "../command.ts";
import { formatJson, printable } from "../output.ts";
import { resolveSource } from "../resolve.ts";
import { untilInterrupted } from "../sse.ts";
import { printWarnings, type Warning } from "./webhooks.ts";

/** Bytes of a delivery body read at most; the server sends one event's JSON. */
const maxBodyBytes = 8 * 1024 * 1024;
/** How long a forward may take before the delivery is answered 504 (the server then retries it). */
const forwardTimeoutMs = 30_000;

/** One delivery as received, as printed under `--json`. */
interface Received {
  id: string;
  timestamp: number;
  emitter_id: string | undefined;
  event_name: string | undefined;
  event_id: string | undefined;
  verified: boolean;
  event: unknown;
  forwarded?: { url: string; status: number | null; error?: string };
}

/** Whether a URL's host is one the delivery guard refuses unless allowed (decided without DNS). */
function isLocalHost(url: URL): boolean {
  const host = url.hostname.replace(/^\[|\]$/g, "").toLowerCase();
  if (host === "localhost" || host.endsWith(".localhost")) return true;
  return isIP(host) !== 0 && !isPublicAddress(host);
}

function readBody(req: http.IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (c: Buffer) => {
      size += c.length;
      if (size > maxBodyBytes) req.destroy(new Error("body too large"));
      else chunks.push(c);
    });
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
}

const header = (req: http.IncomingMessage, name: string) => {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
};

/** Passes a delivery on with its body and signature headers; the answer's status, or the failure. */
async function forward(
  url: string,
  req: http.IncomingMessage,
  body: string,
): Promise<{ status: number | null; error?: string }> {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(req.headers))
    if (typeof value === "string" && /^(content-type|user-agent|webhook-|x-fount-)/.test(name))
      headers[name] = value;
  try {
    const res = await fetch(url, {
      method: "POST",
      headers,
      body,
      signal: AbortSignal.timeout(forwardTimeoutMs),
    });
    await res.arrayBuffer();
    return { status: res.status };
  } catch (err) {
    const e = err as Error & { cause?: { code?: string } };
    return { status: null, error: e.cause?.code ?? e.message };
  }
}

/** A verified delivery for people: its time, ID, source and channel, then the event on one line. */
function formatReceived(ctx: Context, r: Received): string {
  const p = ctx.paint;
  const channel = r.event_name && r.event_name !== "default" ? p("cyan", `[${printable(r.event_name)}]`) : "";
  const head = [
    p("dim", new Date(r.timestamp * 1000).toISOString()),
    p("dim", printable(r.id)),
    printable(`from ${r.emitter_id ?? "?"}`),
    channel,
    p("green", "✔ signature verified"),
  ]
    .filter(Boolean)
    .join("  ");
  const lines = [head, `  ${printable(JSON.stringify(r.event) ?? "null")}`];
  if (r.forwarded) {
    const f = r.forwarded;
    const outcome =
      f.status === null
        ? p("red", `failed: ${printable(f.error ?? "")}`)
        : p(f.status < 300 ? "green" : "yellow", `answered ${f.status}`);
    lines.push(`  → ${printable(f.url)} ${outcome}`);
  }
  return lines.join("\n");
}

/**
 * A request whose signature does not check, as one line: anyone who reaches the receiver can send one,
 * so what it claims (its body, its time) is not shown, and its headers only as escaped text.
 */
function formatUnverified(ctx: Context, r: Received, bytes: number): string {
  const p = ctx.paint;
  return [
    p("dim", new Date().toISOString()),
    p("red", "✘ signature NOT verified:"),
    printable(`a request claiming ID ${r.id || "(none)"} from ${r.emitter_id ?? "?"}`),
    p("dim", `(${bytes} bytes, not shown; answered 401)`),
  ].join("  ");
}

/** The receiver's server, listening; its port. */
function listenOn(server: http.Server, host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve((server.address() as { port: number }).port);
    });
  });
}

const listen: Command = {
  name: "listen",
  summary: "Receive your sources' events as signed webhook deliveries here, verified as they arrive",
  usage:
    "[<dc_…|name>] [--event-name <name>] [--forward-to <url>] [--port <n>] [--host <address>] [--public-url <url>]",
  args: { min: 0, max: 1 },
  options: {
    "event-name": {
      type: "string",
      value: "name",
      description: "Channel to receive: default (the default), $errors, $logs or a custom name",
    },
    "forward-to": {
      type: "string",
      value: "url",
      description: "Also POST each delivery, body and signature headers as received, to this URL",
    },
    port: { type: "string", value: "n", description: "Port of the local receiver (default: any free one)" },
    host: {
      type: "string",
      value: "address",
      description: "Address the receiver listens on (default 127.0.0.1)",
    },
    "public-url": {
      type: "string",
      value: "url",
      description:
        "URL the server delivers to, when it reaches the receiver another way (a tunnel, a LAN address)",
    },
  },
  description: [
    "Starts a receiver on this machine, creates a webhook pointing at it and a subscription of the",
    "source's channel (without a source: every source of yours, dc_*), and prints each delivery as it",
    "arrives, its signature checked against the webhook's signing secret. Ctrl-C deletes the webhook",
    "and its subscription.",
    "",
    "A server refuses to deliver to loopback and private addresses unless an admin allows the webhook",
    "(this command asks for it; admin keys only) or the operator allows the address",
    "(FOUNT_WEBHOOK_ALLOW_HOSTS). With --forward-to, the receiver answers the server with the status",
    "that URL answered (502 when it cannot be reached), so failed forwards are retried.",
    "",
    "Examples:",
    "  fount listen",
    "  fount listen my-source --event-name '$errors'",
    "  fount listen --forward-to http://localhost:3000/webhooks",
  ].join("\n"),
  async run(ctx) {
    const rawPort = ctx.string("port") ?? "0";
    const port = Number(rawPort);
    if (!Number.isInteger(port) || port < 0 || port > 65535)
      throw new UsageError(`--port must be a port number, not "${rawPort}"`, ctx.command.name);
    const host = ctx.string("host") ?? "127.0.0.1";
    const forwardTo = ctx.string("forward-to");
    for (const name of ["forward-to", "public-url"]) {
      const value = ctx.string(name);
      if (value !== undefined && !/^https?:\/\/[^/]/i.test(value))
        throw new UsageError(`--${name} must be an http(s) URL, not "${value}"`, ctx.command.name);
    }
    const channel = ctx.string("event-name");
    const client = ctx.client();
    const source = ctx.args[0] === undefined ? undefined : await resolveSource(client, ctx.args[0]);
    const emitter = source?.id ?? "dc_*";
    const what = source ? `${source.name_slug} (${source.id})` : "your sources";

    let secret = "";
    const stop = untilInterrupted();
    const server = http.createServer(async (req, res) => {
      // Deliveries are POSTs; anything else (a later `fount listen` checking this receiver is alive) is not printed.
      if (req.method !== "POST") return void res.writeHead(405, { allow: "POST" }).end();
      try {
        const body = await readBody(req);
        const id = header(req, "webhook-id") ?? "";
        const timestamp = header(req, "webhook-timestamp") ?? "";
        const verified =
          secret !== "" &&
          verifySignature(secret, id, timestamp, body, header(req, "webhook-signature") ?? "");
        let event: unknown = body;
        try {
          event = JSON.parse(body);
        } catch {
          // Not JSON: shown as the text it is.
        }
        const received: Received = {
          id,
          timestamp: Number(timestamp) || Math.floor(Date.now() / 1000),
          emitter_id: header(req, "x-fount-emitter-id"),
          event_name: header(req, "x-fount-event-name"),
          event_id: header(req, "x-fount-event-id"),
          verified,
          event,
        };
        let status = verified ? 200 : 401;
        if (verified && forwardTo !== undefined) {
          const f = await forward(forwardTo, req, body);
          received.forwarded = { url: forwardTo, ...f };
          status = f.status === null ? 502 : f.status;
        }
        if (ctx.json) ctx.print(formatJson(received, 0));
        else
          ctx.print(
            verified
              ? formatReceived(ctx, received)
              : formatUnverified(ctx, received, Buffer.byteLength(body)),
          );
        res.writeHead(status, { "content-type": "text/plain" }).end(verified ? "ok\n" : "bad signature\n");
      } catch {
        if (!res.headersSent) res.writeHead(400).end();
      }
    });
    let webhookId: string | undefined;
    try {
      const bound = await listenOn(server, host, port);
      const urlHost =
        isIP(host) === 6 ? `[${host}]` : host === "0.0.0.0" || host === "::" ? "127.0.0.1" : host;
      const url = ctx.string("public-url") ?? `http://${urlHost}:${bound}/`;
      await removeAbandoned(ctx);
      const hook = await createWebhook(ctx, url, what);
      webhookId = hook.id;
      secret = hook.secret;
      await client.post("/v1/subscriptions", {
        emitter_id: emitter,
        listener_id: hook.id,
        event_name: channel,
      });
      const on = channel ? `the ${channel} channel of ` : "";
      ctx.note(printable(`Webhook ${hook.id} → ${url}; signing secret ${hook.secret}`));
      ctx.note(
        printable(
          `Ready: printing each delivery of ${on}${what} as it arrives, signature checked${forwardTo ? `, and forwarding it to ${forwardTo}` : ""}. Ctrl-C stops and deletes the webhook.`,
        ),
      );
      if (!stop.signal.aborted)
        await new Promise((resolve) => stop.signal.addEventListener("abort", resolve, { once: true }));
    } finally {
      stop.dispose();
      server.closeAllConnections();
      server.close();
      if (webhookId !== undefined) {
        await client.delete(`/v1/webhooks/${webhookId}`).then(
          () => ctx.note(printable(`Deleted webhook ${webhookId} and its subscription.`)),
          (err: Error) =>
            ctx.note(
              printable(
                `Could not delete webhook ${webhookId}: ${err.message}; \`fount webhook delete ${webhookId} --yes\` does it.`,
              ),
            ),
        );
      }
    }
    return 0;
  },
};

/** The name of a receiver's webhook: how a later `fount listen` on this machine recognises it. */
const webhookName = () => `fount listen on ${os.hostname()}`;

/** Whether nothing listens at a local receiver's URL any more (its connection is refused). */
function refused(url: string): Promise<boolean> {
  return new Promise((resolve) => {
    const req = http.request(url, { method: "HEAD", timeout: 2000 }, (res) => {
      res.resume();
      resolve(false);
    });
    req.on("timeout", () => req.destroy());
    req.on("error", (err: NodeJS.ErrnoException) => resolve(err.code === "ECONNREFUSED"));
    req.end();
  });
}

/**
 * A `fount listen` stopped outright (killed, or its terminal closed) could not delete its webhook, which
 * then fails every delivery. The next one on the same machine removes such webhooks: named as this
 * machine's receivers, pointing at a local address where nothing listens any more. A receiver still
 * running (in another terminal) answers, and keeps its webhook.
 */
async function removeAbandoned(ctx: Context): Promise<void> {
  const client = ctx.client();
  const hooks = await client.listAll<{ id: string; name: string; url: string }>("/v1/users/me/webhooks");
  for (const hook of hooks) {
    if (hook.name !== webhookName() || !URL.canParse(hook.url) || !isLocalHost(new URL(hook.url))) continue;
    if (!(await refused(hook.url))) continue;
    await client.delete(`/v1/webhooks/${hook.id}`).then(
      () =>
        ctx.note(
          printable(
            `Deleted webhook ${hook.id} of an earlier \`fount listen\` that was stopped outright (nothing answers at ${hook.url}).`,
          ),
        ),
      () => {},
    );
  }
}

/**
 * Creates the receiver's webhook, asking that it may reach a local address; without an admin key, it is
 * created without, and a server that will refuse the address is an error rather than a silent failure.
 */
async function createWebhook(
  ctx: Context,
  url: string,
  what: string,
): Promise<{ id: string; secret: string }> {
  const client = ctx.client();
  const body = {
    url,
    name: webhookName(),
    description: `Deliveries of ${what} to a \`fount listen\` receiver (deleted when it stops)`,
  };
  type Created = { data: { id: string; signing_secret: string }; warnings?: Warning[] };
  let res: Created;
  try {
    res = await client.post<Created>("/v1/webhooks", {
      ...body,
      allow_private: isLocalHost(new URL(url)) || undefined,
    });
  } catch (err) {
    if (!(err instanceof ApiError && err.code === "forbidden")) throw err;
    res = await client.post<Created>("/v1/webhooks", body);
  }
  if (res.warnings?.some((w) => w.code === "destination_refused")) {
    await client.delete(`/v1/webhooks/${res.data.id}`);
    printWarnings(ctx, res.warnings);
    throw new CliError(
      `The server will not deliver to ${url}, and only an admin key may allow a webhook to: use an admin's key, ask the operator to allow the address (FOUNT_WEBHOOK_ALLOW_HOSTS), or give --public-url with an address the server may reach`,
      "destination_refused",
    );
  }
  printWarnings(ctx, res.warnings);
  return { id: res.data.id, secret: res.data.signing_secret };
}

export const listenCommands: Command[] = [listen];
