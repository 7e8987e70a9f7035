/**
 * What compression costs the API (issue 30): one server from this tree, GET loads with and without
 * Accept-Encoding in alternating slices (A B C …, … C B A; bench/lib/interleave.ts says why), on a list
 * above the 1 KB threshold (compressed) and on a small answer below it (passed through). Prints each
 * load's rate, latency, server CPU per request and bytes per answer. Informational, apart from `npm run bench`.
 *
 *   node bench/api-compression.ts [--sources 10] [--slices 4] [--slice 2] [--connections 10]
 */
import { parseArgs } from "node:util";
import autocannon from "autocannon";
import { benchApiKey, cpuMeter, FountProcess } from "./lib/processes.ts";
import { distribution } from "./lib/stats.ts";

const { values } = parseArgs({
  options: {
    sources: { type: "string", default: "10" },
    slices: { type: "string", default: "4" },
    slice: { type: "string", default: "2" },
    connections: { type: "string", default: "10" },
  },
});

/** What Chromium sends. */
const browserEncodings = "gzip, deflate, br, zstd";

interface Load {
  name: string;
  path: string;
  acceptEncoding?: string;
  ok: number;
  seconds: number;
  bytes: number;
  cpuS: number;
  latencies: number[];
}

function slice(url: string, load: Load, seconds: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { authorization: `Bearer ${benchApiKey}` };
    if (load.acceptEncoding) headers["accept-encoding"] = load.acceptEncoding;
    const instance = autocannon(
      {
        url: url + load.path,
        connections: Number(values.connections),
        duration: seconds,
        method: "GET",
        headers,
      },
      (err, result) => {
        if (err) return reject(err);
        load.ok += result["2xx"];
        load.seconds += result.duration;
        resolve();
      },
    );
    instance.on("response", (_client, status, bytes, ms) => {
      if (status !== 200) return;
      load.bytes += bytes;
      load.latencies.push(ms);
    });
  });
}

const server = await FountProcess.start();
try {
  for (let i = 0; i < Number(values.sources); i++) {
    await server.api("POST", "/v1/sources", { key: "http-new-requests", name: `compression-${i}` });
  }
  const list = `/v1/users/me/sources?limit=${values.sources}`;
  const loads: Load[] = [
    { name: "list, identity", path: list },
    { name: "list, browser (br)", path: list, acceptEncoding: browserEncodings },
    { name: "list, gzip", path: list, acceptEncoding: "gzip" },
    { name: "small, identity", path: "/v1/users/me" },
    { name: "small, browser", path: "/v1/users/me", acceptEncoding: browserEncodings },
  ].map((l) => ({ ...l, ok: 0, seconds: 0, bytes: 0, cpuS: 0, latencies: [] }));
  // Warm-up: the JIT and the store's caches, unmeasured.
  for (const load of loads) await slice(server.url, { ...load, latencies: [] }, 1);
  for (const l of loads) Object.assign(l, { ok: 0, seconds: 0, bytes: 0, latencies: [] });
  for (let i = 0; i < Number(values.slices); i++) {
    for (const load of i % 2 === 0 ? loads : [...loads].reverse()) {
      const meter = cpuMeter(server.pid);
      await slice(server.url, load, Number(values.slice));
      load.cpuS += meter().serverS;
    }
  }
  for (const l of loads) {
    const latency = distribution(l.latencies);
    console.log(
      `${l.name.padEnd(20)} ${Math.round(l.ok / l.seconds)
        .toString()
        .padStart(6)}/s  p50 ${latency.p50.toFixed(1)} ms  p99 ${latency.p99.toFixed(1)} ms  ` +
        `${((1e6 * l.cpuS) / l.ok).toFixed(0)} µs server CPU/request  ${Math.round(l.bytes / l.ok)} bytes/answer`,
    );
  }
} finally {
  await server.stop();
}
