/**
 * Crash safety of the outbox: the real server (`src/main.ts`) takes a few hundred concurrent endpoint
 * hits, is killed with SIGKILL in the middle of them, and is started again on the same data directory.
 * Every emit that was acknowledged (200) must then be in its source's event_summaries, and must reach the
 * webhook receiver at least once; duplicates are allowed (at-least-once) and counted.
 *
 * The sources answer in every way a source can: with the default answer, through `http.respond()`
 * (`customResponse`, including the registry's own `http-new-requests`), and half of them cold, so that
 * their first hits load the component into a fresh executor.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { freePort, unmountScratchUnder } from "../helpers.ts";
import { allReceived, type FountChild, startFount } from "./fount-process.ts";

const apiKey = "fnt_crashtestkey00000000000000000000";
const hitsPerSource = 75; // 600 in all, each source within its 100-event window
const killAfterAcks = 60;
/** Bounds only a hang: the machine may be loaded by other work. */
const deliveryWaitMs = 180_000;
/**
 * Emits the posted body after 3 ms, so a source's 75 hits take at least 225 ms one after another and the
 * kill (after 60 acknowledgements in all) always lands mid-load: with an instant component, the server
 * could answer all 600 before the kill arrived.
 */
const slowHookSourceCode = `export default {
  name: "Slow hook source",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  async run(event) {
    await new Promise((resolve) => setTimeout(resolve, 3));
    this.$emit(event.body ?? null, { summary: "hit" });
  },
};`;

/**
 * Answers through `http.respond()` and then goes on working for a moment, as a component that replies
 * first and then calls an API does: an answer that left before the run's commit would be lost to the kill.
 */
const respondFirstSourceCode = `export default {
  name: "Respond-first source",
  version: "0.0.1",
  props: { http: { type: "$.interface.http", customResponse: true } },
  async run(event) {
    await new Promise((resolve) => setTimeout(resolve, 3));
    this.$emit(event.body ?? null, { summary: "hit" });
    this.http.respond({ status: 200, body: { received: true } });
    await new Promise((resolve) => setTimeout(resolve, 20));
  },
};`;

/** How each source is deployed; `cold` ones are deployed before a restart, so their first hit loads them. */
const kinds: Array<{ kind: string; cold: boolean; deploy: Record<string, unknown> }> = [];
for (const cold of [true, false]) {
  kinds.push(
    { kind: "default answer", cold, deploy: { component_code: slowHookSourceCode } },
    { kind: "default answer", cold, deploy: { component_code: slowHookSourceCode } },
    { kind: "respond() then work", cold, deploy: { component_code: respondFirstSourceCode } },
    {
      kind: "registry http-new-requests",
      cold,
      deploy: { key: "http-new-requests", configured_props: { emitBodyOnly: true } },
    },
  );
}
const sources = kinds.length;

const dataDir = mkdtempSync(path.join(os.tmpdir(), "fount-crash-"));
after(() => {
  unmountScratchUnder(dataDir);
  rmSync(dataDir, { recursive: true, force: true });
});

/** Starts the server on the test's data directory and its fixed ports. */
function startOn(port: number, endpointPort: number): Promise<FountChild> {
  return startFount({
    FOUNT_DATA_DIR: dataDir,
    PORT: String(port),
    // Fixed: the endpoint URLs the test keeps must stay valid across restarts.
    FOUNT_ENDPOINT_PORT: String(endpointPort),
    FOUNT_BOOTSTRAP_API_KEY: apiKey,
  });
}

test("every acknowledged emit survives a SIGKILL mid-load and is delivered at least once", {
  timeout: 600_000,
}, async (t) => {
  const received = new Map<string, number>();
  const receiver = http.createServer((req, res) => {
    let body = "";
    req.on("data", (c) => {
      body += c;
    });
    req.on("end", () => {
      const key = JSON.parse(body).key as string;
      received.set(key, (received.get(key) ?? 0) + 1);
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
  t.after(() => new Promise((resolve) => receiver.close(resolve)));
  const receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/in`;

  const port = await freePort();
  const endpointPort = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const api = async (method: string, p: string, body?: unknown) => {
    const res = await fetch(base + p, {
      method,
      headers: { authorization: `Bearer ${apiKey}`, ...(body ? { "content-type": "application/json" } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    const json = (await res.json()) as any;
    assert.ok(res.ok, `${method} ${p}: ${JSON.stringify(json)}`);
    return json;
  };

  const log = (m: string) => process.env.CRASH_DEBUG && console.error(`[crash ${Date.now() - t0}] ${m}`);
  const t0 = Date.now();
  let fount = await startOn(port, endpointPort);
  log("started");
  const deployed: Array<{ id: string; endpoint: string }> = [];
  const deployAll = async (cold: boolean) => {
    for (const [i, k] of kinds.entries()) {
      if (k.cold !== cold) continue;
      const s = (await api("POST", "/v1/sources", { ...k.deploy, name: `crash-${i}` })).data;
      deployed[i] = { id: s.id, endpoint: s.endpoint_url };
    }
  };
  await deployAll(true);
  const hook = (await api("POST", "/v1/webhooks", { url: receiverUrl })).data;
  await api("POST", "/v1/subscriptions", { emitter_id: "dc_*", listener_id: hook.id });
  // A restart leaves the sources deployed so far unloaded: their first hits start and load them.
  fount.child.kill("SIGTERM");
  await fount.exited;
  fount = await startOn(port, endpointPort);
  await deployAll(false);
  log("deployed");

  // Fire every hit at once; kill the server once some of them have been acknowledged.
  const acknowledged = new Set<string>();
  let killed = false;
  const started = Date.now();
  const hits = [];
  for (let n = 0; n < hitsPerSource; n++) {
    for (const [i, s] of deployed.entries()) {
      const key = `s${i}-${n}`;
      hits.push(
        fetch(s.endpoint, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ key }),
        })
          .then(async (res) => {
            await res.arrayBuffer();
            if (res.status !== 200) return;
            acknowledged.add(key);
            if (!killed && acknowledged.size >= killAfterAcks) {
              killed = true;
              fount.child.kill("SIGKILL");
            }
          })
          .catch(() => undefined),
      );
    }
  }
  log("fired");
  await Promise.all(hits);
  log(`hits done ${acknowledged.size}`);
  assert.ok(killed, `the server was killed mid-load (only ${acknowledged.size} acknowledged)`);
  const acked = [...acknowledged];
  assert.ok(acked.length < hitsPerSource * sources, "some hits were cut off by the kill");
  await fount.exited;

  fount = await startOn(port, endpointPort);
  log("restarted");
  // Which acknowledged events were not stored, by kind of source: the clearest account of a failure.
  const lost = new Map<string, { acked: number; lost: number }>();
  for (const [i, s] of deployed.entries()) {
    const page = await api("GET", `/v1/sources/${s.id}/event_summaries?limit=100&expand=event`);
    const stored = new Set(page.data.map((e: any) => e.event.key));
    const mine = acked.filter((k) => k.startsWith(`s${i}-`));
    const label = `${kinds[i]!.kind}${kinds[i]!.cold ? " (cold)" : ""}`;
    const tally = lost.get(label) ?? { acked: 0, lost: 0 };
    tally.acked += mine.length;
    tally.lost += mine.filter((key) => !stored.has(key)).length;
    lost.set(label, tally);
  }
  const summary = [...lost].map(([label, n]) => `${label}: ${n.lost} of ${n.acked} lost`).join("; ");
  t.diagnostic(summary);
  assert.ok(
    [...lost.values()].every((n) => n.lost === 0),
    `acknowledged events are stored events: ${summary}`,
  );

  const duplicates = await allReceived(acked, received, deliveryWaitMs, "events");
  t.diagnostic(
    `${acked.length} of ${hitsPerSource * sources} hits acknowledged before the kill; ` +
      `${received.size} distinct events delivered, ${duplicates} more than once; ${Date.now() - started} ms`,
  );
  fount.child.kill("SIGTERM");
  await fount.exited;
});
