/**
 * What goes to a child per batch: the calls' shared configurations once, and a db copy only when the
 * child lacks the version the caller knows (see the `ExecutorPool` class comment for the version rules).
 */
import type { BatchConfig, BatchItem, BatchMessage, ToChild } from "../child/protocol.ts";
import type { InvokeRequest } from "../types.ts";
import { type Batch, type Child, MAX_CACHED_DBS } from "./model.ts";

/** Builds the batch message and updates the source's and the child's db bookkeeping to match. */
export function batchMessage(batch: Batch, child: Child, send: (message: ToChild) => void): BatchMessage {
  const cfgs: BatchConfig[] = [];
  const index = new Map<string, number>();
  let prev: InvokeRequest | undefined;
  let prevIndex = 0;
  const items: BatchItem[] = batch.calls.map((call) => {
    const r = call.req;
    let c = prevIndex;
    const same =
      prev &&
      r.props === prev.props &&
      r.component.entryFile === prev.component.entryFile &&
      r.dbProps === prev.dbProps &&
      r.httpProps === prev.httpProps &&
      r.dynamicProps === prev.dynamicProps;
    if (!same) {
      const key = `${r.component.entryFile}\0${JSON.stringify([r.props, r.dbProps, r.httpProps, r.dynamicProps])}`;
      const found = index.get(key);
      if (found === undefined) {
        c = cfgs.length;
        index.set(key, c);
        cfgs.push({
          entryFile: r.component.entryFile,
          props: r.props,
          dbProps: r.dbProps,
          httpProps: r.httpProps,
          ...(r.dynamicProps?.length ? { dynamicProps: r.dynamicProps } : {}),
        });
      } else c = found;
    }
    prev = r;
    prevIndex = c;
    return { q: call.q, c, inv: r.invocation };
  });
  const { source } = batch;
  const { sourceId } = source;
  const message: BatchMessage = { t: "batch", sid: sourceId, cfgs, items };
  let newest = batch.calls[0]!.req;
  for (const call of batch.calls) if (call.req.dbVersion > newest.dbVersion) newest = call.req;
  const v = newest.dbVersion;
  if (!source.snapshot || v > source.snapshot.v) {
    source.snapshot = { v, data: newest.db ?? {} };
    for (const [key, write] of source.overlay) if (write.v <= v) source.overlay.delete(key);
    if (v > source.version) source.version = v;
  }
  const known = child.dbVersions.get(sourceId);
  if (known !== undefined && known > source.version) source.version = known;
  child.dbVersions.delete(sourceId);
  if (known === undefined || v > known) {
    // The child has no copy, or the caller knows a newer db than the child holds.
    const data = { ...source.snapshot.data };
    for (const [key, write] of source.overlay) data[key] = write.value;
    message.db = { v: source.version, data };
    child.dbVersions.set(sourceId, source.version);
  } else child.dbVersions.set(sourceId, known);
  if (child.dbVersions.size > MAX_CACHED_DBS) {
    // The least recently used copy no batch on this child still needs (a waiting batch has no other).
    for (const oldest of child.dbVersions.keys()) {
      if (child.batches.has(oldest)) continue;
      child.dbVersions.delete(oldest);
      send({ t: "forget", sid: oldest });
      break;
    }
  }
  return message;
}
