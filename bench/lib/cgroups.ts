/**
 * CPU caps for bench servers: cgroup v1 `cpu` groups (this machine mounts them writable at
 * /sys/fs/cgroup/cpu, as root), one per server, each with a CFS quota. A server started in a group
 * (`FountProcess.start({ cgroup })`) and the executors it starts share that quota; the load generator
 * and PostgreSQL stay outside, so that a node's throughput is what its quota buys. Every bench group
 * weighs more than the machine's other processes (`benchShares`), and the load generator gets a group
 * of that weight without a quota, so that other work on the machine slows neither.
 */
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import path from "node:path";

const root = "/sys/fs/cgroup/cpu";
/** The CFS period: the quota is a share of each 100 ms. */
const periodUs = 100_000;

/** Whether CPU groups can be made here (cgroup v1 `cpu` mounted and writable). */
export function cpuGroupsAvailable(): boolean {
  try {
    const probe = path.join(root, `fount-bench-probe-${process.pid}`);
    mkdirSync(probe);
    rmdirSync(probe);
    return true;
  } catch {
    return false;
  }
}

/**
 * The weight of a bench group against the machine's other processes (the largest cgroup v1 takes; each
 * process outside a group weighs 1,024): on a machine busy with other work a group still gets its quota,
 * so that the quota, not the neighbours, bounds it.
 */
const benchShares = 262_144;

/**
 * Makes group `name` with a quota of `cpus` CPUs (0.4: 40 ms of each 100 ms; undefined: no quota) and
 * the bench's weight; returns its path.
 */
export function cpuGroup(name: string, cpus: number | undefined): string {
  const dir = path.join(root, name);
  if (!existsSync(dir)) mkdirSync(dir);
  writeFileSync(path.join(dir, "cpu.shares"), String(benchShares));
  writeFileSync(path.join(dir, "cpu.cfs_period_us"), String(periodUs));
  writeFileSync(
    path.join(dir, "cpu.cfs_quota_us"),
    cpus === undefined ? "-1" : String(Math.round(cpus * periodUs)),
  );
  return dir;
}

/** Moves process `pid` (and the threads it has) into the group at `dir`. */
export function joinGroup(dir: string, pid: number): void {
  writeFileSync(path.join(dir, "cgroup.procs"), String(pid));
}

/** Moves process `pid` back to the root group. */
export function leaveGroups(pid: number): void {
  joinGroup(root, pid);
}

/** Moves what is left in the group back to the root group and removes it; never throws. */
export function removeGroup(dir: string): void {
  try {
    for (const pid of readFileSync(path.join(dir, "cgroup.procs"), "utf8").split("\n").filter(Boolean)) {
      try {
        leaveGroups(Number(pid));
      } catch {
        // It ended meanwhile.
      }
    }
    rmdirSync(dir);
  } catch {
    // Gone already, or a process would not move: left for the machine's next reboot.
  }
}

/** Seconds the group's processes waited for their quota (`cpu.stat` throttled_time), 0 when unread. */
export function throttledSeconds(dir: string): number {
  try {
    const m = /throttled_time (\d+)/.exec(readFileSync(path.join(dir, "cpu.stat"), "utf8"));
    return m ? Number(m[1]) / 1e9 : 0;
  } catch {
    return 0;
  }
}
