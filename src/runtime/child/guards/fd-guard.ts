/**
 * The realm's file descriptors: component code may use by number only the descriptors it opened itself
 * (and stdio). Descriptors are the process's, shared by every realm of the executor: the executor's IPC
 * channel to the server is one of them, and a component that wrote it (`fs.writeSync(3, …)`) could
 * answer, emit or be charged for another source of its owner, or read another's batches, props and
 * secrets included; another realm's open files are others. Node's permission model checks paths, not
 * descriptor numbers, and the egress guard only refuses adopting a descriptor as a socket. Installed in
 * every realm before any component loads (realm/realm.ts); a JavaScript check, so a hole in Node itself
 * would get past it (docs/isolation.md).
 */
import fs from "node:fs";
import tty from "node:tty";

/** Functions of `fs` whose first argument may be a descriptor number. */
const byDescriptor = [
  "close",
  "fchmod",
  "fchown",
  "fdatasync",
  "fstat",
  "fsync",
  "ftruncate",
  "futimes",
  "read",
  "readv",
  "write",
  "writev",
  "readFile",
  "writeFile",
  "appendFile",
] as const;

function refused(fd: number): Error {
  return Object.assign(
    new Error(`file descriptor ${fd} is not this source's: component code may use only the files it opened`),
    { code: "ERR_ACCESS_DENIED" },
  );
}

export function installFdGuard(): void {
  const own = new Set<number>([0, 1, 2]);
  const check = (fd: unknown) => {
    if (typeof fd === "number" && !own.has(fd)) throw refused(fd);
  };
  const target = fs as unknown as Record<string, (...args: unknown[]) => unknown>;
  const wrap = (name: string, before: (args: unknown[]) => unknown[]) => {
    const original = target[name]!;
    target[name] = function (this: unknown, ...args: unknown[]) {
      return Reflect.apply(original, this, before(args));
    };
  };
  for (const name of byDescriptor) {
    for (const fn of [name, `${name}Sync`]) {
      if (typeof target[fn] !== "function") continue;
      wrap(fn, (args) => {
        check(args[0]);
        return args;
      });
    }
  }
  // What it opens is its own; what it closes is no longer.
  const openSync = target.openSync!;
  target.openSync = function (this: unknown, ...args: unknown[]) {
    const fd = Reflect.apply(openSync, this, args) as number;
    own.add(fd);
    return fd;
  };
  wrap("open", (args) => {
    const last = args.length - 1;
    const callback = args[last];
    if (typeof callback === "function") {
      args[last] = (err: Error | null, fd: number) => {
        if (!err) own.add(fd);
        callback(err, fd);
      };
    }
    return args;
  });
  const promisesOpen = fs.promises.open;
  fs.promises.open = async (...args: Parameters<typeof fs.promises.open>) => {
    const handle = await promisesOpen(...args);
    const fd = handle.fd;
    own.add(fd);
    // A closed handle's number is another open's next: no longer this realm's. (`close` is the handle's own.)
    const close = handle.close;
    handle.close = async () => {
      try {
        return await Reflect.apply(close, handle, []);
      } finally {
        own.delete(fd);
      }
    };
    return handle;
  };
  for (const name of ["close", "closeSync"]) {
    const guarded = target[name]!;
    target[name] = function (this: unknown, ...args: unknown[]) {
      const result = Reflect.apply(guarded, this, args);
      if (typeof args[0] === "number" && args[0] > 2) own.delete(args[0]);
      return result;
    };
  }
  for (const name of ["createReadStream", "createWriteStream"]) {
    wrap(name, (args) => {
      const options = args[1];
      if (typeof options === "object" && options !== null) check((options as { fd?: unknown }).fd);
      return args;
    });
  }
  // A terminal stream over a descriptor number is another way to write it.
  for (const name of ["ReadStream", "WriteStream"] as const) {
    const Original = tty[name] as unknown as new (...args: unknown[]) => object;
    const Guarded = class extends Original {
      constructor(...args: unknown[]) {
        check(args[0]);
        super(...args);
      }
    };
    (tty as unknown as Record<string, unknown>)[name] = Guarded;
  }
}
