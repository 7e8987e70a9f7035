/**
 * The executor pool's public face; the pool itself and its rooms live in `executors/`.
 */

export {
  ComponentInvalidError,
  ExecutorError,
  type ExecutorLogger,
  type ExecutorPoolOptions,
} from "./executors/model.ts";
export { ExecutorPool } from "./executors/pool.ts";
export type { LateWork } from "./types.ts";
