/**
 * Downloads component code given as `component_url` (a raw file or a GitHub `blob` page URL).
 */
import { type Dispatcher, fetch as undiciFetch } from "undici";
import { AppError } from "../errors.ts";

/** Limits of one download. */
export interface FetchCodeOptions {
  /** Whole download, headers and body; default 15 s. */
  timeoutMs?: number;
  /** Largest body accepted; default 1 MB, far above any real component. */
  maxBytes?: number;
  /**
   * Outbound address rules (the server's private-address policy): `dispatcher` checks every address
   * connected to, `checkUrl` throws for a URL whose host is a refused IP literal.
   */
  guard?: { dispatcher: Dispatcher; checkUrl: (url: URL) => void };
}

/** Redirects followed by hand, so that each hop's address is checked. */
const MAX_REDIRECTS = 5;

const DEFAULT_TIMEOUT_MS = 15_000;
const DEFAULT_MAX_BYTES = 1024 * 1024;

/**
 * `https://github.com/o/r/blob/<ref>/<path>` (or `/raw/`) → `https://raw.githubusercontent.com/o/r/<ref>/<path>`;
 * any other URL is returned unchanged.
 */
export function rawGitHubUrl(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return url;
  }
  if (parsed.hostname !== "github.com" && parsed.hostname !== "www.github.com") return url;
  const match = /^\/([^/]+)\/([^/]+)\/(?:blob|raw)\/(.+)$/.exec(parsed.pathname);
  if (!match) return url;
  const [, owner, repo, rest] = match;
  return `https://raw.githubusercontent.com/${owner}/${repo}/${rest}${parsed.search}`;
}

/** Fetches the code at `url`; every failure is an `invalid_parameter` about `component_url`. */
export async function fetchComponentCode(url: string, opts: FetchCodeOptions = {}): Promise<string> {
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const maxBytes = opts.maxBytes ?? DEFAULT_MAX_BYTES;
  let target: URL;
  try {
    target = new URL(rawGitHubUrl(url));
  } catch {
    throw invalidUrl("component_url is not a valid URL");
  }
  if (target.protocol !== "http:" && target.protocol !== "https:") {
    throw invalidUrl(`component_url must be an http or https URL, not ${target.protocol}`);
  }
  const signal = AbortSignal.timeout(timeoutMs);
  try {
    let response: Response;
    for (let hop = 0; ; hop++) {
      try {
        opts.guard?.checkUrl(target);
      } catch (err) {
        throw invalidUrl(`component_url leads to a refused address: ${(err as Error).message}`);
      }
      response = (await undiciFetch(target, {
        signal,
        redirect: "manual",
        headers: { accept: "text/plain, */*" },
        ...(opts.guard ? { dispatcher: opts.guard.dispatcher } : {}),
      })) as unknown as Response;
      const location = response.headers.get("location");
      if (response.status < 300 || response.status > 399 || !location) break;
      await response.body?.cancel().catch(() => {});
      if (hop >= MAX_REDIRECTS) throw invalidUrl(`component_url redirected more than ${MAX_REDIRECTS} times`);
      target = new URL(location, target);
      if (target.protocol !== "http:" && target.protocol !== "https:") {
        throw invalidUrl(`component_url redirected to a ${target.protocol} URL`);
      }
    }
    if (!response.ok) {
      await response.body?.cancel().catch(() => {});
      throw invalidUrl(`Fetching component_url failed with HTTP ${response.status}`, {
        status: response.status,
      });
    }
    const declared = Number(response.headers.get("content-length"));
    if (Number.isFinite(declared) && declared > maxBytes) {
      await response.body?.cancel().catch(() => {});
      throw tooLarge(maxBytes);
    }
    const bytes = await readCapped(response, maxBytes);
    try {
      return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
    } catch {
      throw invalidUrl("component_url did not return UTF-8 text");
    }
  } catch (err) {
    if (err instanceof AppError) throw err;
    if (signal.aborted) throw invalidUrl(`Fetching component_url timed out after ${timeoutMs} ms`);
    const cause = (err as { cause?: { message?: unknown } }).cause;
    const reason = typeof cause?.message === "string" ? cause.message : (err as Error).message;
    throw invalidUrl(`Fetching component_url failed: ${reason}`);
  }
}

async function readCapped(response: Response, maxBytes: number): Promise<Uint8Array> {
  if (!response.body) return new Uint8Array();
  const chunks: Uint8Array[] = [];
  let total = 0;
  const reader = response.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > maxBytes) {
      await reader.cancel().catch(() => {});
      throw tooLarge(maxBytes);
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks, total);
}

function invalidUrl(message: string, extra: Record<string, unknown> = {}): AppError {
  return new AppError("invalid_parameter", message, { details: { field: "component_url", ...extra } });
}

function tooLarge(maxBytes: number): AppError {
  return invalidUrl(`The code at component_url is larger than ${maxBytes} bytes`, { maxBytes });
}
