/**
 * The image's HEALTHCHECK (Containerfile): exits 0 when this container's Fount answers GET /healthz
 * with 200, else 1. It asks the address the server listens on (HOST, PORT), loopback for a wildcard.
 */
const port = process.env.PORT || "8787";
let host = process.env.HOST || "127.0.0.1";
if (host === "0.0.0.0") host = "127.0.0.1";
else if (host === "::") host = "[::1]";
else if (host.includes(":")) host = `[${host}]`;
try {
  const res = await fetch(`http://${host}:${port}/healthz`, { signal: AbortSignal.timeout(4000) });
  process.exit(res.status === 200 ? 0 : 1);
} catch {
  process.exit(1);
}
