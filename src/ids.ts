import { randomFillSync } from "node:crypto";

const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/** Resource ID prefixes of the spec, plus Fount's own (`apn_` accounts, `key_` API keys, `del_` deliveries). */
export type IdPrefix =
  | "sc"
  | "dc"
  | "p"
  | "wh"
  | "sub"
  | "u"
  | "o"
  | "d"
  | "apn"
  | "key"
  | "asub"
  | "del"
  | "emt";

/** `<prefix>_<12 base62 chars>`: about 71 bits of randomness, plenty to be unguessable within a store. */
export function newId(prefix: IdPrefix, length = 12): string {
  return `${prefix}_${randomString(length)}`;
}

/**
 * Random bytes come from a pooled buffer refilled from the CSPRNG: one `randomBytes` call per ID cost
 * more than the rest of storing an event.
 */
const pool = Buffer.alloc(4096);
let poolAt = pool.length;

function randomByte(): number {
  if (poolAt === pool.length) {
    randomFillSync(pool);
    poolAt = 0;
  }
  return pool[poolAt++];
}

export function randomString(length: number): string {
  // Rejection sampling keeps every character equally likely (256 is not a multiple of 62).
  let out = "";
  while (out.length < length) {
    const byte = randomByte();
    if (byte < 248) out += alphabet[byte % 62];
  }
  return out;
}
