/**
 * Main module of a realm: a worker thread that runner/runner.ts starts in the owner's executor process
 * for one source (or one inspection), so the source has globals, a module cache and a heap cap of its
 * own and can be stopped alone. It loads the component, runs the source's batches of invocations one
 * after another, and answers through the runner, which stamps every message with the source. This
 * module sets the realm up, in order, before any component loads; its parts: sandbox.ts (globals),
 * errors.ts (fatal errors), batches.ts and run.ts (the work), pipedream-api.ts, state.ts.
 * Imports only node: built-ins and files of child/, bundled with it (child/README.md).
 */
import { installEgressGuard } from "../guards/egress-guard.ts";
import { installFdGuard } from "../guards/fd-guard.ts";
import type { ToChild } from "../protocol.ts";
import { forgetSource, onBatch } from "./batches.ts";
import { installFatalHandlers } from "./errors.ts";
import { installPipedreamApi } from "./pipedream-api.ts";
import { inspect } from "./run.ts";
import { installSandboxGlobals } from "./sandbox.ts";
import { init, port, send } from "./state.ts";

if (!port) {
  process.stderr.write("realm.ts runs as a worker thread of runner.ts\n");
  process.exit(1);
}
// Each realm has its own `net` module, so each installs the egress check before any component loads.
if (init.egress) installEgressGuard(init.egress);
// Requests to https://api.pipedream.com go to this server's API over the realm's channel; hooked here,
// before any component loads, like the egress check.
const answerApi = init.pipedreamApi
  ? installPipedreamApi(init.pipedreamApi.bodyLimit, (id, request) => send({ t: "api", id, request }))
  : undefined;
// Descriptors are the process's: the IPC channel to the server and other realms' files are not the
// component's (guards/fd-guard.ts). Before the sandbox's globals, whose export sync covers it.
installFdGuard();
installSandboxGlobals();
installFatalHandlers();

port.on("message", (raw: unknown) => {
  const msg = raw as ToChild;
  if (typeof msg !== "object" || msg === null) return;
  if (msg.t === "batch") onBatch(msg);
  else if (msg.t === "inspect") void inspect(msg.q, msg.entryFile);
  else if (msg.t === "api") answerApi?.(msg.id, msg.response);
  else if (msg.t === "forget") forgetSource(msg.sid);
});
