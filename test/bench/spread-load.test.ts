/**
 * The bench's load spread over several servers (the nodes of a cluster), against real node:http
 * servers: connections split evenly, each leg's paths cycled, every target's slices in ABC CBA order.
 */
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { after, test } from "node:test";
import { interleavedLoads } from "../../bench/lib/interleave.ts";
import { runSpread } from "../../bench/lib/load.ts";

interface Recorder {
  url: string;
  paths: string[];
  sockets: Set<Socket>;
  /** Arrival time of every request. */
  times: number[];
  server: Server;
}

const servers: Recorder[] = [];
after(() => {
  for (const r of servers) r.server.close();
});

async function recorder(): Promise<Recorder> {
  const r = { paths: [], sockets: new Set(), times: [] } as unknown as Recorder;
  r.server = createServer((req, res) => {
    r.paths.push(req.url ?? "");
    r.sockets.add(req.socket);
    r.times.push(performance.now());
    req.resume().on("end", () => res.end("{}"));
  });
  await new Promise<void>((resolve) => r.server.listen(0, "127.0.0.1", resolve));
  r.url = `http://127.0.0.1:${(r.server.address() as AddressInfo).port}`;
  servers.push(r);
  return r;
}

test("a spread load splits the connections over the servers and cycles each leg's paths", async () => {
  const [a, b, c] = [await recorder(), await recorder(), await recorder()];
  const result = await runSpread(
    [
      { url: a.url, paths: ["/s/1", "/s/2", "/s/3"] },
      { url: `${b.url}/hot` },
      { url: c.url, paths: ["/s/4"] },
    ],
    { body: "{}", connections: 5, durationS: 1 },
  );
  // 5 over 3 servers: 2, 2, 1.
  assert.deepEqual(
    [a, b, c].map((r) => r.sockets.size),
    [2, 2, 1],
  );
  assert.deepEqual(new Set(a.paths), new Set(["/s/1", "/s/2", "/s/3"]));
  assert.deepEqual(new Set(b.paths), new Set(["/hot"]));
  assert.deepEqual(new Set(c.paths), new Set(["/s/4"]));
  assert.ok(result.ok > 0);
  assert.equal(result.legOk.length, 3);
  assert.equal(
    result.legOk.reduce((x, y) => x + y, 0),
    result.ok,
  );
  // Every answer was counted by its leg (a request cut off at the end may have reached its server only).
  for (const [i, r] of [a, b, c].entries()) assert.ok(result.legOk[i]! <= r.paths.length);
  assert.ok(Number.isFinite(result.latencyMs.p99));
});

test("interleaved loads go through the targets forward, then backward", async () => {
  const targets = [await recorder(), await recorder(), await recorder()];
  const results = await interleavedLoads(
    targets.map((r) => ({ url: [{ url: r.url }], pid: process.pid })),
    { body: "{}", connections: 2, slices: 2, sliceS: 1 },
  );
  // Each server was loaded in two runs; the order of their first and last requests gives the slice order.
  const first = targets.map((r) => r.times[0]!);
  const last = targets.map((r) => r.times.at(-1)!);
  assert.ok(first[0]! < first[1]! && first[1]! < first[2]!, "first round A, B, C");
  assert.ok(last[2]! < last[1]! && last[1]! < last[0]!, "second round C, B, A");
  for (const r of results) {
    assert.equal(r.sliceRates.length, 2);
    assert.ok(r.ok > 0);
    assert.equal(r.legOk[0], r.ok);
  }
});
