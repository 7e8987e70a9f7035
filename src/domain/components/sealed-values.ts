/** Secret prop values as they are stored (sealed) and shown by the API (masked). */

/** What the API shows in place of a secret prop's value. */
export const secretMask = "**********";

/** A stored secret: sealed so that neither the store nor the API ever holds it in clear. */
export interface SealedValue {
  $sealed: string;
}

export interface Sealer {
  seal(plain: string): string;
  open(sealed: string): string;
}

export function isSealed(v: unknown): v is SealedValue {
  return !!v && typeof v === "object" && typeof (v as SealedValue).$sealed === "string";
}
