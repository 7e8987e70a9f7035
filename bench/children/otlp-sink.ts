/**
 * A collector that keeps nothing: takes OTLP/HTTP trace exports (`POST /v1/traces`, JSON), counts the
 * spans in them and answers 200, so the bench measures what traces cost the server that sends them.
 * IPC: `ready` → port; `count` → requests and spans received.
 */
import { bodyServer } from "./body-server.ts";
import { serve } from "./ipc.ts";

let requests = 0;
let spans = 0;

const server = bodyServer((_req, body, res) => {
  requests++;
  try {
    const parsed = JSON.parse(body.toString("utf8"));
    for (const rs of parsed.resourceSpans ?? [])
      for (const ss of rs.scopeSpans ?? []) spans += ss.spans?.length ?? 0;
  } catch {
    // Not JSON: counted as a request only.
  }
  res.writeHead(200, { "content-type": "application/json", "content-length": 2 }).end("{}");
});

serve({ ready: server.ready, count: () => ({ requests, spans }) });
