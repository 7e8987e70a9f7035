/**
 * One invocation or inspection in a realm: loads the component, builds its `this`, runs what the
 * invocation asks for (`run`, a hook, a prop's options, the dynamic props) inside the async context
 * that makes its console output, emits and db writes its own, and collects its result.
 */
import { performance } from "node:perf_hooks";
import type { SerializedError } from "../../../errors.ts";
import type { HttpResponse } from "../../types.ts";
import { declaredPropDefs, dynamicPropMetas, dynamicProps, loadComponent } from "../component/definition.ts";
import { withParsedBody } from "../component/http-body.ts";
import { componentInstance, optionsCall } from "../component/instance.ts";
import { Invocation } from "../component/invocation.ts";
import { jsonTextTooDeep, maxBodyDepth, maxValueDepth } from "../guards/json-depth.ts";
import type { BatchConfig, BatchItem, ItemResult } from "../protocol.ts";
import { serialize } from "./errors.ts";
import { als, init, inspecting, running, send } from "./state.ts";

function onRespond(q: number, response: HttpResponse): void {
  send({ t: "respond", q, response });
}

function onLateEmit(sid: string): (q: number) => void {
  return (q) => send({ t: "late", sid, q });
}

/** Loads a component to read its definition, and answers with its meta or why it does not load. */
export async function inspect(q: number, entryFile: string): Promise<void> {
  inspecting.add(q);
  send({ t: "inspecting", q });
  try {
    const component = await als.run({ inspect: q }, () => loadComponent(entryFile));
    send({ t: "inspected", q, meta: component.meta });
  } catch (err) {
    send({ t: "inspected", q, error: { ...serialize(err, "component_invalid"), code: "component_invalid" } });
  } finally {
    inspecting.delete(q);
  }
}

async function execute(
  item: BatchItem,
  cfg: BatchConfig,
  inv: Invocation,
  db: Map<string, string>,
  onStart: (() => void) | undefined,
): Promise<unknown> {
  const component = await loadComponent(cfg.entryFile);
  onStart?.();
  const self = componentInstance(component, cfg, inv, db);
  const kind = item.inv;
  switch (kind.kind) {
    case "run": {
      const event = kind.parseBody
        ? withParsedBody(kind.event, () =>
            inv.warn(
              "body_too_deep",
              `The request body is JSON nested deeper than ${maxBodyDepth} levels; run got it as text in body`,
            ),
          )
        : kind.event;
      // A schedule source without run emits its timer event.
      if (component.run) await component.run.call(self, event);
      else inv.emit(event, {});
      return undefined;
    }
    case "hook":
      await component.hooks[kind.hook]?.call(self);
      return undefined;
    case "options": {
      const { page: _p, prevContext: _c, query: _q, ...configured } = kind.args;
      // A prop the component does not declare may be one of its dynamic props: compute them to find it.
      const dynamic =
        component.additionalProps && !component.props.some((p) => p.name === kind.prop)
          ? dynamicProps(component, await component.additionalProps.call(self, declaredPropDefs(component)))
          : [];
      const call = optionsCall(
        component,
        self,
        kind.prop,
        kind.args,
        { ...cfg.props, ...configured },
        dynamic,
      );
      const value = "list" in call ? call.list : await call.fn.call(call.thisArg, call.arg);
      try {
        const json = JSON.stringify(value ?? null);
        if (jsonTextTooDeep(json, maxValueDepth))
          throw new Error(`nested deeper than ${maxValueDepth} levels`);
        return JSON.parse(json);
      } catch (err) {
        throw new TypeError(
          `options() returned a value that is not JSON-serializable (${(err as Error).message})`,
        );
      }
    }
    case "props": {
      if (!component.additionalProps) return [];
      const returned = await component.additionalProps.call(self, declaredPropDefs(component));
      return dynamicPropMetas(component, returned);
    }
  }
}

/** Runs one invocation; also says how much emitted JSON its result carries. */
export async function runItem(
  sid: string,
  item: BatchItem,
  cfg: BatchConfig,
  db: Map<string, string>,
  /** For a batch's first call: tells the parent when component code is about to run. */
  onStart?: () => void,
): Promise<{ result: ItemResult; chars: number }> {
  const started = performance.now();
  const inv = new Invocation(item.q, sid, init, onRespond, onLateEmit(sid));
  running.add(inv);
  let error: SerializedError | undefined;
  let value: unknown;
  try {
    value = await als.run({ inv }, () => execute(item, cfg, inv, db, onStart));
  } catch (err) {
    error = serialize(err, "component_error");
  }
  // Over the run's emit limit the run fails, even when the component caught what $emit threw.
  if (inv.failure) error = serialize(inv.failure, "run_emits_too_large");
  inv.closed = true;
  running.delete(inv);
  const result: ItemResult = {
    q: item.q,
    emits: error ? [] : inv.emits,
    logs: inv.logs,
    dbWrites: {},
    warnings: inv.warnings,
    durationMs: Math.round((performance.now() - started) * 1000) / 1000,
  };
  if (error) result.error = error;
  else {
    for (const [key, json] of inv.writes) {
      db.set(key, json);
      result.dbWrites[key] = JSON.parse(json);
    }
    if (item.inv.kind === "options" || item.inv.kind === "props") result.returnValue = value;
  }
  if (inv.response) result.response = inv.response;
  return { result, chars: error ? 0 : inv.emittedChars };
}
