/**
 * The address ranges that are not the public internet: loopback, private, link-local, unique-local,
 * multicast, documentation and reserved ones. Webhook deliveries refuse them (delivery/address-guard.ts)
 * and so do executors' egress rules (runtime/egress.ts); both read this one list, below them both.
 */

/** IPv4 ranges that are not public, as [network, prefix length]. */
export const v4Ranges: Array<[string, number]> = [
  ["0.0.0.0", 8], // "this" network
  ["10.0.0.0", 8], // private
  ["100.64.0.0", 10], // carrier-grade NAT
  ["127.0.0.0", 8], // loopback
  ["169.254.0.0", 16], // link-local (cloud metadata services live here)
  ["172.16.0.0", 12], // private
  ["192.0.0.0", 24], // IETF protocol assignments
  ["192.0.2.0", 24], // documentation
  ["192.88.99.0", 24], // 6to4 relay anycast (deprecated)
  ["192.168.0.0", 16], // private
  ["198.18.0.0", 15], // benchmarking
  ["198.51.100.0", 24], // documentation
  ["203.0.113.0", 24], // documentation
  ["224.0.0.0", 4], // multicast
  ["240.0.0.0", 4], // reserved, broadcast
];
/** IPv6 ranges that are not public (IPv6 forms of IPv4 addresses are judged by their IPv4 part). */
export const v6Ranges: Array<[string, number]> = [
  ["::", 96], // unspecified, loopback, IPv4-compatible
  ["::ffff:0:0:0", 96], // IPv4-translated (SIIT): any IPv4 address, private ones included
  ["64:ff9b:1::", 48], // local-use NAT64: IPv4 addresses of the operator's own network
  ["100::", 64], // discard
  ["2001::", 32], // Teredo tunnels: an address of another network inside
  ["2001:db8::", 32], // documentation
  ["fc00::", 7], // unique-local
  ["fe80::", 10], // link-local
  ["fec0::", 10], // site-local (deprecated)
  ["ff00::", 8], // multicast
];
