/**
 * Storage contract for what an owner's saved components keep: their bytes as stored, the same code found
 * again while it is the newest of its key, and the package versions of the components sources use.
 */
import assert from "node:assert/strict";
import type { ComponentRecord } from "../../src/domain/types.ts";
import type { ComponentMeta } from "../../src/runtime/types.ts";
import type { Storage } from "../../src/storage/port.ts";

type WithStore = (title: string, fn: (s: Storage) => Promise<void>) => void;

export function componentContract(withStore: WithStore, unique: (prefix: string) => string): void {
  const component = (
    ownerId: string,
    key: string | null,
    code: string,
    extra: Partial<ComponentRecord> = {},
  ): ComponentRecord => {
    const meta: ComponentMeta = {
      name: "C",
      version: "1",
      type: "source",
      props: [],
      hooks: [],
      methods: [],
      hasRun: true,
    } as ComponentMeta;
    return {
      id: unique("sc"),
      ownerId,
      key,
      name: "C",
      version: "1",
      code,
      codeHash: `hash-of-${code}`,
      componentUrl: null,
      meta,
      dependencies: {},
      createdAt: 1,
      updatedAt: 1,
      ...extra,
    };
  };
  const storedBytes = (c: ComponentRecord) =>
    Buffer.byteLength(c.code) +
    Buffer.byteLength(JSON.stringify(c.meta)) +
    Buffer.byteLength(JSON.stringify(c.dependencies));

  withStore(
    "an owner's component bytes are its records' code, definition and versions, as stored",
    async (s) => {
      const owner = unique("u");
      assert.equal(await s.componentBytes(owner), 0);
      const a = component(owner, "k", "é".repeat(100), { dependencies: { axios: "1.7.9" } });
      const b = component(owner, null, "x");
      await s.insertComponent(a);
      await s.insertComponent(b);
      await s.insertComponent(component(unique("u"), "k", "other owner's"));
      assert.equal(await s.componentBytes(owner), storedBytes(a) + storedBytes(b));
    },
  );

  withStore(
    "the same code is found while it is the newest of its key, and only with the same URL",
    async (s) => {
      const owner = unique("u");
      const v1 = component(owner, "k", "v1");
      await s.insertComponent(v1);
      assert.equal((await s.findSameComponent(owner, v1.codeHash, null))?.id, v1.id);
      assert.equal(await s.findSameComponent(owner, v1.codeHash, "https://example.com/c.js"), undefined);
      assert.equal(await s.findSameComponent(unique("u"), v1.codeHash, null), undefined);
      await s.insertComponent(component(owner, "k", "v2"));
      assert.equal(await s.findSameComponent(owner, v1.codeHash, null), undefined, "v2 is the newest of k");
      const fromUrl = component(owner, null, "u", { componentUrl: "https://example.com/c.js" });
      await s.insertComponent(fromUrl);
      assert.equal(
        (await s.findSameComponent(owner, fromUrl.codeHash, "https://example.com/c.js"))?.id,
        fromUrl.id,
      );
      assert.equal(await s.findSameComponent(owner, fromUrl.codeHash, null), undefined);
    },
  );

  withStore("the package versions of components that sources use are listed once per set", async (s) => {
    const owner = unique("u");
    const used = component(owner, "a", "a", { dependencies: { "fount-a": "1.0.0" } });
    const twin = component(owner, "b", "b", { dependencies: { "fount-a": "1.0.0" } });
    const unused = component(owner, "c", "c", { dependencies: { "fount-c": "1.0.0" } });
    for (const c of [used, twin, unused]) await s.insertComponent(c);
    for (const c of [used, twin]) {
      await s.insertSource({
        id: unique("dc"),
        ownerId: owner,
        createdBy: owner,
        componentId: c.id,
        name: unique("s"),
        nameSlug: unique("s"),
        active: true,
        props: {},
        endpointId: null,
        createdAt: 1,
        updatedAt: 1,
      });
    }
    assert.deepEqual(await s.listDeployedDependencies(), [{ "fount-a": "1.0.0" }]);
  });
}
