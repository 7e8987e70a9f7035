/**
 * The encryption key check at start: a node whose key cannot open the secrets already sealed in the
 * store refuses to start, before it seals anything new that the other nodes could not open.
 */
import type { SecretBox } from "../../crypto/secret-box.ts";
import type { Storage } from "../../storage/port.ts";

/** The meta key of the sealed check value. */
const checkKey = "encryption_check";
const checkText = "fount encryption key check";

/** Thrown at start when the key is not the store's; the message is one line for the operator. */
export class EncryptionKeyMismatchError extends Error {
  readonly code = "encryption_key_mismatch";
}

/**
 * Opens the store's check value with `secrets`, or, on a store without one (a first start, or one made
 * before the check existed), writes it once the key opens a secret already sealed there (or none is).
 * `keySource` names where the key came from, for the message.
 */
export async function checkEncryptionKey(
  store: Storage,
  secrets: SecretBox,
  keySource: string,
): Promise<void> {
  const opens = (sealed: string, expected?: string) => {
    try {
      const plain = secrets.open(sealed);
      return expected === undefined || plain === expected;
    } catch {
      return false;
    }
  };
  let check = await store.getMeta(checkKey);
  if (check === undefined) {
    const sample = await store.anySealedSecret();
    if (sample !== undefined && !opens(sample)) throw mismatch(keySource);
    // Two nodes starting at once may both get here: the first value stored is the one both check.
    check = await store.putMetaIfAbsent(checkKey, secrets.seal(checkText));
  }
  if (!opens(check, checkText)) throw mismatch(keySource);
}

function mismatch(keySource: string): EncryptionKeyMismatchError {
  return new EncryptionKeyMismatchError(
    `the encryption key (${keySource}) cannot open the secrets already in this store: start with the key they were sealed with (every node of a cluster needs the same FOUNT_ENCRYPTION_KEY)`,
  );
}
