/**
 * Which addresses deliveries may connect to. By default only public ones: loopback, private, link-local,
 * unique-local, multicast and reserved ranges are refused, so that a webhook URL cannot reach the
 * server's own network. The check runs on the address actually connected to (a `lookup` for the socket),
 * so a name that resolves to a public address when saved and a private one later (DNS rebinding) is still
 * refused. `FOUNT_WEBHOOK_ALLOW_PRIVATE` lifts the rule; `FOUNT_WEBHOOK_ALLOW_HOSTS` lifts it for some
 * hostnames and CIDR ranges.
 */
import dns from "node:dns";
import { BlockList, isIP, type LookupFunction } from "node:net";
import { v4Ranges, v6Ranges } from "../non-public-ranges.ts";

/** Error code of a refused destination: such a delivery fails at once (retrying cannot help). */
export const destinationRefusedCode = "FOUNT_DESTINATION_REFUSED";

export class DestinationRefusedError extends Error {
  readonly code = destinationRefusedCode;
}

const nonPublic = new BlockList();
for (const [net, prefix] of v4Ranges) nonPublic.addSubnet(net, prefix, "ipv4");
for (const [net, prefix] of v6Ranges) nonPublic.addSubnet(net, prefix, "ipv6");

/** The eight 16-bit groups of an IPv6 address (a trailing dotted quad allowed), or undefined. */
function hextets(ip: string): number[] | undefined {
  let text = ip.split("%")[0]!.toLowerCase();
  const quad = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (quad) {
    const [a, b, c, d] = quad.slice(1).map(Number) as [number, number, number, number];
    text = `${text.slice(0, quad.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail, extra] = text.split("::");
  if (extra !== undefined) return undefined;
  const left = head ? head.split(":") : [];
  const right = tail ? tail.split(":") : [];
  const fill = tail === undefined ? 0 : 8 - left.length - right.length;
  if (fill < 0) return undefined;
  const groups = [...left, ...Array<string>(fill).fill("0"), ...right].map((g) => Number.parseInt(g, 16));
  return groups.length === 8 && groups.every((g) => g >= 0 && g <= 0xffff) ? groups : undefined;
}

/** The IPv4 address an IPv6 address carries (mapped, NAT64, 6to4), whose rules then apply. */
function embeddedV4(h: number[]): string | undefined {
  const v4 = (hi: number, lo: number) => `${hi >> 8}.${hi & 0xff}.${lo >> 8}.${lo & 0xff}`;
  const zeros = (from: number, to: number) => h.slice(from, to).every((g) => g === 0);
  if (zeros(0, 5) && h[5] === 0xffff) return v4(h[6]!, h[7]!); // ::ffff:a.b.c.d
  if (h[0] === 0x64 && h[1] === 0xff9b && zeros(2, 6)) return v4(h[6]!, h[7]!); // 64:ff9b::/96
  if (h[0] === 0x2002) return v4(h[1]!, h[2]!); // 6to4
  return undefined;
}

/** Whether an IP address is publicly routable (not loopback, private, link-local, unique-local, …). */
export function isPublicAddress(ip: string): boolean {
  const family = isIP(ip);
  if (family === 4) return !nonPublic.check(ip, "ipv4");
  if (family !== 6) return false;
  const groups = hextets(ip);
  if (!groups) return false;
  const inner = embeddedV4(groups);
  if (inner !== undefined) return isPublicAddress(inner);
  return !nonPublic.check(ip.split("%")[0]!, "ipv6");
}

export interface AddressPolicyOptions {
  /** Allow every address (`FOUNT_WEBHOOK_ALLOW_PRIVATE`). */
  allowPrivate: boolean;
  /** Hostnames (`hooks.internal`, `*.corp.example`), IP addresses and CIDR ranges allowed anyway. */
  allowHosts: readonly string[];
}

/** Decides, per hostname and resolved address, whether a delivery may connect. */
export class AddressPolicy {
  readonly #allowPrivate: boolean;
  readonly #names = new Set<string>();
  readonly #suffixes: string[] = [];
  readonly #ranges = new BlockList();

  constructor(options: AddressPolicyOptions) {
    this.#allowPrivate = options.allowPrivate;
    for (const raw of options.allowHosts) {
      const entry = raw
        .trim()
        .toLowerCase()
        .replace(/^\[|\]$/g, "");
      if (!entry) continue;
      const [net, bits] = entry.split("/");
      const family = isIP(net!);
      if (family !== 0) {
        const type = family === 4 ? "ipv4" : "ipv6";
        this.#ranges.addSubnet(net!, bits === undefined ? (family === 4 ? 32 : 128) : Number(bits), type);
      } else if (entry.startsWith("*.")) this.#suffixes.push(entry.slice(1));
      else this.#names.add(entry.replace(/\.$/, ""));
    }
  }

  /** Whether the hostname itself is on the allow-list (any address it resolves to is then fine). */
  allowsName(hostname: string): boolean {
    const name = hostname.toLowerCase().replace(/\.$/, "");
    return this.#allowPrivate || this.#names.has(name) || this.#suffixes.some((s) => name.endsWith(s));
  }

  allowsAddress(hostname: string, ip: string): boolean {
    if (this.allowsName(hostname) || isPublicAddress(ip)) return true;
    const family = isIP(ip);
    return family !== 0 && this.#ranges.check(ip.split("%")[0]!, family === 4 ? "ipv4" : "ipv6");
  }

  /**
   * Checks a URL whose host is an IP literal (sockets skip `lookup` for those); throws
   * DestinationRefusedError when refused. Names are checked later, at connect time.
   */
  checkUrl(url: URL): void {
    const host = url.hostname.replace(/^\[|\]$/g, "");
    if (isIP(host) !== 0 && !this.allowsAddress(host, host)) throw refused(host, host);
  }

  /** A socket `lookup` that resolves as usual and keeps only allowed addresses. */
  readonly lookup: LookupFunction = (hostname, options, callback) => {
    dns.lookup(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return callback(err, "", 4);
      const allowed = addresses.filter((a) => this.allowsAddress(hostname, a.address));
      if (allowed.length === 0) return callback(refused(hostname, addresses[0]?.address ?? ""), "", 4);
      if (options.all) return callback(null, allowed);
      callback(null, allowed[0]!.address, allowed[0]!.family);
    });
  };
}

/**
 * The refusal a tenant reads in its delivery's `last_error`. For a name, not the address it resolved to:
 * which private address an internal name has is the operator's network, not the tenant's to map.
 */
function refused(hostname: string, ip: string): DestinationRefusedError {
  const where = hostname === ip ? ip : `${hostname} (it resolves to a non-public address)`;
  return new DestinationRefusedError(
    `refused to connect to ${where}: loopback, private and link-local addresses are not allowed as delivery destinations; ` +
      "set FOUNT_WEBHOOK_ALLOW_PRIVATE=true or list the host in FOUNT_WEBHOOK_ALLOW_HOSTS to allow it",
  );
}
