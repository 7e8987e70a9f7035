import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { ConfigFile, configPath } from "../../src/cli/config.ts";

test("the config path is FOUNT_CONFIG, else under an absolute XDG_CONFIG_HOME, else ~/.config", () => {
  assert.equal(configPath({ FOUNT_CONFIG: "/x/c", XDG_CONFIG_HOME: "/xdg", HOME: "/h" }), "/x/c");
  assert.equal(configPath({ XDG_CONFIG_HOME: "/xdg", HOME: "/h" }), "/xdg/fount/config");
  assert.equal(configPath({ XDG_CONFIG_HOME: "relative", HOME: "/h" }), "/h/.config/fount/config");
  assert.equal(configPath({ HOME: "/h" }), "/h/.config/fount/config");
});

test("top-level keys are the default profile and sections are named profiles", () => {
  const file = new ConfigFile(
    "/dev/null",
    [
      "# comment",
      "api_key = fnt_top",
      'url = "http://a:1"',
      "",
      "[work]",
      "; another comment",
      "api_key=fnt_work",
      "org_id = o_1",
      "[empty]",
    ].join("\n"),
  );
  assert.deepEqual(file.profile("default"), { api_key: "fnt_top", url: "http://a:1" });
  assert.deepEqual(file.profile("work"), { api_key: "fnt_work", org_id: "o_1" });
  assert.deepEqual(file.profile("empty"), {});
  assert.equal(file.profile("missing"), undefined);
  assert.deepEqual(file.sectionNames(), ["work", "empty"]);
});

test("edits keep comments, order and other keys, and place new keys inside their profile", () => {
  const file = new ConfigFile(
    "/dev/null",
    "# mine\nurl = http://a\n\n[work]\napi_key = old\ncolor = blue\n\n[other]\nx = 1\n",
  );
  file.set("default", { api_key: "k0" });
  file.set("work", { api_key: "new", org_id: "o_2" });
  file.set("fresh", { url: "http://f" });
  assert.equal(
    file.toString(),
    [
      "# mine",
      "url = http://a",
      "api_key = k0",
      "",
      "[work]",
      "api_key = new",
      "color = blue",
      "org_id = o_2",
      "",
      "[other]",
      "x = 1",
      "",
      "[fresh]",
      "url = http://f",
      "",
    ].join("\n"),
  );
  file.set("work", { api_key: undefined });
  assert.deepEqual(file.profile("work"), { color: "blue", org_id: "o_2" });
  file.removeProfile("other");
  assert.deepEqual(file.sectionNames(), ["work", "fresh"]);
  file.removeProfile("default");
  assert.deepEqual(file.profile("default"), {});
  assert.match(file.toString(), /^# mine\n/);
});

test("write creates the directory and a file only its owner can read", () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "fount-config-"));
  try {
    const target = path.join(dir, "nested", "config");
    const file = ConfigFile.read(target);
    file.set("default", { api_key: "fnt_secret" });
    file.write();
    assert.equal(statSync(target).mode & 0o777, 0o600);
    assert.equal(readFileSync(target, "utf8"), "api_key = fnt_secret\n");
    assert.deepEqual(ConfigFile.read(target).profile("default"), { api_key: "fnt_secret" });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
