import { randomFillSync } from "node:crypto";

const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/** Resource ID prefixes of the spec, plus Fount's own (`apn_` accounts, `key_` API keys, `del_` deliveries, `ses_` console sessions, `rpl_` replays). */
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
  | "emt"
  | "ses"
  | "rpl";

/** `<prefix>_<12 base62 chars>`: about 71 bits of randomness, plenty to be unguessable within a store. */
export function newId(prefix: IdPrefix, length = 12): string {
  return `${prefix}_${randomString(length)}`;
}

/**
 * `<prefix>_<8 base62 chars of epoch ms><random base62 chars>`: IDs made later sort after earlier ones
 * (the alphabet is in ASCII order), so a unique index on them grows at its right edge instead of taking
 * a write in a random leaf per insert. Deliveries use them: with random IDs, the unique indexes on
 * delivery IDs were 24 of the 39 WAL frames of a delivery commit (docs/architecture.md#performance).
 */
export function newSortableId(prefix: IdPrefix, nowMs: number, randomLength = 12): string {
  let time = "";
  let rest = Math.max(0, Math.floor(nowMs));
  for (let i = 0; i < 8; i++) {
    time = alphabet[rest % 62] + time;
    rest = Math.floor(rest / 62);
  }
  return `${prefix}_${time}${randomString(randomLength)}`;
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
