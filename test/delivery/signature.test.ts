import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { test } from "node:test";
import { Webhook } from "standardwebhooks";
import { signPayload, verifySignature } from "../../src/delivery/signature.ts";

test("signatures verify with the standardwebhooks library, keyed by the decoded secret", () => {
  const secret = `whsec_${randomBytes(24).toString("base64")}`;
  const body = JSON.stringify({ hello: "wörld", n: [1, 2] });
  const ts = Math.floor(Date.now() / 1000);
  const headers = {
    "webhook-id": "del_abc",
    "webhook-timestamp": String(ts),
    "webhook-signature": signPayload(secret, "del_abc", ts, body),
  };
  assert.deepEqual(new Webhook(secret).verify(body, headers), { hello: "wörld", n: [1, 2] });
  assert.match(headers["webhook-signature"], /^v1,[A-Za-z0-9+/]+=*$/);
  // Another id, timestamp or body does not verify.
  assert.throws(() => new Webhook(secret).verify(`${body} `, headers));
  assert.throws(() => new Webhook(secret).verify(body, { ...headers, "webhook-id": "del_other" }));
  assert.throws(() => new Webhook(`whsec_${randomBytes(24).toString("base64")}`).verify(body, headers));
});

test("verifySignature accepts what the standardwebhooks library signs, and nothing else", () => {
  const secret = `whsec_${randomBytes(24).toString("base64")}`;
  const body = JSON.stringify({ hello: "wörld" });
  const now = Math.floor(Date.now() / 1000);
  const signed = new Webhook(secret).sign("del_x", new Date(now * 1000), body);
  assert.equal(verifySignature(secret, "del_x", String(now), body, signed, now), true);
  // One of several signatures (a rotated secret's) is enough.
  assert.equal(verifySignature(secret, "del_x", String(now), body, `v1,AAAA ${signed}`, now), true);
  assert.equal(verifySignature(secret, "del_x", String(now), `${body} `, signed, now), false);
  assert.equal(verifySignature(secret, "del_y", String(now), body, signed, now), false);
  const other = `whsec_${randomBytes(24).toString("base64")}`;
  assert.equal(verifySignature(other, "del_x", String(now), body, signed, now), false);
  // A replay from outside the five minutes' tolerance, and a timestamp that is no number, fail.
  assert.equal(verifySignature(secret, "del_x", String(now), body, signed, now + 301), false);
  assert.equal(verifySignature(secret, "del_x", "x", body, signed, now), false);
});
