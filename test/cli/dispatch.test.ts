import assert from "node:assert/strict";
import { Readable } from "node:stream";
import { test } from "node:test";
import type { Command, Context, Io } from "../../src/cli/command.ts";
import { commands, groups } from "../../src/cli/commands/index.ts";
import { main, Registry } from "../../src/cli/main.ts";

function memoryIo(): Io & { out: () => string; err: () => string } {
  let out = "";
  let err = "";
  return {
    stdout: { write: (t: string) => (out += t) },
    stderr: { write: (t: string) => (err += t) },
    stdin: Readable.from([]),
    env: { FOUNT_CONFIG: "/nonexistent/fount-config" },
    out: () => out,
    err: () => err,
  };
}

/** A registry of probes that record what they were called with. */
function probes() {
  const seen: Context[] = [];
  const make = (name: string, extra: Partial<Command> = {}): Command => ({
    name,
    summary: `the ${name} probe`,
    usage: "",
    ...extra,
    async run(ctx) {
      seen.push(ctx);
      return undefined;
    },
  });
  return {
    seen,
    commands: [
      make("list things", {
        aliases: ["list th"],
        options: { all: { type: "boolean", description: "all" } },
      }),
      make("list things deep", { args: { max: 1 } }),
      make("go", {
        args: { min: 1, max: 2 },
        options: { name: { type: "string", short: "n", description: "n" } },
      }),
    ],
  };
}

test("the real registry is consistent: unique names, no option shadowing a global one", () => {
  assert.doesNotThrow(() => new Registry(commands, groups));
  for (const c of commands) assert.ok(c.summary && c.usage !== undefined, c.name);
});

test("a command option clashing with a global option is refused", () => {
  const bad: Command = {
    name: "x",
    summary: "",
    usage: "",
    options: { json: { type: "string", description: "" } },
    run: async () => undefined,
  };
  assert.throws(() => new Registry([bad], {}), /clashes with the global --json/);
});

test("global flags may come before the command words, and command options anywhere", async () => {
  const p = probes();
  const io = memoryIo();
  assert.equal(
    await main(["-p", "work", "--json", "go", "-n", "x", "arg1", "--url", "http://h"], io, p.commands, {}),
    0,
  );
  const ctx = p.seen[0]!;
  assert.equal(ctx.command.name, "go");
  assert.deepEqual(ctx.args, ["arg1"]);
  assert.equal(ctx.string("name"), "x");
  assert.deepEqual(
    { ...ctx.globals },
    { profile: "work", url: "http://h", apiKey: undefined, org: undefined, json: true },
  );
});

test("the longest matching name wins, and aliases work", async () => {
  const p = probes();
  await main(["list", "things", "deep", "z"], memoryIo(), p.commands, {});
  await main(["list", "th", "--all"], memoryIo(), p.commands, {});
  assert.deepEqual(
    p.seen.map((c) => [c.command.name, c.args, c.boolean("all")]),
    [
      ["list things deep", ["z"], false],
      ["list things", [], true],
    ],
  );
});

test("argument counts are checked before the command runs", async () => {
  const p = probes();
  const io = memoryIo();
  assert.equal(await main(["go"], io, p.commands, {}), 2);
  assert.equal(await main(["go", "a", "b", "c"], io, p.commands, {}), 2);
  assert.match(io.err(), /Unexpected argument "c"/);
  assert.equal(p.seen.length, 0);
});

test("--help of a command, a group and the top level print to stdout and exit 0", async () => {
  const p = probes();
  const io = memoryIo();
  assert.equal(await main(["go", "--help"], io, p.commands, {}), 0);
  assert.match(io.out(), /^Usage: fount go/);
  assert.equal(await main(["list", "-h"], io, p.commands, { list: "List stuff" }), 0);
  assert.match(io.out(), /List stuff\n\nCommands:\n {2}list things /);
  assert.equal(await main([], io, p.commands, {}), 0);
  assert.equal(p.seen.length, 0);
});

test("an error thrown with a code prints as `fount: <message> (<code>)` and exits 1", async () => {
  const io = memoryIo();
  const failing: Command = {
    name: "boom",
    summary: "",
    usage: "",
    run: async () => {
      throw Object.assign(new Error("It broke"), { code: "conflict" });
    },
  };
  assert.equal(await main(["boom"], io, [failing], {}), 1);
  assert.equal(io.err(), "fount: It broke (conflict)\n");
});
