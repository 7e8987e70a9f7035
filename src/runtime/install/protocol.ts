/**
 * The messages between the server and an install process (child.ts): one request in, answers out, then
 * the process exits. Types only, so that the child's entry imports nothing of the server.
 */

/** npm options of every registry request and install; the server sets them (build.ts), the child adds none. */
export type NpmOptions = Record<string, unknown>;

/** What one install process is asked to do. */
export type InstallRequest =
  /** Resolve each `name@range` spec to the exact version the registry gives. */
  | { op: "resolve"; specs: string[]; npm: NpmOptions }
  /** Install `dir/package.json`'s dependencies into `dir`, refusing a tree over `maxBytes`. */
  | { op: "install"; dir: string; maxBytes: number; npm: NpmOptions };

/** An error as it crosses the process boundary: npm's `code` and `pkgid` are what the server maps. */
export interface InstallError {
  message: string;
  code?: string;
  pkgid?: string;
}

/** What the install process sends back: one `resolved` per spec as each settles, or one `installed`. */
export type InstallReply =
  | { type: "resolved"; index: number; version?: string; error?: InstallError }
  | { type: "installed"; bytes?: number; error?: InstallError };
