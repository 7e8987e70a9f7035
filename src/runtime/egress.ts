/**
 * Where component code may connect. By default executors may reach public addresses only: the
 * ranges webhook deliveries refuse (non-public-ranges.ts: loopback, private, link-local,
 * unique-local, …) are refused to them too, so a component cannot call Fount's own API, a database
 * on loopback or the cloud metadata address. `FOUNT_EXECUTOR_ALLOW_PRIVATE` opens everything;
 * `FOUNT_EXECUTOR_ALLOW_HOSTS` opens some addresses.
 *
 * Two layers enforce it. Each executor checks its own connects and datagrams (child/guards/egress-guard.ts),
 * which also refuses Unix sockets and explains a refusal. As root, where component code cannot undo it, an
 * nftables table of this server's own (`inet fount_<uid base>_<pid>`) matches the socket owner's uid
 * against the server's executor uid range (uid-range.ts), so it touches no other process on the
 * host. It is made when the server starts and deleted when it stops; a table left by a crashed
 * server matches only uids nobody else holds, and the next server claiming that range removes it.
 */
import { spawn } from "node:child_process";
import dns from "node:dns/promises";
import fs from "node:fs";
import { isIP } from "node:net";
import { v4Ranges, v6Ranges } from "../non-public-ranges.ts";
import type { EgressRules } from "./child/guards/egress-guard.ts";
import type { UidRange } from "./uid-range.ts";

/** How executors' egress is governed, as the start banner says it. */
export type EgressMode =
  /** nftables rules on the executor uid range (the kernel), and each executor's own check. */
  | "firewall"
  /** Each executor's own check only (child/guards/egress-guard.ts): not root, isolation off, or no netfilter. */
  | "executor-check"
  /** FOUNT_EXECUTOR_ALLOW_PRIVATE=true: nothing refused. */
  | "open";

export interface EgressOptions {
  allowPrivate: boolean;
  /** Hostnames, IP addresses and CIDR ranges (FOUNT_EXECUTOR_ALLOW_HOSTS). */
  allowHosts: readonly string[];
  /** The executor uid range; undefined when executors run under the server's own uid. */
  uids: UidRange | undefined;
  logger?: { warn(obj: object, msg?: string): void };
}

/** The egress rules in force; `close()` removes them (idempotent). */
export interface EgressGuard {
  readonly mode: EgressMode;
  /** One plain line for the start banner: the layers in force and what they mean. */
  readonly summary: string;
  close(): Promise<void>;
}

const guarded =
  "component code cannot reach loopback, private or link-local addresses over TCP or UDP, nor Unix sockets";

/** Installs the rules for `options`, or says why none could be. */
export async function installEgressRules(options: EgressOptions): Promise<EgressGuard> {
  const uids = options.uids;
  let stale: string[] = [];
  let nftError: Error | undefined;
  if (uids) {
    try {
      // Tables of this range left by a server that died: the range is ours now, so they are stale.
      stale = (await nft(["list", "tables"]))
        .split("\n")
        .map((line) => /^table inet (fount_(\d+)(?:_\d+)?)$/.exec(line.trim()))
        .filter((m) => m !== null && Number(m[2]) === uids.base)
        .map((m) => m![1]!);
    } catch (err) {
      nftError = err as Error;
    }
  }
  if (options.allowPrivate) {
    if (stale.length) await nft(["-f", "-"], stale.map((t) => `delete table inet ${t}\n`).join(""));
    return noRules(
      "open",
      "egress: open (FOUNT_EXECUTOR_ALLOW_PRIVATE=true): component code may connect anywhere, private addresses included",
    );
  }
  const except = options.allowHosts.length ? ` except ${options.allowHosts.join(", ")}` : "";
  if (!uids) {
    return noRules(
      "executor-check",
      `egress: executor guard only (executors share the server's uid: not root, or FOUNT_EXECUTOR_ISOLATE_USERS=false): ${guarded}${except}; run as root for the kernel layer`,
    );
  }
  const table = `fount_${uids.base}_${process.pid}`;
  const allow = await allowedAddresses(options.allowHosts, options.logger);
  try {
    if (nftError) throw nftError;
    await nft(["-f", "-"], rulesScript(table, uids, allow, nameservers(), stale));
  } catch (err) {
    const missing = (err as NodeJS.ErrnoException).code === "ENOENT";
    const reason = missing ? "nft not found" : `nft failed: ${(err as Error).message.split("\n")[0]}`;
    const remedy = missing ? "install nftables" : "run where netfilter rules may be set";
    return noRules(
      "executor-check",
      `egress: executor guard only (${reason}): ${guarded}${except}; ${remedy} for the kernel layer`,
    );
  }
  let closed: Promise<void> | undefined;
  return {
    mode: "firewall",
    summary: `egress: kernel firewall (nftables table inet ${table}, uids ${uids.base}–${uids.base + uids.size - 1}) and executor guard: ${guarded}${except}`,
    close() {
      closed ??= nft(["delete", "table", "inet", table]).then(
        () => {},
        (err) => {
          options.logger?.warn({ err, table }, "nftables table for executor egress could not be removed");
        },
      );
      return closed;
    },
  };
}

function noRules(mode: EgressMode, summary: string): EgressGuard {
  return { mode, summary, close: async () => {} };
}

interface Addresses {
  v4: string[];
  v6: string[];
}

/**
 * The allowed addresses: IP addresses and ranges as given, hostnames resolved once now (the kernel
 * matches addresses, not names). A `*.` wildcard cannot be matched below the name lookup; it is
 * logged and left out.
 */
async function allowedAddresses(
  entries: readonly string[],
  logger: EgressOptions["logger"],
): Promise<Addresses> {
  const out: Addresses = { v4: [], v6: [] };
  for (const raw of entries) {
    const entry = raw.replace(/^\[|\]$/g, "");
    const family = isIP(entry.split("/")[0]!);
    if (family === 4) out.v4.push(entry);
    else if (family === 6) out.v6.push(entry);
    else if (entry.startsWith("*.")) {
      logger?.warn(
        { entry },
        "FOUNT_EXECUTOR_ALLOW_HOSTS: wildcard names cannot be enforced by the firewall; ignored",
      );
    } else {
      const found = await dns.lookup(entry, { all: true }).catch(() => []);
      if (found.length === 0)
        logger?.warn({ entry }, "FOUNT_EXECUTOR_ALLOW_HOSTS: name does not resolve; ignored");
      for (const a of found) (a.family === 4 ? out.v4 : out.v6).push(a.address);
    }
  }
  return out;
}

/** The resolvers executors' name lookups go to (often on a private address): port 53 stays open to them. */
function nameservers(): Addresses {
  const out: Addresses = { v4: [], v6: [] };
  let text = "";
  try {
    text = fs.readFileSync("/etc/resolv.conf", "utf8");
  } catch {
    return out;
  }
  for (const m of text.matchAll(/^\s*nameserver\s+(\S+)/gm)) {
    const ip = m[1]!.split("%")[0]!;
    if (isIP(ip) === 4) out.v4.push(ip);
    else if (isIP(ip) === 6) out.v6.push(ip);
  }
  return out;
}

/** The rules each executor checks itself (child/guards/egress-guard.ts); undefined when everything is allowed. */
export function executorEgressRules(
  options: Pick<EgressOptions, "allowPrivate" | "allowHosts">,
): EgressRules | undefined {
  if (options.allowPrivate) return undefined;
  const dnsServers = nameservers();
  return {
    refused: refusedRanges(),
    allowed: options.allowHosts.map((h) => h.replace(/^\[|\]$/g, "").replace(/\.$/, "")),
    nameservers: [...dnsServers.v4, ...dnsServers.v6],
  };
}

/** The non-public ranges, IPv6 forms of the IPv4 ones included (mapped, NAT64, 6to4). */
export function refusedRanges(): Addresses {
  const v4 = v4Ranges.map(([net, bits]) => `${net}/${bits}`);
  const v6 = v6Ranges.map(([net, bits]) => `${net}/${bits}`);
  for (const [net, bits] of v4Ranges) {
    // Hex groups only: nft does not read a dotted quad inside an IPv6 address.
    const [a, b, c, d] = net.split(".").map(Number) as [number, number, number, number];
    const groups = `${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
    v6.push(
      `::ffff:${groups}/${96 + bits}`,
      `64:ff9b::${groups}/${96 + bits}`,
      `2002:${groups}::/${16 + bits}`,
    );
  }
  return { v4, v6 };
}

function rulesScript(
  table: string,
  uids: UidRange,
  allow: Addresses,
  dnsServers: Addresses,
  stale: string[],
): string {
  const refused = refusedRanges();
  const set = (name: string, type: string, elements: string[]) =>
    `  set ${name} { type ${type}; flags interval; auto-merge;${elements.length ? ` elements = { ${elements.join(", ")} };` : ""} }`;
  const last = uids.base + uids.size - 1;
  return [
    ...stale.map((t) => `delete table inet ${t}`),
    `table inet ${table} {`,
    set("refused4", "ipv4_addr", refused.v4),
    set("refused6", "ipv6_addr", refused.v6),
    set("allowed4", "ipv4_addr", allow.v4),
    set("allowed6", "ipv6_addr", allow.v6),
    set("dns4", "ipv4_addr", dnsServers.v4),
    set("dns6", "ipv6_addr", dnsServers.v6),
    // Only packets of a socket owned by an executor uid jump: the resets and ICMP errors the kernel
    // sends for a refused connection have no socket, and must not be refused in turn.
    "  chain output {",
    "    type filter hook output priority filter; policy accept;",
    `    meta skuid ${uids.base}-${last} jump executor_egress`,
    "  }",
    "  chain executor_egress {",
    "    ip daddr @allowed4 accept",
    "    ip6 daddr @allowed6 accept",
    "    ip daddr @dns4 meta l4proto { tcp, udp } th dport 53 accept",
    "    ip6 daddr @dns6 meta l4proto { tcp, udp } th dport 53 accept",
    // A reset (ECONNREFUSED) ends a refused TCP connect at once; ICMP errors on loopback let it time out.
    "    ip daddr @refused4 meta l4proto tcp reject with tcp reset",
    "    ip6 daddr @refused6 meta l4proto tcp reject with tcp reset",
    "    ip daddr @refused4 reject",
    "    ip6 daddr @refused6 reject",
    "  }",
    "}",
    "",
  ].join("\n");
}

/** Runs `nft`, without a shell, feeding it `input`; resolves with its output. */
function nft(args: string[], input?: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const proc = spawn("nft", args, {
      stdio: [input === undefined ? "ignore" : "pipe", "pipe", "pipe"],
      timeout: 10_000,
    });
    let err = "";
    let out = "";
    proc.stdout?.on("data", (chunk: Buffer) => {
      out += chunk.toString("utf8");
    });
    proc.stderr?.on("data", (chunk: Buffer) => {
      if (err.length < 8192) err += chunk.toString("utf8");
    });
    proc.on("error", reject);
    proc.on("close", (code, signal) => {
      if (code === 0) resolve(out);
      else reject(new Error(err.trim() || `nft exited with ${signal ?? code}`));
    });
    if (proc.stdin) {
      // nft may exit (an error) before it read everything; its exit code tells, not EPIPE.
      proc.stdin.on("error", () => {});
      proc.stdin.end(input);
    }
  });
}
