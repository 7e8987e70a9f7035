/**
 * Watching the files of a component for `fount dev`. Folders are watched rather than the files
 * themselves: editors often save by writing a new file and renaming it over the old one, after which
 * a watch on the old file would see nothing more.
 */
import { type FSWatcher, watch } from "node:fs";
import path from "node:path";

// Editors write a file in several steps (truncate, write, rename, chmod); one rebuild per save.
const defaultSettleMs = 150;

/** Calls back once per burst of changes to any of a set of files, with the files that changed. */
export class FileWatcher {
  readonly #onChange: (files: string[]) => void;
  readonly #settleMs: number;
  readonly #folders = new Map<string, FSWatcher>();
  #files = new Set<string>();
  #changed = new Set<string>();
  #timer: NodeJS.Timeout | undefined;
  #closed = false;

  constructor(onChange: (files: string[]) => void, settleMs = defaultSettleMs) {
    this.#onChange = onChange;
    this.#settleMs = settleMs;
  }

  /** The files watched from now on (absolute paths); folders no longer needed are let go. */
  watch(files: string[]): void {
    if (this.#closed) return;
    this.#files = new Set(files.map((f) => path.resolve(f)));
    const folders = new Set([...this.#files].map((f) => path.dirname(f)));
    for (const [folder, watcher] of this.#folders) {
      if (!folders.has(folder)) {
        watcher.close();
        this.#folders.delete(folder);
      }
    }
    for (const folder of folders) {
      if (this.#folders.has(folder)) continue;
      try {
        const watcher = watch(folder, { persistent: true }, (_event, name) => {
          if (name) this.#saw(path.join(folder, name.toString()));
        });
        // A folder that goes away (or an error of the watcher) must not crash dev; its files are
        // seen again once a later build names them.
        watcher.on("error", () => {
          watcher.close();
          this.#folders.delete(folder);
        });
        this.#folders.set(folder, watcher);
      } catch {
        // The folder is gone already: nothing to watch there.
      }
    }
  }

  /** How many files are watched. */
  get size(): number {
    return this.#files.size;
  }

  close(): void {
    this.#closed = true;
    clearTimeout(this.#timer);
    for (const watcher of this.#folders.values()) watcher.close();
    this.#folders.clear();
  }

  #saw(file: string): void {
    if (this.#closed || !this.#files.has(file)) return;
    this.#changed.add(file);
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => {
      const changed = [...this.#changed];
      this.#changed.clear();
      if (!this.#closed) this.#onChange(changed);
    }, this.#settleMs);
  }
}
