/**
 * Crash safety of the outbox's batched bookkeeping, on both drivers: the real server (`src/main.ts`)
 * takes a stream of endpoint hits whose events go to a webhook, and is killed with SIGKILL while
 * deliveries are being routed in group commits, claimed at routing, sent, and settled in bulk (a
 * group commit's settlements are one statement, held to its COMMIT). Started again on the same store
 * and node name, it must deliver every acknowledged emit at least once; duplicates (sent before the
 * kill, their settlement lost with it) are allowed and counted.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { freePorts, unmountScratchUnder } from "../helpers.ts";
import { dropSchema, freshSchema, schemaUrl } from "../pg-schemas.ts";
import { allReceived, type FountChild, startFount } from "./fount-process.ts";

const apiKey = "fnt_outboxcrashkey000000000000000000";
/** Hits at most (the kill comes long before); the check is on the receiver, not the source's last 100 events. */
const hits = 6_000;
const concurrency = 32;
/** Killed once this many emits were acknowledged and this many deliveries received. */
const killAfterAcks = 400;
const killAfterDeliveries = 50;
const receiverDelayMs = 40;
/** Bounds only a hang: the machine may be loaded by other work. */
const deliveryWaitMs = 240_000;

const sourceCode = `export default {
  name: "Outbox crash source",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  async run(event) {
    this.$emit(event.body ?? null, { summary: "hit" });
  },
};`;

/** Starts the server on `env`'s store, under the same node name every time. */
function startOn(env: Record<string, string>): Promise<FountChild> {
  return startFount({
    ...env,
    FOUNT_BOOTSTRAP_API_KEY: apiKey,
    // The same name after the restart: the new run releases what the killed one had claimed at once,
    // rather than after the claims' lease (45 s).
    FOUNT_NODE_ID: "outbox-crash",
  });
}

for (const driver of ["sqlite", "postgres"] as const) {
  test(`${driver}: every acknowledged emit is delivered at least once after a SIGKILL amid batched deliveries`, {
    timeout: 600_000,
  }, async (t) => {
    const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-outbox-crash-"));
    const schema = freshSchema("fount_outbox_crash");
    t.after(async () => {
      unmountScratchUnder(dataDir);
      rmSync(dataDir, { recursive: true, force: true });
      if (driver === "postgres") await dropSchema(schema);
    });
    const received = new Map<string, number>();
    const receiver = http.createServer((req, res) => {
      let body = "";
      req.on("data", (c) => {
        body += c;
      });
      req.on("end", () => {
        const key = JSON.parse(body).key as string;
        received.set(key, (received.get(key) ?? 0) + 1);
        // A slow receiver: deliveries fall behind the emits, so that the kill finds many claimed and
        // queued ones, not only settlements in flight.
        setTimeout(() => res.writeHead(204).end(), receiverDelayMs);
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
    t.after(() => new Promise((resolve) => receiver.close(resolve)));
    const receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/in`;

    const [port, endpointPort] = await freePorts(2);
    const env: Record<string, string> = {
      PORT: String(port),
      // Fixed: the endpoint URL stays valid across the restart.
      FOUNT_ENDPOINT_PORT: String(endpointPort),
      FOUNT_DATA_DIR: dataDir,
      ...(driver === "postgres" ? { DATABASE_URL: schemaUrl(schema) } : {}),
    };
    const base = `http://127.0.0.1:${port}`;
    const api = async (method: string, p: string, body?: unknown) => {
      const res = await fetch(base + p, {
        method,
        headers: {
          authorization: `Bearer ${apiKey}`,
          ...(body ? { "content-type": "application/json" } : {}),
        },
        body: body ? JSON.stringify(body) : undefined,
      });
      const json = (await res.json()) as any;
      assert.ok(res.ok, `${method} ${p}: ${JSON.stringify(json)}`);
      return json;
    };

    let fount = await startOn(env);
    const source = (await api("POST", "/v1/sources", { component_code: sourceCode, name: "outbox-crash" }))
      .data;
    const hook = (await api("POST", "/v1/webhooks", { url: receiverUrl })).data;
    await api("POST", "/v1/subscriptions", { emitter_id: source.id, listener_id: hook.id });

    // `concurrency` clients send the hits one after another; the kill lands while deliveries flow.
    const acknowledged = new Set<string>();
    let killed = false;
    let next = 0;
    const client = async () => {
      while (next < hits && !killed) {
        const key = `k${next++}`;
        try {
          const res = await fetch(source.endpoint_url, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ key }),
          });
          await res.arrayBuffer();
          if (res.status === 200) acknowledged.add(key);
        } catch {
          // Cut off by the kill: not acknowledged.
        }
        if (!killed && acknowledged.size >= killAfterAcks && received.size >= killAfterDeliveries) {
          killed = true;
          fount.child.kill("SIGKILL");
        }
      }
    };
    await Promise.all(Array.from({ length: concurrency }, client));
    assert.ok(killed, `the server was killed mid-load (${acknowledged.size} acknowledged)`);
    await fount.exited;
    const deliveredBeforeKill = received.size;
    const acked = [...acknowledged];

    fount = await startOn(env);
    const duplicates = await allReceived(acked, received, deliveryWaitMs, "emits");
    t.diagnostic(
      `${driver}: ${acked.length} acknowledged before the kill, ${deliveredBeforeKill} delivered by then; ` +
        `${received.size} distinct events delivered in all, ${duplicates} more than once`,
    );
    fount.child.kill("SIGTERM");
    await fount.exited;
  });
}
