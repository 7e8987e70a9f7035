/**
 * The `this` object component code runs with in one invocation: prop values (apps with their methods
 * bound, `http_request` values, the db service, http interfaces), the component's methods and `$emit`,
 * and the `this` and argument of a prop's `options()`. Runs in the sandboxed child: imports only node:
 * built-ins.
 */

import { jsonTextTooDeep, maxValueDepth } from "../guards/json-depth.ts";
import type { BatchConfig } from "../protocol.ts";
import type { Fn, LoadedComponent, ResolvedProp } from "./definition.ts";
import { httpRequestValue } from "./http-request.ts";
import type { Invocation } from "./invocation.ts";

type Obj = Record<string, unknown>;

function isObject(value: unknown): value is Obj {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The source's db during one invocation: reads see this invocation's writes; values are JSON copies. */
function dbService(db: Map<string, string>, inv: Invocation): Obj {
  return {
    get(key: unknown): unknown {
      const k = String(key);
      const json = inv.writes.get(k) ?? db.get(k);
      return json === undefined ? undefined : JSON.parse(json);
    },
    set(key: unknown, value: unknown): void {
      const k = String(key);
      let json: string | undefined;
      try {
        json = JSON.stringify(value);
      } catch (err) {
        throw new TypeError(
          `db.set(${JSON.stringify(k)}): the value is not JSON-serializable (${(err as Error).message})`,
        );
      }
      if (json === undefined) {
        throw new TypeError(
          `db.set(${JSON.stringify(k)}): the value is not JSON-serializable (use null to clear a key)`,
        );
      }
      if (jsonTextTooDeep(json, maxValueDepth)) {
        throw new TypeError(
          `db.set(${JSON.stringify(k)}): the value nests deeper than ${maxValueDepth} levels`,
        );
      }
      if (!inv.closed) inv.writes.set(k, json);
    },
  };
}

/** A copy of a configured value, so that a run changing it leaves the next run's value as configured. */
function plainValue(v: unknown): unknown {
  return typeof v === "object" && v !== null ? structuredClone(v) : v;
}

/** An app prop as the component sees it: the app's methods bound to it, `$auth`, its propDefinitions. */
export function appInstance(def: Obj, value: unknown): Obj {
  const auth = isObject(value) && isObject(value.$auth) ? structuredClone(value.$auth) : {};
  const app: Obj = { type: "app", app: def.app, $auth: auth };
  if (isObject(def.propDefinitions)) app.propDefinitions = def.propDefinitions;
  if (isObject(def.methods)) {
    for (const [name, fn] of Object.entries(def.methods)) {
      if (typeof fn === "function") app[name] = fn.bind(app);
    }
  }
  return app;
}

/** Builds `this` for run, hooks, methods and local options: prop values, services, methods and `$emit`. */
export function componentInstance(
  component: LoadedComponent,
  cfg: BatchConfig,
  inv: Invocation,
  db: Map<string, string>,
): Obj {
  const self: Obj = {};
  let dbApi: Obj | undefined;
  for (const prop of component.props) {
    const value = cfg.props[prop.name];
    switch (prop.type) {
      case "$.service.db":
        dbApi ??= dbService(db, inv);
        self[prop.name] = dbApi;
        break;
      case "$.interface.http": {
        const configured = cfg.httpProps.find((h) => h.name === prop.name);
        const endpoint = configured?.endpoint ?? (isObject(value) ? value.endpoint : undefined);
        self[prop.name] = {
          endpoint,
          customResponse: configured?.customResponse ?? prop.spec.customResponse === true,
          respond: (res: unknown) => inv.respond(res),
        };
        break;
      }
      case "$.interface.timer":
        self[prop.name] = { ...(isObject(value) ? structuredClone(value) : {}), type: "$.interface.timer" };
        break;
      case "app":
        self[prop.name] = appInstance(prop.spec, value);
        break;
      case "alert":
        break;
      case "http_request":
        self[prop.name] = httpRequestValue(value === undefined ? prop.spec.default : value);
        break;
      default:
        self[prop.name] = plainValue(value === undefined ? prop.spec.default : value);
    }
  }
  // Dynamic props: their definitions came from additionalProps() at deploy; the server sends their types.
  for (const { name, type } of cfg.dynamicProps ?? []) {
    if (name in self) continue;
    const value = cfg.props[name];
    if (type === "app") self[name] = appInstance({ app: isObject(value) ? value.app : undefined }, value);
    else if (type === "http_request") self[name] = httpRequestValue(value);
    else if (type !== "alert") self[name] = plainValue(value);
  }
  for (const name of cfg.dbProps) {
    if (!(name in self)) self[name] = dbApi ??= dbService(db, inv);
  }
  for (const [name, fn] of Object.entries(component.methods)) self[name] = fn.bind(self);
  self.$emit = (event: unknown, meta?: unknown) => inv.emit(event, meta);
  return self;
}

/** `this` and the argument for a prop's `options()`: the app for propDefinition props, else the component. */
export function optionsCall(
  component: LoadedComponent,
  self: Obj,
  propName: string,
  args: Obj,
  configured: Obj,
  /** The component's dynamic props for these values, when its declared props lack `propName`. */
  dynamic: ResolvedProp[] = [],
): { fn: Fn; thisArg: Obj; arg: Obj } | { list: unknown[] } {
  const prop = component.props.find((p) => p.name === propName) ?? dynamic.find((p) => p.name === propName);
  if (!prop)
    throw Object.assign(new Error(`The component has no prop "${propName}"`), { code: "invalid_parameter" });
  const options = prop.spec.options;
  if (Array.isArray(options)) return { list: options };
  if (typeof options !== "function") {
    throw Object.assign(new Error(`Prop "${propName}" has no options method`), { code: "invalid_parameter" });
  }
  let thisArg = self;
  let input: Obj = {};
  if (prop.app) {
    const app = self[prop.app.prop];
    thisArg = isObject(app) ? app : appInstance(prop.app.def, undefined);
    if (prop.inputFn) {
      const extra = prop.inputFn(configured);
      if (isObject(extra)) input = extra;
    }
  }
  return {
    fn: options as Fn,
    thisArg,
    arg: { ...args, ...input, page: args.page ?? 0, prevContext: args.prevContext ?? {} },
  };
}
