/**
 * The log as an operator meets it, from `node src/main.ts` as a process: JSON lines when stdout is not a
 * terminal (a pipe, a file, a container's log), readable lines on a terminal or with LOG_FORMAT=pretty,
 * and at the default level no line for a request that went well, one for a request that failed.
 */
import assert from "node:assert/strict";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { stripVTControlCharacters } from "node:util";
import { fixture } from "../fixtures/components/fixtures.ts";
import { processCleanup, type ServerProcess, startProcess } from "./server-process.ts";

const adminKey = "fnt_logformattestkey0000000000000000";
const { running, tempDir } = processCleanup("fount-log-format-");

function start(env: NodeJS.ProcessEnv, how: "node" | "terminal" = "node"): ServerProcess {
  const p = startProcess(
    {
      PORT: "0",
      FOUNT_DATA_DIR: tempDir(),
      FOUNT_BOOTSTRAP_API_KEY: adminKey,
      FOUNT_NPM_CACHE: path.join(os.tmpdir(), "fount-test-npm-cache"),
      LOG_LEVEL: "info",
      LOG_FORMAT: "",
      ...env,
    },
    how,
  );
  running.add(p);
  return p;
}

async function stop(p: ServerProcess): Promise<void> {
  process.kill(await p.serverPid(), "SIGTERM");
  assert.equal((await p.exited).code, 0, p.output());
  running.delete(p);
}

/** The output's lines, without a terminal's colours and carriage returns. */
function outputLines(p: ServerProcess): string[] {
  return stripVTControlCharacters(p.output()).split(/\r?\n/);
}

/** A readable log line: its time, its level, its message. */
const readable = /^\[\d\d:\d\d:\d\d\.\d{3}\] (DEBUG|INFO|WARN|ERROR): /;

test("without a terminal the log is JSON lines; a request that went well leaves none at info, a failed one leaves one", async () => {
  const p = start({});
  const url = await p.url();
  const ok = await fetch(`${url}/v1/users/me`, {
    headers: { authorization: `Bearer ${adminKey}`, "x-request-id": "went-well-1" },
  });
  assert.equal(ok.status, 200);
  const deployed = await fetch(`${url}/v1/sources`, {
    method: "POST",
    headers: { authorization: `Bearer ${adminKey}`, "content-type": "application/json" },
    body: JSON.stringify({ component_code: fixture("thrower.mjs") }),
  });
  const source = ((await deployed.json()) as { data: any }).data;
  assert.equal(deployed.status, 200, JSON.stringify(source));
  const failed = await fetch(source.configured_props.http.endpoint_url, {
    method: "POST",
    headers: { "content-type": "application/json", "x-request-id": "failed-1" },
    body: JSON.stringify({ fail: "this" }),
  });
  assert.equal(failed.status, 500);
  await p.waitFor(/"reqId":"failed-1"/);
  await stop(p);

  const logged = outputLines(p).filter((line) => line.startsWith("{"));
  const entries = logged.map((line) => JSON.parse(line));
  assert.ok(
    entries.some((e) => /^Server listening at /.test(e.msg)),
    p.output(),
  );
  assert.equal(outputLines(p).filter((line) => readable.test(line)).length, 0, p.output());
  assert.equal(entries.filter((e) => e.reqId === "went-well-1").length, 0, p.output());
  const failure = entries.filter((e) => e.reqId === "failed-1");
  assert.equal(failure.length, 1, p.output());
  assert.equal(failure[0].level, 30);
  assert.equal(failure[0].statusCode, 500);
  assert.equal(failure[0].method, "POST");
  assert.equal(failure[0].url, new URL(source.configured_props.http.endpoint_url).pathname);
  assert.equal(typeof failure[0].durationMs, "number");
});

test("LOG_FORMAT=pretty writes one readable line per entry, requests included", async () => {
  const p = start({ LOG_FORMAT: "pretty", LOG_LEVEL: "debug" });
  const url = await p.url();
  const ok = await fetch(`${url}/v1/users/me?token=hidden`, {
    headers: { authorization: `Bearer ${adminKey}`, "x-request-id": "pretty-1" },
  });
  assert.equal(ok.status, 200);
  await p.waitFor(/pretty-1/);
  await stop(p);
  const lines = outputLines(p);
  assert.ok(
    lines.some((l) =>
      /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: Server listening at http:\/\/127\.0\.0\.1:\d+$/.test(l),
    ),
    p.output(),
  );
  assert.ok(
    lines.some((l) =>
      /^\[[\d:.]+\] DEBUG: GET \/v1\/users\/me\?token=… answered 200 in \d+ ms \{"reqId":"pretty-1"/.test(l),
    ),
    p.output(),
  );
  assert.equal(lines.filter((l) => l.startsWith("{")).length, 0, p.output());
  assert.doesNotMatch(p.output(), /hidden/);
});

test("on a terminal the log is readable without any setting", async () => {
  const p = start({}, "terminal");
  await p.url();
  await stop(p);
  const lines = outputLines(p);
  assert.ok(
    lines.some((l) => /^\[[\d:.]+\] INFO: Server listening at http:\/\/127\.0\.0\.1:\d+$/.test(l)),
    p.output(),
  );
  assert.equal(lines.filter((l) => l.startsWith("{")).length, 0, p.output());
});

test("a LOG_FORMAT other than pretty or json stops the start with one line", async () => {
  const p = start({ LOG_FORMAT: "yaml" });
  const { code } = await p.exited;
  running.delete(p);
  assert.equal(code, 2);
  assert.equal(p.output().trim(), 'fount: LOG_FORMAT must be pretty or json, got "yaml"');
});
