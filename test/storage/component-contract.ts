/** The storage contract's cases for components (run by contract.ts on every driver). */
import assert from "node:assert/strict";
import type { ComponentRecord } from "../../src/domain/types.ts";
import type { Storage } from "../../src/storage/port.ts";

type WithStore = (title: string, fn: (s: Storage) => Promise<void>) => void;

export function componentContract(withStore: WithStore, unique: (prefix: string) => string): void {
  const component = (ownerId: string, key: string | null, version: string): ComponentRecord => ({
    id: unique("sc"),
    ownerId,
    key,
    name: `${key ?? "keyless"} ${version}`,
    version,
    code: `export default {} // ${version}`,
    codeHash: unique("hash"),
    componentUrl: null,
    meta: {
      name: key ?? "keyless",
      version,
      type: "source",
      props: [],
      hooks: [],
      methods: [],
      hasRun: true,
    },
    dependencies: {},
    createdAt: 1,
    updatedAt: 1,
  });

  withStore("listNewestComponents gives an owner's newest component of each key, by key", async (s) => {
    const owner = unique("registry");
    await s.insertComponent(component(owner, "b-key", "1.0.0"));
    await s.insertComponent(component(owner, "a-key", "1.0.0"));
    await s.insertComponent(component(owner, "b-key", "1.1.0"));
    await s.insertComponent(component(owner, null, "9.9.9"));
    await s.insertComponent(component(unique("other"), "a-key", "2.0.0"));
    const listed = await s.listNewestComponents(owner);
    assert.deepEqual(
      listed.map((c) => [c.key, c.version]),
      [
        ["a-key", "1.0.0"],
        ["b-key", "1.1.0"],
      ],
    );
    assert.deepEqual(await s.listNewestComponents(unique("nobody")), []);
  });
}
