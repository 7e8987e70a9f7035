import { createCipheriv, createDecipheriv, createHash, createHmac, hash, randomBytes } from "node:crypto";
import { chmodSync, existsSync, readFileSync, statSync, writeFileSync } from "node:fs";
import path from "node:path";

/**
 * Seals secrets at rest (webhook signing secrets, app credentials) with AES-256-GCM. The key comes from
 * `FOUNT_ENCRYPTION_KEY` (base64, 32 bytes) or `<dataDir>/secret.key`, created 0600 on first start
 * (and narrowed to 0600 at each start if found readable by others).
 */
export class SecretBox {
  readonly #key: Buffer;

  constructor(key: Buffer) {
    if (key.length !== 32) throw new Error("The encryption key must be 32 bytes");
    this.#key = key;
  }

  static fromEnvOrFile(envValue: string | undefined, dataDir: string): SecretBox {
    if (envValue) return new SecretBox(Buffer.from(envValue, "base64"));
    const file = path.join(dataDir, "secret.key");
    if (!existsSync(file))
      writeFileSync(file, randomBytes(32).toString("base64"), { mode: 0o600, flag: "wx" });
    else closeToOthers(file);
    return new SecretBox(Buffer.from(readFileSync(file, "utf8").trim(), "base64"));
  }

  /**
   * A secret for another purpose, derived from the key (HMAC-SHA256 of `label`): the same on every node
   * that has the key, and it tells nothing about the key.
   */
  derive(label: string): string {
    return createHmac("sha256", this.#key).update(label).digest("base64url");
  }

  /** `v1.<iv>.<tag>.<ciphertext>`, all base64url. */
  seal(plain: string): string {
    const iv = randomBytes(12);
    const cipher = createCipheriv("aes-256-gcm", this.#key, iv);
    const data = Buffer.concat([cipher.update(plain, "utf8"), cipher.final()]);
    return ["v1", iv, cipher.getAuthTag(), data]
      .map((p) => (typeof p === "string" ? p : p.toString("base64url")))
      .join(".");
  }

  open(sealed: string): string {
    const [version, iv, tag, data] = sealed.split(".");
    if (version !== "v1" || !iv || !tag || data === undefined) throw new Error("Not a sealed secret");
    const decipher = createDecipheriv("aes-256-gcm", this.#key, Buffer.from(iv, "base64url"));
    decipher.setAuthTag(Buffer.from(tag, "base64url"));
    return Buffer.concat([decipher.update(Buffer.from(data, "base64url")), decipher.final()]).toString(
      "utf8",
    );
  }
}

/**
 * API keys are stored as SHA-256: they are long random strings, so a slow hash adds nothing. Hashed on
 * every API request: the one-shot `hash` takes 2 µs where a `createHash` object took 4 to 7.
 */
export function hashApiKey(secret: string): string {
  return hash("sha256", secret, "hex");
}

export function sha256Hex(data: string | Buffer): string {
  return createHash("sha256").update(data).digest("hex");
}

/**
 * Narrows a key file readable by group or others to 0600: executors run under uids of their own and
 * pass through the data dir, so the kernel must refuse them the key (docs/isolation.md, "Server files").
 * A file that cannot be changed (a read-only secret mount) is left as it is.
 */
function closeToOthers(file: string): void {
  try {
    if ((statSync(file).mode & 0o077) !== 0) chmodSync(file, 0o600);
  } catch {
    // Read-only or not ours: reading it below still works, and the operator decides its mode.
  }
}
