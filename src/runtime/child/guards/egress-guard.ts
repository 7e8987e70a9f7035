/**
 * The executor's own egress check, installed in each thread before any component loads. It is the only
 * guard when no firewall rule can be set (no root, or no netfilter), and beside the firewall it refuses
 * Unix sockets (which no IP rule sees: a database's socket in /var/run is one) and explains a refusal.
 *
 * It holds at two levels. Where Node's modules take a destination, a refused one fails with
 * `EGRESS_REFUSED` and a message naming the settings that open it: `net.Socket.prototype.connect` (which
 * net, tls, http, https, http2, fetch and WebSocket use), the name lookup of every `dgram` socket, and
 * the servers of `dns.Resolver`. Below them, the native handles those modules drive (TCP, Pipe, UDP, the
 * c-ares channel) check the address they are given once more: component code can reach a handle
 * directly (`socket._handle`, dgram's state, `net._createServerHandle`) and call it with a request object
 * it got hold of, so the first level alone could be bypassed from JavaScript. The handles also refuse to
 * adopt the process's file descriptors past stdio (the executor's IPC channel to the server is one).
 * Its limit (docs/isolation.md): it is JavaScript, so a hole in Node itself would get past it; the
 * firewall would not be.
 */
import dgram from "node:dgram";
import dns from "node:dns";
import net, { BlockList, isIP } from "node:net";
import os from "node:os";

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

/** What a native handle answers when it refuses: a libuv error number, as a failed syscall would. */
const UV_EACCES = -os.constants.errno.EACCES;

/** The rules, compiled. */
interface Policy {
  /** A name FOUNT_EXECUTOR_ALLOW_HOSTS allows as such. */
  nameAllowed(host: string): boolean;
  /**
   * Whether `ip` may be reached on `port`; without a port (a name lookup, before the port is at hand),
   * the resolvers count as allowed and the handle checks the port.
   */
  addressAllowed(ip: string, port?: number): boolean;
  /** Allows an address an allowed name resolved to: the handles below see addresses, not names. */
  approve(ip: string): void;
}

/**
 * The system's name lookup as it was before any component loaded. An allowed name is resolved with it,
 * never with a lookup the caller supplies (or `dns.lookup` as a component may have replaced it): the
 * addresses an allowed name resolves to are approved for the handles, so a lookup of the component's own
 * would approve any address it liked, loopback and the cloud's metadata service included.
 */
const systemLookup = dns.lookup;

export function installEgressGuard(rules: EgressRules): void {
  const policy = compile(rules);
  // The native prototypes are found through Node's own modules, before those are wrapped.
  const handles = nativePrototypes();
  guardSocketConnect(policy);
  guardDatagramLookups(handles.udp, policy);
  guardHandles(handles, policy);
}

function compile(rules: EgressRules): Policy {
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
  const approved = new Set<string>();
  return {
    nameAllowed(host) {
      const name = host.toLowerCase().replace(/\.$/, "");
      return names.has(name) || suffixes.some((s) => name.endsWith(s));
    },
    addressAllowed(ip, port) {
      const bare = ip.split("%")[0]!;
      if (approved.has(bare)) return true;
      const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(bare);
      const addr = mapped ? mapped[1]! : bare;
      const kind = isIP(addr);
      // Not an address at all: nothing a handle could reach, and nothing to allow.
      if (kind === 0) return false;
      const type = kind === 6 ? "ipv6" : "ipv4";
      if (!refused.check(addr, type)) return true;
      if (allowedRanges.check(addr, type)) return true;
      return (port === undefined || port === 53) && rules.nameservers.includes(bare);
    },
    approve(ip) {
      approved.add(ip.split("%")[0]!);
    },
  };
}

function addRange(list: BlockList, range: string, type: "ipv4" | "ipv6"): void {
  const [net, bits] = range.split("/");
  list.addSubnet(net!, bits === undefined ? (type === "ipv4" ? 32 : 128) : Number(bits), type);
}

interface NativePrototypes {
  tcp: object;
  pipe: object;
  udp: object;
  resolver: object;
}

/**
 * The prototypes of the native handles, reached through instances Node's modules make: a TCP socket
 * whose name lookup never answers, a Unix socket connecting to an abstract name nobody holds, a dgram
 * socket never bound, a resolver. Each is closed at once. A Node release that hides them fails here,
 * loudly, rather than leaving the handles unguarded.
 */
function nativePrototypes(): NativePrototypes {
  const ownHandle = (socket: net.Socket) => (socket as unknown as { _handle: object | null })._handle;
  const tcpSocket = new net.Socket();
  tcpSocket.connect({ host: "egress-guard.invalid", port: 9, lookup: () => {} });
  const tcp = ownHandle(tcpSocket);
  tcpSocket.destroy();
  const pipeSocket = new net.Socket();
  pipeSocket.on("error", () => {});
  pipeSocket.connect({ path: `\0fount-egress-guard-${process.pid}-${Math.random().toString(36).slice(2)}` });
  const pipe = ownHandle(pipeSocket);
  pipeSocket.destroy();
  const datagrams = dgram.createSocket("udp4");
  const stateKey = Object.getOwnPropertySymbols(datagrams).find((s) => s.description === "state symbol");
  const udp = stateKey
    ? (datagrams as unknown as Record<symbol, { handle?: object } | undefined>)[stateKey]?.handle
    : undefined;
  datagrams.close();
  const resolver = (new dns.Resolver() as unknown as { _handle?: object })._handle;
  if (!tcp || !pipe || !udp || !resolver) {
    throw new Error("egress guard: this Node release hides its socket handles; the executor cannot start");
  }
  return {
    tcp: Object.getPrototypeOf(tcp) as object,
    pipe: Object.getPrototypeOf(pipe) as object,
    udp: Object.getPrototypeOf(udp) as object,
    resolver: Object.getPrototypeOf(resolver) as object,
  };
}

/**
 * Replaces `target[name]` for good: component code cannot restore the original, which only the wrapper
 * holds. Native handles' methods stay writable, since Node itself assigns some per instance (a udp6
 * handle's `send` is `send6`); what a component writes there is its own code, which reaches no handle.
 */
type AnyFunction = (...args: unknown[]) => unknown;

function replace(
  target: object,
  name: string,
  wrap: (original: AnyFunction) => AnyFunction,
  writable = false,
): void {
  const original = Reflect.get(target, name) as AnyFunction;
  if (typeof original !== "function") throw new Error(`egress guard: ${name} is not a function`);
  Object.defineProperty(target, name, { value: wrap(original), writable, configurable: false });
}

/** Every TCP and Unix-socket connect through Node's modules (net, tls, http, https, http2, fetch). */
function guardSocketConnect(policy: Policy): void {
  replace(
    net.Socket.prototype,
    "connect",
    (original) =>
      function (this: net.Socket, ...args: unknown[]) {
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
          const lookup = (
            typeof options.lookup === "function" ? options.lookup : dns.lookup
          ) as typeof dns.lookup;
          if (policy.nameAllowed(bare)) {
            options.lookup = approvingLookup(systemLookup, policy);
          } else if (isIP(bare) !== 0) {
            if (!policy.addressAllowed(bare, port))
              return fail(this, refusedMessage("connect to", bare, bare));
          } else {
            options.lookup = guardedLookup(lookup, (ip) => policy.addressAllowed(ip, port));
          }
        }
        return Reflect.apply(original, this, args);
      },
  );
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
      if (ok.length === 0)
        return callback(refusedError(refusedMessage("connect to", hostname, list[0]?.address ?? "")));
      if (opts.all) return callback(null, ok);
      callback(null, ok[0]!.address, ok[0]!.family);
    });
  }) as typeof dns.lookup;
}

/**
 * The lookup of a name FOUNT_EXECUTOR_ALLOW_HOSTS allows (`systemLookup`, whatever the caller gave): its
 * addresses are allowed to the handles too.
 */
function approvingLookup(lookup: typeof dns.lookup, policy: Policy): typeof dns.lookup {
  return ((hostname: string, opts: dns.LookupOptions, callback: (...a: unknown[]) => void) => {
    lookup(hostname, opts, (err: Error | null, address: unknown, family?: number) => {
      if (!err) {
        if (Array.isArray(address)) for (const a of address as dns.LookupAddress[]) policy.approve(a.address);
        else if (typeof address === "string") policy.approve(address);
      }
      callback(err, address, family);
    });
  }) as typeof dns.lookup;
}

/**
 * Every dgram socket resolves its destination (a name, an address, or none: 127.0.0.1 / ::1) through
 * its handle's `lookup`, which Node assigns when it makes the handle. An accessor on the UDP prototype
 * wraps whatever is assigned there, so a refused destination fails `send` and `connect` with a reason.
 * `bind` resolves its local address through the same lookup, synchronously: while it runs, the lookup
 * is handed out unwrapped (binding to loopback is no egress).
 */
function guardDatagramLookups(udp: object, policy: Policy): void {
  type UdpLookup = (
    address: string,
    callback: (err: Error | null, ip?: string, family?: number) => void,
  ) => void;
  const lookups = new WeakMap<object, { own: UdpLookup; guarded: UdpLookup }>();
  let binding = 0;
  replace(
    dgram.Socket.prototype,
    "bind",
    (original) =>
      function (this: dgram.Socket, ...args: unknown[]) {
        binding++;
        try {
          return Reflect.apply(original, this, args);
        } finally {
          binding--;
        }
      },
  );
  Object.defineProperty(udp, "lookup", {
    configurable: false,
    enumerable: false,
    get(this: object) {
      const lookup = lookups.get(this);
      return binding > 0 ? lookup?.own : lookup?.guarded;
    },
    set(this: object, own: unknown) {
      if (typeof own !== "function") return;
      const guarded: UdpLookup = (address, callback) => {
        (own as UdpLookup)(address, (err, ip, family) => {
          if (err || typeof ip !== "string") return callback(err, ip, family);
          const name = typeof address === "string" && address !== "" ? address : ip;
          if (name !== ip && policy.nameAllowed(name)) {
            // The socket's lookup may be the component's own: an address of an allowed name counts as
            // one only when the system's lookup of the name finds it too (`systemLookup`).
            return systemLookup(name, { all: true }, (failed, found) => {
              if (failed) return callback(failed);
              if (found.some((a) => a.address === ip)) policy.approve(ip);
              else if (!policy.addressAllowed(ip))
                return callback(refusedError(refusedMessage("send datagrams to", name, ip)));
              callback(null, ip, family);
            });
          }
          if (!policy.addressAllowed(ip)) {
            return callback(refusedError(refusedMessage("send datagrams to", name, ip)));
          }
          callback(null, ip, family);
        });
      };
      lookups.set(this, { own: own as UdpLookup, guarded });
    },
  });
}

/** The native handles check the address they are given, whoever calls them. */
function guardHandles(handles: NativePrototypes, policy: Policy): void {
  /** Wraps methods so that they answer EACCES when `refuse` finds their arguments refused. */
  const guard = (proto: object, names: string[], refuse: (args: unknown[]) => boolean) => {
    for (const name of names) {
      replace(
        proto,
        name,
        (original) =>
          function (this: object, ...args: unknown[]) {
            return refuse(args) ? UV_EACCES : Reflect.apply(original, this, args);
          },
        true,
      );
    }
  };
  const refused = (ip: unknown, port: unknown) => !policy.addressAllowed(String(ip), Number(port));
  // TCP: connect(req, ip, port) and connect6(req, ip, port).
  guard(handles.tcp, ["connect", "connect6"], (a) => refused(a[1], a[2]));
  // Unix sockets: connect(req, path), refused whatever the path.
  guard(handles.pipe, ["connect"], () => true);
  // UDP: connect(ip, port); send(req, buffers, count, port, ip, hasCallback), or without port and ip on
  // a connected socket, whose address connect checked.
  guard(handles.udp, ["connect", "connect6"], (a) => refused(a[0], a[1]));
  guard(handles.udp, ["send", "send6"], (a) => a.length > 4 && refused(a[4], a[3]));
  // Adopting a descriptor: stdio stays possible (Node opens it lazily for process.stdout and stderr),
  // anything past it (the IPC channel to the server, libuv's own pipes) is not the component's.
  for (const proto of [handles.tcp, handles.pipe, handles.udp]) {
    guard(proto, ["open"], (a) => typeof a[0] !== "number" || a[0] > 2);
  }
  // The c-ares resolver: servers as [family, ip, port] entries; the system's resolvers on port 53 pass.
  replace(
    handles.resolver,
    "setServers",
    (original) =>
      function (this: object, ...args: unknown[]) {
        for (const entry of Array.isArray(args[0]) ? (args[0] as unknown[]) : []) {
          const [, ip, port] = Array.isArray(entry) ? entry : [];
          if (refused(ip, port)) {
            throw refusedError(refusedMessage("use the DNS server", `${ip}:${port}`, String(ip)));
          }
        }
        return Reflect.apply(original, this, args);
      },
    true,
  );
}

function refusedMessage(verb: string, host: string, ip: string): string {
  const where = host === ip ? ip : `${host} (${ip})`;
  return `refused to ${verb} ${where}: component code may not reach loopback, private or link-local addresses; the operator can allow it with FOUNT_EXECUTOR_ALLOW_PRIVATE or FOUNT_EXECUTOR_ALLOW_HOSTS`;
}

function refusedError(message: string): Error {
  return Object.assign(new Error(message), { code: egressRefusedCode });
}

/** Fails the socket the way a failed connect does: an `error` event, asynchronously. */
function fail(socket: net.Socket, message: string): net.Socket {
  process.nextTick(() => socket.destroy(refusedError(message)));
  return socket;
}
