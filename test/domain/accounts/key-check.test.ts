/**
 * The encryption key check on stores made before it existed (no check value yet): the key is accepted
 * when it opens a secret already sealed there, or when there is none; on both drivers.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { SecretBox } from "../../../src/crypto/secret-box.ts";
import { checkEncryptionKey } from "../../../src/domain/accounts/key-check.ts";
import type { Storage } from "../../../src/storage/port.ts";
import { openSqliteStorage } from "../../../src/storage/sqlite/driver.ts";
import { openTestPostgres } from "../../pg-schemas.ts";

const drivers: Array<[string, () => Promise<Storage>]> = [
  ["sqlite", async () => openSqliteStorage({ dataDir: mkdtempSync(path.join(os.tmpdir(), "fount-key-")) })],
  ["postgres", () => openTestPostgres()],
];

const box = () => new SecretBox(randomBytes(32));

/** A webhook whose signing secret `secrets` sealed, as a store written before the check would hold. */
async function sealedWebhook(store: Storage, secrets: SecretBox): Promise<void> {
  await store.insertWebhook({
    id: "wh_old",
    ownerId: "u_old",
    createdBy: "u_old",
    name: null,
    description: null,
    url: "https://example.com/",
    active: true,
    signingSecretSealed: secrets.seal("whsec"),
    allowPrivate: false,
    createdAt: 1,
    updatedAt: 1,
  });
}

const refused = (err: Error) => {
  assert.equal((err as Error & { code: string }).code, "encryption_key_mismatch");
  assert.match(err.message, /^the encryption key \(KEY\) cannot open the secrets already in this store/);
  return true;
};

for (const [driver, open] of drivers) {
  test(`${driver}: an older store's secrets decide the key, and the check value is written once it opens them`, async () => {
    const store = await open();
    try {
      const [right, wrong] = [box(), box()];
      await sealedWebhook(store, right);
      await assert.rejects(checkEncryptionKey(store, wrong, "KEY"), refused);
      assert.equal(await store.getMeta("encryption_check"), undefined, "a refused key writes nothing");
      await checkEncryptionKey(store, right, "KEY");
      assert.ok(await store.getMeta("encryption_check"));
      await checkEncryptionKey(store, right, "KEY");
      await assert.rejects(checkEncryptionKey(store, wrong, "KEY"), refused);
    } finally {
      await store.close();
    }
  });

  test(`${driver}: a store without secrets takes the first key, then refuses others`, async () => {
    const store = await open();
    try {
      const [first, other] = [box(), box()];
      await checkEncryptionKey(store, first, "KEY");
      await assert.rejects(checkEncryptionKey(store, other, "KEY"), refused);
    } finally {
      await store.close();
    }
  });
}
