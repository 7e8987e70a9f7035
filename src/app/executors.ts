/**
 * Where component code runs: the sandboxed executor pool (or the executor a test passes instead), the
 * uid range its processes run under as root, the egress rules for those uids, and the lines the start
 * banner prints about what confines component code here (docs/isolation.md).
 */
import type { FastifyInstance } from "fastify";
import type { Config } from "../config.ts";
import { registryOwner } from "../domain/components/components.ts";
import type { LateWorkRecorder } from "../domain/sources/late-work.ts";
import { componentApiHandler } from "../http/component-api.ts";
import { type EgressGuard, executorEgressRules, installEgressRules } from "../runtime/egress.ts";
import { assertExecutorAccess } from "../runtime/executor-access.ts";
import { ExecutorPool } from "../runtime/executor-pool.ts";
import type { Executor } from "../runtime/types.ts";
import { claimUidRange, type UidRange } from "../runtime/uid-range.ts";

/** Whether executors run under uids of their own, and the range claimed for them. */
export interface Isolation {
  isolateUsers: boolean;
  uids: UidRange | undefined;
}

/**
 * Executors under uids of their own (as root, unless turned off) need a uid range no other Fount server
 * on this host uses, and the egress rules for it (docs/isolation.md). None with a given executor.
 */
export function claimIsolation(config: Config, given: Executor | undefined): Isolation {
  const isolateUsers = given ? false : (config.executorIsolateUsers ?? process.getuid?.() === 0);
  if (isolateUsers) assertExecutorAccess(config.dataDir);
  const uids = isolateUsers
    ? claimUidRange({ base: config.executorUidBase, dataDir: config.dataDir })
    : undefined;
  return { isolateUsers, uids };
}

/** The executor, the egress rules installed for it, and the start banner's lines about them. */
export interface Executors {
  executor: Executor;
  egress: EgressGuard | undefined;
  startNotes: string[];
}

export async function startExecutors(
  config: Config,
  given: Executor | undefined,
  isolation: Isolation,
  app: FastifyInstance,
  lateWork: LateWorkRecorder,
): Promise<Executors> {
  const { isolateUsers, uids } = isolation;
  const executor =
    given ??
    new ExecutorPool({
      dataDir: config.dataDir,
      memoryMb: config.executorMemoryMb,
      scratchMb: config.executorScratchMb,
      realmsPerOwner: config.executorRealmsPerOwner,
      v8Flags: config.executorV8Flags,
      mallocArenaMax: config.executorMallocArenaMax,
      realmYoungMb: config.executorRealmYoungMb,
      idleMs: config.executorIdleMs,
      spares: config.executorSpares,
      // The registry's process only inspects the components published at start and by admins.
      inspectOnly: [registryOwner],
      defaultTimeoutMs: config.invocationTimeoutMs,
      maxEmitBytes: config.maxEventBytes,
      maxRunEmitBytes: config.maxRunEmitBytes,
      extraCaCertsFile: config.executorCaCerts,
      isolateUsers,
      uidBase: uids?.base,
      egress: executorEgressRules({
        allowPrivate: config.executorAllowPrivate,
        allowHosts: config.executorAllowHosts,
      }),
      ...(config.pipedreamApi
        ? { pipedreamApi: { handler: componentApiHandler(app), bodyLimit: config.bodyLimitBytes } }
        : {}),
      logger: app.log,
      onLateWork: (work) => lateWork.report(work),
    });
  const egress = given
    ? undefined
    : await installEgressRules({
        allowPrivate: config.executorAllowPrivate,
        allowHosts: config.executorAllowHosts,
        uids,
        logger: app.log,
      });
  // What confines component code here, for the start banner (main.ts prints it).
  const startNotes: string[] = egress ? [egress.summary] : [];
  if (executor instanceof ExecutorPool) {
    // Also unmounts scratch tmpfs a crashed run left behind (runtime/executors/scratch.ts). If the
    // scratch folder cannot be prepared now, the first executor start reports why.
    const scratch = await executor.scratchLimit().catch((err: Error) => err);
    startNotes.push(
      scratch instanceof Error
        ? `scratch: the folders could not be prepared (${scratch.message.split("\n")[0]}); the first executor start will say why`
        : scratch.mode === "tmpfs"
          ? `scratch: each owner's folder is a ${scratch.limitMb} MB tmpfs; writing past it fails with ENOSPC`
          : `scratch: no tmpfs here, so each owner's folder is measured every 500 ms; one over ${scratch.limitMb} MB has its executor stopped (scratch_full) and the folder emptied`,
    );
    executor.startSpares();
  }
  return { executor, egress, startNotes };
}
