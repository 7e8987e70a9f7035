/**
 * The registry of published components: saved components owned by `registry`, found by key. Fount's own
 * components (the repository's `registry/` folder) are published at every start; an admin publishes
 * more through `POST /v1/admin/registry`. Publishing the same code under the same key again is a no-op,
 * so restarts never add duplicates; changed code is a new version that key lookups then find.
 */
import { readdir, readFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { AsyncLock } from "../../async-lock.ts";
import { sha256Hex } from "../../crypto/secret-box.ts";
import { AppError } from "../../errors.ts";
import type { Storage } from "../../storage/port.ts";
import type { ComponentRecord } from "../types.ts";
import { type ComponentCatalog, maxCodeBytes, registryOwner } from "./components.ts";

/** The components that ship with Fount, at the repository root. */
export const registryDir = fileURLToPath(new URL("../../../registry", import.meta.url));

/** What publishing needs; the app's Services satisfy it. */
export interface RegistryDeps {
  catalog: ComponentCatalog;
  store: Storage;
  logger: {
    info(obj: object, msg?: string): void;
    error(obj: object, msg?: string): void;
  };
}

/** The outcome of one publish: the registry component that now answers for the key. */
export interface Published {
  component: ComponentRecord;
  /** False when the same code was already the registry's newest version of this key. */
  created: boolean;
}

// Registry keys end up in paths (`/v1/components/registry/{key}`), so no slashes.
const keyPattern = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$/;
// Semantic Versioning 2.0.0: MAJOR.MINOR.PATCH, optional pre-release and build metadata.
const semverPattern =
  /^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*)?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$/;
// A literal `key: "…"` in the code: lets an unchanged component be recognised without building it.
const literalKey = /\bkey\s*:\s*(["'`])([A-Za-z0-9_.-]{1,200})\1/;
const componentFile = /\.(mjs|js|ts)$/;

/**
 * Publishes `code` to the registry unless the registry's newest component with its key has the same
 * code hash. The code must declare a `key` and a semantic `version` (422 otherwise); nothing is stored
 * when it does not.
 */
export async function publishToRegistry(
  deps: RegistryDeps,
  code: string,
  options: { url?: string } = {},
): Promise<Published> {
  if (Buffer.byteLength(code) > maxCodeBytes)
    throw new AppError("payload_too_large", "Component code is over 1 MB");
  const hash = sha256Hex(code);
  const hinted = literalKey.exec(code)?.[2];
  if (hinted !== undefined) {
    // Same code stored under this key means the same definition: no need to build it again.
    const current = await deps.store.findComponentByKey([registryOwner], hinted);
    if (current?.codeHash === hash) return { component: current, created: false };
  }
  // Built and inspected once: the save below stores this build rather than making it again.
  const prepared = await deps.catalog.prepare(registryOwner, code);
  const key = prepared.meta.key;
  if (key === undefined || key === "") {
    throw new AppError("component_invalid", "A registry component needs a `key`", {
      details: { field: "key" },
    });
  }
  if (!keyPattern.test(key)) {
    throw new AppError(
      "component_invalid",
      `The key ${JSON.stringify(key)} must be letters, digits, '.', '_' or '-' (at most 200)`,
      {
        details: { field: "key" },
      },
    );
  }
  if (!semverPattern.test(prepared.meta.version)) {
    throw new AppError(
      "component_invalid",
      `A registry component needs a semantic version (like 1.2.3), not ${JSON.stringify(prepared.meta.version)}`,
      {
        details: { field: "version" },
      },
    );
  }
  // Looked up again and saved while nothing else publishes this key: nodes starting together on an
  // empty PostgreSQL store publish the same registry folder at once, and each made its own copy (as
  // two requests publishing the same code at once did).
  return exclusively(deps.store, `registry.${key}`, async () => {
    const current = await deps.store.findComponentByKey([registryOwner], key);
    if (current?.codeHash === hash) return { component: current, created: false };
    const component = await deps.catalog.save(registryOwner, { code, url: options.url }, prepared);
    return { component, created: true };
  });
}

/** Publishes in this process, one at a time (few, and rare: at start and by admins). */
const publishing = new AsyncLock();

/**
 * Runs `fn` while nothing else runs under `name`: in this process after the publishes before it, and
 * with several nodes under an advisory lock held by a transaction of its own (`fn` works on other
 * connections, and what it commits is visible before the lock is let go).
 */
function exclusively<T>(store: Storage, name: string, fn: () => Promise<T>): Promise<T> {
  return publishing.run(() =>
    store.cluster
      ? store.transaction(async (tx) => {
          await tx.acquireTransactionLock(name);
          return fn();
        })
      : fn(),
  );
}

/** What a folder publish did, file by file (paths relative to the folder). */
export interface FolderReport {
  published: string[];
  unchanged: string[];
  failed: Array<{ file: string; error: string }>;
}

/**
 * Publishes every `.mjs`, `.js` and `.ts` file under `dir` (each a self-contained component). A file
 * that fails is logged and skipped; a missing folder publishes nothing. Never throws.
 */
export async function publishRegistryFolder(
  deps: RegistryDeps,
  dir: string = registryDir,
): Promise<FolderReport> {
  const report: FolderReport = { published: [], unchanged: [], failed: [] };
  let files: string[];
  try {
    files = (await readdir(dir, { recursive: true, withFileTypes: true }))
      .filter((e) => e.isFile() && componentFile.test(e.name) && !e.name.endsWith(".d.ts"))
      .map((e) => path.relative(dir, path.join(e.parentPath, e.name)))
      .sort();
  } catch (err) {
    deps.logger.error({ err, dir }, "cannot read the registry folder; no components published from it");
    return report;
  }
  // One at a time: two first builds in a fresh data folder can race in the builder (its tree walk
  // that makes the package folder readable meets the other build's temporary files).
  for (const file of files) {
    try {
      const code = await readFile(path.join(dir, file), "utf8");
      const { component, created } = await publishToRegistry(deps, code);
      (created ? report.published : report.unchanged).push(file);
      if (created) {
        deps.logger.info(
          { file, key: component.key, version: component.version, componentId: component.id },
          "published registry component",
        );
      }
    } catch (err) {
      report.failed.push({ file, error: (err as Error).message });
      deps.logger.error({ err, file }, "registry component not published");
    }
  }
  return report;
}
