import assert from "node:assert/strict";
import { test } from "node:test";
import { ConfigError, loadConfig } from "../../src/config.ts";
import { AddressPolicy, destinationRefusedCode, isPublicAddress } from "../../src/delivery/address-guard.ts";

test("loopback, private, link-local, unique-local and reserved addresses are not public", () => {
  const notPublic = [
    "127.0.0.1",
    "127.8.9.10",
    "10.1.2.3",
    "172.16.0.1",
    "172.31.255.255",
    "192.168.1.1",
    "169.254.169.254",
    "100.64.0.1",
    "0.0.0.0",
    "224.0.0.1",
    "255.255.255.255",
    "::1",
    "::",
    "fc00::1",
    "fd12:3456::1",
    "fe80::1",
    "fe80::1%eth0",
    "ff02::1",
    "::ffff:127.0.0.1",
    "::ffff:7f00:1",
    "::ffff:10.0.0.1",
    "64:ff9b::a00:1",
    "2002:a00:1::",
    "::ffff:0:7f00:1",
    "64:ff9b:1::a00:1",
    "2001:0:4136:e378:8000:63bf:3fff:fdd2",
    "192.88.99.1",
    "not-an-ip",
  ];
  for (const ip of notPublic) assert.equal(isPublicAddress(ip), false, ip);
  const publicOnes = [
    "8.8.8.8",
    "93.184.216.34",
    "172.32.0.1",
    "2606:4700::1111",
    "::ffff:8.8.8.8",
    "2002:808:808::",
  ];
  for (const ip of publicOnes) assert.equal(isPublicAddress(ip), true, ip);
});

test("the allow-list admits hostnames, wildcard suffixes, addresses and CIDR ranges", () => {
  const policy = new AddressPolicy({
    allowPrivate: false,
    allowHosts: ["hooks.internal", "*.corp.example", "10.1.0.0/16", "192.168.5.5", "fd00::/8"],
  });
  assert.equal(
    policy.allowsAddress("hooks.internal", "10.9.9.9"),
    true,
    "a listed name may resolve anywhere",
  );
  assert.equal(policy.allowsAddress("HOOKS.internal.", "10.9.9.9"), true);
  assert.equal(policy.allowsAddress("a.b.corp.example", "127.0.0.1"), true);
  assert.equal(policy.allowsAddress("corp.example", "127.0.0.1"), false, "the wildcard needs a subdomain");
  assert.equal(policy.allowsAddress("x.example", "10.1.200.3"), true, "inside the CIDR range");
  assert.equal(policy.allowsAddress("x.example", "10.2.0.1"), false);
  assert.equal(policy.allowsAddress("x.example", "192.168.5.5"), true);
  assert.equal(policy.allowsAddress("x.example", "fd00::5"), true);
  assert.equal(policy.allowsAddress("x.example", "8.8.8.8"), true, "public addresses are always fine");
  assert.throws(() => policy.checkUrl(new URL("http://127.0.0.1:9/")), { code: destinationRefusedCode });
  assert.throws(() => policy.checkUrl(new URL("http://[::1]:9/")), { code: destinationRefusedCode });
  policy.checkUrl(new URL("http://10.1.2.3/"));
  policy.checkUrl(new URL("http://localhost/")); // names are checked at connect time
  const open = new AddressPolicy({ allowPrivate: true, allowHosts: [] });
  open.checkUrl(new URL("http://127.0.0.1/"));
  assert.equal(open.allowsAddress("localhost", "127.0.0.1"), true);
});

test("the connect-time lookup drops refused addresses and fails when none is left", async () => {
  const policy = new AddressPolicy({ allowPrivate: false, allowHosts: [] });
  const err = await new Promise<NodeJS.ErrnoException | null>((resolve) =>
    policy.lookup("localhost", { all: true }, (e) => resolve(e)),
  );
  assert.equal(err?.code, destinationRefusedCode);
  assert.match(
    err!.message,
    /refused to connect to localhost \(it resolves to a non-public address\).*FOUNT_WEBHOOK_ALLOW_PRIVATE/,
  );
  const allowed = new AddressPolicy({ allowPrivate: false, allowHosts: ["localhost"] });
  const found = await new Promise<unknown>((resolve, reject) =>
    allowed.lookup("localhost", { all: false }, (e, address) => (e ? reject(e) : resolve(address))),
  );
  assert.match(String(found), /^(127\.0\.0\.1|::1)$/);
});

test("FOUNT_WEBHOOK_ALLOW_HOSTS is a comma-separated list of hostnames, addresses and CIDR ranges", () => {
  const config = loadConfig({
    FOUNT_WEBHOOK_ALLOW_HOSTS: " Hooks.Internal, 10.0.0.0/8 ,*.corp.example,::1,fd00::/8",
  });
  assert.deepEqual(config.webhookAllowHosts, [
    "hooks.internal",
    "10.0.0.0/8",
    "*.corp.example",
    "::1",
    "fd00::/8",
  ]);
  assert.deepEqual(loadConfig({}).webhookAllowHosts, []);
  for (const bad of ["10.0.0.0/33", "http://x.example", "a b", "10.0.0.0/8/1", "fd00::/129"]) {
    assert.throws(() => loadConfig({ FOUNT_WEBHOOK_ALLOW_HOSTS: bad }), ConfigError, bad);
  }
});
