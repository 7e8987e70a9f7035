/**
 * The executor's own egress check, installed before any component loads: every TCP connect and every
 * Unix-socket connect goes through `net.Socket.prototype.connect` (http, https, fetch, tls, database
 * drivers too), which is replaced here by one that refuses destinations the rules refuse, checking the
 * address a name resolves to at connect time. It is the only guard when no firewall rule can be set
 * (no root, or no netfilter), and beside the firewall it refuses Unix sockets (which no IP rule sees:
 * a database's socket in /var/run is one) and explains a refusal in words. Its limits (docs/isolation.md):
 * UDP (`dgram`) is not checked here, and a hole in the JavaScript layer would get past it; the
 * firewall would not be.
 */
import dns from "node:dns";
import net, { BlockList, isIP } from "node:net";

/** The rules, as plain data from the parent (ChildInit.egress). */
export interface EgressRules {
  /** Refused ranges as `net/bits`. */
  refused: { v4: string[]; v6: string[] };
  /** Allowed anyway: addresses and ranges (`net` or `net/bits`), exact names and `*.suffix` names. */
  allowed: string[];
  /** The resolvers' addresses: port 53 stays open to them. */
  nameservers: string[];
}

export const egressRefusedCode = "EGRESS_REFUSED";

export function installEgressGuard(rules: EgressRules): void {
  const refused = new BlockList();
  for (const r of rules.refused.v4) addRange(refused, r, "ipv4");
  for (const r of rules.refused.v6) addRange(refused, r, "ipv6");
  const allowedRanges = new BlockList();
  const names = new Set<string>();
  const suffixes: string[] = [];
  for (const entry of rules.allowed) {
    const family = isIP(entry.split("/")[0]!);
    if (family !== 0) addRange(allowedRanges, entry, family === 4 ? "ipv4" : "ipv6");
    else if (entry.startsWith("*.")) suffixes.push(entry.slice(1));
    else names.add(entry);
  }
  const nameAllowed = (host: string) => {
    const name = host.toLowerCase().replace(/\.$/, "");
    return names.has(name) || suffixes.some((s) => name.endsWith(s));
  };
  const addressAllowed = (ip: string, port: number) => {
    const bare = ip.split("%")[0]!;
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(bare);
    const addr = mapped ? mapped[1]! : bare;
    const kind: "ipv4" | "ipv6" = isIP(addr) === 6 ? "ipv6" : "ipv4";
    if (!refused.check(addr, kind)) return true;
    if (allowedRanges.check(addr, kind)) return true;
    return port === 53 && rules.nameservers.includes(bare);
  };

  const original = net.Socket.prototype.connect;
  const guarded = function (this: net.Socket, ...args: unknown[]) {
    const options = connectOptions(args);
    if (options) {
      if (typeof options.path === "string") {
        return fail(
          this,
          `refused to connect to the Unix socket ${options.path}: component code may not use Unix sockets`,
        );
      }
      const host = typeof options.host === "string" && options.host !== "" ? options.host : "localhost";
      const port = Number(options.port);
      const bare = host.replace(/^\[|\]$/g, "");
      if (!nameAllowed(bare)) {
        if (isIP(bare) !== 0) {
          if (!addressAllowed(bare, port)) return fail(this, refusedMessage(bare, bare));
        } else {
          const lookup = typeof options.lookup === "function" ? options.lookup : dns.lookup;
          options.lookup = guardedLookup(lookup as typeof dns.lookup, (ip) => addressAllowed(ip, port));
        }
      }
    }
    return Reflect.apply(original, this, args);
  } as typeof original;
  Object.defineProperty(net.Socket.prototype, "connect", {
    value: guarded,
    writable: false,
    configurable: false,
  });
}

function addRange(list: BlockList, range: string, type: "ipv4" | "ipv6"): void {
  const [net, bits] = range.split("/");
  list.addSubnet(net!, bits === undefined ? (type === "ipv4" ? 32 : 128) : Number(bits), type);
}

/** The options object `connect` will use: `net.connect` passes `[options, cb]` already normalised. */
function connectOptions(args: unknown[]): Record<string, unknown> | undefined {
  let first = args[0];
  if (Array.isArray(first)) first = first[0];
  if (typeof first === "object" && first !== null) return first as Record<string, unknown>;
  if (typeof first === "string" && !/^\d+$/.test(first)) return { path: first };
  if (typeof first === "number" || typeof first === "string") {
    const options: Record<string, unknown> = { port: first };
    if (typeof args[1] === "string") options.host = args[1];
    // Rewritten so that the (possibly replaced) lookup below applies.
    args.splice(0, typeof args[1] === "string" ? 2 : 1, options);
    return options;
  }
  return undefined;
}

function guardedLookup(lookup: typeof dns.lookup, allowed: (ip: string) => boolean): typeof dns.lookup {
  return ((hostname: string, opts: dns.LookupOptions, callback: (...a: unknown[]) => void) => {
    lookup(hostname, { ...opts, all: true }, (err, addresses) => {
      if (err) return callback(err);
      const list = addresses as dns.LookupAddress[];
      const ok = list.filter((a) => allowed(a.address));
      if (ok.length === 0) return callback(refusedError(refusedMessage(hostname, list[0]?.address ?? "")));
      if (opts.all) return callback(null, ok);
      callback(null, ok[0]!.address, ok[0]!.family);
    });
  }) as typeof dns.lookup;
}

function refusedMessage(host: string, ip: string): string {
  const where = host === ip ? ip : `${host} (${ip})`;
  return `refused to connect to ${where}: component code may not reach loopback, private or link-local addresses; the operator can allow it with FOUNT_EXECUTOR_ALLOW_PRIVATE or FOUNT_EXECUTOR_ALLOW_HOSTS`;
}

function refusedError(message: string): Error {
  return Object.assign(new Error(message), { code: egressRefusedCode });
}

/** Fails the socket the way a failed connect does: an `error` event, asynchronously. */
function fail(socket: net.Socket, message: string): net.Socket {
  process.nextTick(() => socket.destroy(refusedError(message)));
  return socket;
}
