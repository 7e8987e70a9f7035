/**
 * FOUNT_ENDPOINT_URL and FOUNT_ENDPOINT_PORT as the configuration reads them (src/endpoint-origin.ts),
 * and the cookie names Fount keeps to itself (src/http/fount-cookies.ts).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { ConfigError, loadConfig } from "../src/config.ts";
import { EndpointHosts, endpointUrlOf } from "../src/endpoint-origin.ts";
import {
  componentCookie,
  componentCookies,
  isFountCookieName,
  setsFountCookie,
  withoutFountCookies,
} from "../src/http/fount-cookies.ts";

test("unset, endpoints are PUBLIC_URL's host on a port of their own, PORT+1 by default", () => {
  const plain = loadConfig({});
  assert.equal(plain.endpointPort, 8788);
  assert.equal(plain.endpointUrl, "http://127.0.0.1:8788");
  assert.equal(endpointUrlOf(plain.endpointUrl, "abc"), "http://127.0.0.1:8788/e/abc");
  const proxied = loadConfig({ PORT: "9000", PUBLIC_URL: "https://fount.example.com/" });
  assert.equal(proxied.endpointUrl, "https://fount.example.com:9001");
  const chosen = loadConfig({ FOUNT_ENDPOINT_PORT: "7000" });
  assert.equal(chosen.endpointUrl, "http://127.0.0.1:7000");
  assert.equal(loadConfig({ PORT: "0" }).endpointPort, 0);
});

test("a base URL or a {id} host pattern is taken; the console's origin and malformed values are refused", () => {
  assert.equal(
    loadConfig({ FOUNT_ENDPOINT_URL: "https://Hooks.Example.com/" }).endpointUrl,
    "https://hooks.example.com",
  );
  const pattern = loadConfig({ FOUNT_ENDPOINT_URL: "https://{id}.Hooks.Example.com:8443" }).endpointUrl;
  assert.equal(pattern, "https://{id}.hooks.example.com:8443");
  assert.equal(endpointUrlOf(pattern, "abc"), "https://abc.hooks.example.com:8443");
  // Another port of the console's host is another origin.
  const sibling = {
    PUBLIC_URL: "https://fount.example.com",
    FOUNT_ENDPOINT_URL: "https://fount.example.com:8443",
  };
  assert.equal(loadConfig(sibling).endpointUrl, "https://fount.example.com:8443");

  const refused: Array<[NodeJS.ProcessEnv, RegExp]> = [
    [
      { PUBLIC_URL: "https://fount.example.com", FOUNT_ENDPOINT_URL: "https://fount.example.com:443/" },
      /origin of PUBLIC_URL/,
    ],
    [{ FOUNT_ENDPOINT_URL: "http://127.0.0.1:8787" }, /origin of PUBLIC_URL/],
    [
      { PUBLIC_URL: "https://app.example.com", FOUNT_ENDPOINT_URL: "https://{id}.example.com" },
      /origin of PUBLIC_URL/,
    ],
    // A trailing dot names the same host in DNS: the console's origin still.
    [
      { PUBLIC_URL: "https://fount.example.com.", FOUNT_ENDPOINT_URL: "https://fount.example.com" },
      /origin of PUBLIC_URL/,
    ],
    [
      { PUBLIC_URL: "https://fount.example.com", FOUNT_ENDPOINT_URL: "https://fount.example.com." },
      /origin of PUBLIC_URL/,
    ],
    [{ FOUNT_ENDPOINT_URL: "https://hooks.example.com/in" }, /no path/],
    [{ FOUNT_ENDPOINT_URL: "https://hooks.example.com?a=1" }, /no path/],
    [{ FOUNT_ENDPOINT_URL: "https://u:p@hooks.example.com" }, /credentials/],
    [{ FOUNT_ENDPOINT_URL: "ftp://hooks.example.com" }, /http:\/\/ or https:\/\//],
    [{ FOUNT_ENDPOINT_URL: "hooks.example.com" }, /not a URL/],
    [{ FOUNT_ENDPOINT_URL: "https://a.{id}.example.com" }, /first label/],
    [{ FOUNT_ENDPOINT_URL: "https://x{id}.example.com" }, /first label/],
    [{ FOUNT_ENDPOINT_URL: "https://{id}.{id}.example.com" }, /first label/],
    [{ FOUNT_ENDPOINT_URL: "https://hooks.example.com/{id}" }, /first label/],
    [{ PORT: "9000", FOUNT_ENDPOINT_PORT: "9000" }, /other than PORT/],
    [{ PORT: "65535" }, /FOUNT_ENDPOINT_PORT/],
    [{ PUBLIC_URL: "fount.example.com" }, /PUBLIC_URL must be/],
  ];
  for (const [env, message] of refused) {
    assert.throws(
      () => loadConfig(env),
      (err: Error) => err instanceof ConfigError && message.test(err.message),
      JSON.stringify(env),
    );
  }
});

test("endpoint hosts: another host name is matched without its port, the console's own with it", () => {
  const separate = new EndpointHosts("https://hooks.example.com", "https://fount.example.com");
  assert.equal(separate.match("hooks.example.com"), "");
  assert.equal(separate.match("HOOKS.example.com:8443"), "");
  assert.equal(separate.match("fount.example.com"), undefined);
  assert.equal(separate.match(undefined), undefined);
  const sameHost = new EndpointHosts("http://127.0.0.1:8788", "http://127.0.0.1:8787");
  assert.equal(sameHost.match("127.0.0.1:8788"), "");
  assert.equal(sameHost.match("127.0.0.1:8787"), undefined);
  assert.equal(sameHost.match("127.0.0.1"), undefined);
  const defaultPort = new EndpointHosts("https://fount.example.com", "https://fount.example.com:8443");
  assert.equal(defaultPort.match("fount.example.com:443"), "");
  assert.equal(defaultPort.match("fount.example.com:8443"), undefined);
  const ipv6 = new EndpointHosts("http://[::1]:8788", "http://127.0.0.1:8787");
  assert.equal(ipv6.match("[::1]:9999"), "");
  const pattern = new EndpointHosts("https://{id}.hooks.example.com", "https://fount.example.com");
  assert.equal(pattern.match("abc.hooks.example.com:443"), "abc");
  assert.equal(pattern.match("hooks.example.com"), undefined);
  assert.equal(pattern.match(".hooks.example.com"), undefined);
  // A fully qualified name (trailing dot) is the same host: the endpoint origin, never the console's.
  assert.equal(separate.match("hooks.example.com."), "");
  assert.equal(separate.match("hooks.example.com.:8443"), "");
  assert.equal(sameHost.match("127.0.0.1.:8788"), "");
  assert.equal(defaultPort.match("fount.example.com.:443"), "");
  assert.equal(defaultPort.match("fount.example.com.:8443"), undefined);
  assert.equal(pattern.match("abc.hooks.example.com."), "abc");
  assert.equal(pattern.match("ABC.hooks.example.com.:443"), "abc");
  assert.equal(pattern.match("hooks.example.com."), undefined);
  // Scripts never run on the console's host, whichever way it is spelled.
  assert.equal(
    new EndpointHosts("https://fount.example.com.:8443", "https://fount.example.com").scriptsMayRun,
    false,
  );
  // Scripts may run only on https, on a host name of each endpoint's own: on a shared endpoint host,
  // one tenant's page could script another's (its cookies, a service worker over its paths).
  assert.equal(pattern.scriptsMayRun, true);
  assert.equal(separate.scriptsMayRun, false);
  assert.equal(sameHost.scriptsMayRun, false);
  assert.equal(defaultPort.scriptsMayRun, false);
  assert.equal(new EndpointHosts("http://hooks.test", "http://console.test").scriptsMayRun, false);
});

test("Fount's cookie names, with their prefixes and in any case, are told apart from every other", () => {
  for (const name of [
    "fount_session",
    "__Host-fount_session",
    "__Secure-fount_x",
    "FOUNT_SESSION",
    " fount_a",
  ])
    assert.equal(isFountCookieName(name), true, name);
  for (const name of ["fount", "myfount_session", "__Host-other", "session", "fount-session"])
    assert.equal(isFountCookieName(name), false, name);
  assert.equal(withoutFountCookies("a=1; b=2"), "a=1; b=2");
  assert.equal(withoutFountCookies("fount_session=x; a=1;__Host-fount_session=y;b=2"), "a=1;b=2");
  assert.equal(withoutFountCookies("fount_session=x"), undefined);
  assert.equal(withoutFountCookies("fount_session"), undefined);
  assert.equal(withoutFountCookies("a=fount_session"), "a=fount_session");
  assert.equal(setsFountCookie("fount_session=x; Path=/"), true);
  assert.equal(setsFountCookie("__Host-Fount_Session=x"), true);
  assert.equal(setsFountCookie("fount_session; Path=/"), true);
  assert.equal(setsFountCookie("fount_x"), true);
  assert.equal(setsFountCookie("a=fount_session=x"), false);
  assert.equal(setsFountCookie("a; fount_session=x"), false);
  // A nameless cookie is sent as its value alone, which reads as a cookie of that name.
  assert.equal(setsFountCookie("=fount_session=attacker; Path=/v1"), true);
  assert.equal(setsFountCookie(" =__Host-fount_session=x"), true);
  assert.equal(setsFountCookie("=other=x"), false);
});

test("a component's cookie leaves host-only, kept to a scope when given; nameless ones and Fount's never leave", () => {
  for (const refused of [
    "=fount_session=x; Path=/v1",
    "=x",
    " = x",
    "novalue",
    "novalue; Path=/",
    "fount_a=1",
  ]) {
    assert.equal(componentCookie(refused), undefined, refused);
    assert.equal(componentCookie(refused, "/e/abc"), undefined, refused);
  }
  assert.equal(componentCookie("a=1; Path=/; Max-Age=9"), "a=1; Path=/; Max-Age=9");
  assert.equal(componentCookie("a=1;Domain=example.com;Path=/"), "a=1; Path=/");
  assert.equal(componentCookie("a=1; DOMAIN = .example.com ; Secure; domain=x"), "a=1; Secure");
  assert.equal(componentCookie("a=1", "/e/abc"), "a=1; Path=/e/abc");
  assert.equal(componentCookie("a=1; Path=/; Domain=x; HttpOnly", "/e/abc"), "a=1; HttpOnly; Path=/e/abc");
  assert.equal(componentCookie("a=1; Path=/sub/x", "/e/abc"), "a=1; Path=/e/abc/sub/x");
  // The last Path counts, as in a browser; one not starting with `/` stands for the default.
  assert.equal(componentCookie("a=1; Path=/one; Path=/two", "/e/abc"), "a=1; Path=/e/abc/two");
  assert.equal(componentCookie("a=1; Path=/one; Path=rel", "/e/abc"), "a=1; Path=/e/abc");
  assert.equal(componentCookie("a=1; Path", "/e/abc"), "a=1; Path=/e/abc");
  // A Path a browser would ignore (over 1024 bytes) is not made: the scope alone.
  assert.equal(componentCookie(`a=1; Path=/${"p".repeat(1100)}`, "/e/abc"), "a=1; Path=/e/abc");
  // A value that reads `name=` is the value of a named cookie: the browser sends `a=fount_session=x`.
  assert.equal(componentCookie("a=fount_session=x"), "a=fount_session=x");
  assert.deepEqual(componentCookies(["a=1", "=b", "fount_session=1"], "/e/x"), ["a=1; Path=/e/x"]);
  assert.deepEqual(componentCookies("c=1; Domain=d"), ["c=1"]);
});

test("cookies are scoped to an endpoint wherever endpoints share a host, the console's (on another port) or each other's", () => {
  const same = new EndpointHosts("http://127.0.0.1:8788", "http://127.0.0.1:8787");
  assert.equal(same.cookieScope("abc"), "/e/abc");
  assert.equal(
    new EndpointHosts("https://fount.example.com:8443", "https://fount.example.com.").cookieScope("a"),
    "/e/a",
  );
  for (const [setting, publicUrl, scope] of [
    ["https://hooks.example.net", "https://fount.example.com", "/e/abc"],
    ["https://hooks.example.com/in", "https://example.com", "/in/e/abc"],
    ["https://{id}.hooks.example.net", "https://fount.example.com", undefined],
    ["http://localhost:8788", "http://127.0.0.1:8787", "/e/abc"],
  ] as const) {
    const hosts = new EndpointHosts(setting, publicUrl);
    assert.equal(hosts.cookieScope("abc"), scope, setting);
  }
});
