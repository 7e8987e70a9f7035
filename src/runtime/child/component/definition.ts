/**
 * Loads a component's entry file inside the executor process and checks its definition: what
 * `inspect` reports (`ComponentMeta`) and what an invocation needs (resolved props, methods, hooks).
 * Runs in the sandboxed child: imports only node: built-ins.
 */
import { findSourceMap } from "node:module";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import type { ComponentMeta, PropMeta, PropOption } from "../../types.ts";

export type Fn = (...args: any[]) => unknown;
type Obj = Record<string, unknown>;

/** A prop after shorthand expansion and `propDefinition` merge. */
export interface ResolvedProp {
  name: string;
  type: string;
  spec: Obj;
  /** For `propDefinition` props: the app definition it came from and the component's prop holding that app. */
  app?: { def: Obj; prop: string; name: string };
  /** The optional third element of `propDefinition`: configured props → extra `options()` input. */
  inputFn?: Fn;
}

export interface LoadedComponent {
  meta: ComponentMeta;
  props: ResolvedProp[];
  methods: Record<string, Fn>;
  hooks: Partial<Record<"deploy" | "activate" | "deactivate", Fn>>;
  run: Fn | undefined;
  /** `additionalProps(previousPropDefs)`: the component's dynamic props, computed from the configured ones. */
  additionalProps: Fn | undefined;
  hasTimer: boolean;
}

/** A definition that does not load or validate; crosses the IPC as `code: "component_invalid"`. */
export class InvalidComponent extends Error {
  readonly code = "component_invalid";
  readonly data: Obj | undefined;
  constructor(message: string, data?: Obj, name?: string) {
    super(message);
    this.name = name ?? "InvalidComponent";
    this.data = data;
  }
}

const scalarTypes = ["boolean", "integer", "string", "object", "any"];
const knownTypes = new Set([
  "app",
  ...scalarTypes,
  ...scalarTypes.map((t) => `${t}[]`),
  "$.interface.http",
  "$.interface.timer",
  "$.service.db",
  "$.interface.apphook",
  "alert",
  "http_request",
]);
/** Types `additionalProps()` may not return: the platform sets them up once, at deploy, from the definition. */
const staticOnlyTypes = new Set([
  "$.interface.http",
  "$.interface.timer",
  "$.service.db",
  "$.interface.apphook",
]);
const hookNames = ["deploy", "activate", "deactivate"] as const;

const cache = new Map<string, Promise<LoadedComponent>>();
/** Entry files whose component loaded and validated. */
const ready = new Set<string>();

/** Imports and validates a component once per process; a failure is remembered like Node's module cache does. */
export function loadComponent(entryFile: string): Promise<LoadedComponent> {
  let loaded = cache.get(entryFile);
  if (!loaded) {
    loaded = importDefinition(entryFile).then((def) => {
      const component = validateDefinition(def);
      ready.add(entryFile);
      return component;
    });
    cache.set(entryFile, loaded);
  }
  return loaded;
}

/** Whether `loadComponent(entryFile)` would hand back a loaded component without importing anything. */
export function isLoaded(entryFile: string): boolean {
  return ready.has(entryFile);
}

async function importDefinition(entryFile: string): Promise<unknown> {
  let mod: Obj;
  try {
    mod = (await import(pathToFileURL(entryFile).href)) as Obj;
  } catch (err) {
    throw importFailure(err, entryFile);
  }
  let def = mod.default;
  if (isObject(def) && def.__esModule && "default" in def) def = def.default;
  return def;
}

function importFailure(err: unknown, entryFile: string): InvalidComponent {
  const e = err instanceof Error ? err : new Error(String(err));
  const dir = path.dirname(entryFile);
  // Paths of the build folder mean nothing to the author and describe the server's disk layout.
  const message = e.message.replaceAll(`${pathToFileURL(dir).href}/`, "").replaceAll(`${dir}/`, "");
  const where = locate(e.stack ?? "", entryFile);
  const at = where ? ` (line ${where.line}${where.column ? `, column ${where.column}` : ""})` : "";
  return new InvalidComponent(`The component does not load: ${e.name}: ${message}${at}`, where, e.name);
}

/**
 * Finds the first stack frame in the entry file (`file:///…/entry.mjs:3:9`, `/…/entry.cjs:3:9`) or,
 * when the bundle carries a source map (the runner turns source-map support on), in the code it was
 * built from: then the position is the author's, not the bundle's.
 */
export function locate(stack: string, entryFile: string): { line: number; column?: number } | undefined {
  const url = pathToFileURL(entryFile).href;
  const names = [url, entryFile];
  for (const source of findSourceMap(url)?.payload.sources ?? []) {
    const original = new URL(source, url);
    names.push(original.href, original.protocol === "file:" ? fileURLToPath(original) : original.href);
  }
  for (const frame of stack.split("\n")) {
    for (const name of names) {
      const i = frame.indexOf(`${name}:`);
      if (i === -1) continue;
      const m = /^:(\d+)(?::(\d+))?/.exec(frame.slice(i + name.length));
      if (m) return m[2] ? { line: Number(m[1]), column: Number(m[2]) } : { line: Number(m[1]) };
    }
  }
  return undefined;
}

function isObject(value: unknown): value is Obj {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function invalid(message: string): never {
  throw new InvalidComponent(message);
}

/** Checks a definition and resolves its props; throws `InvalidComponent` with a message for the author. */
export function validateDefinition(def: unknown): LoadedComponent {
  if (!isObject(def)) {
    invalid(
      "The component must export an object as its default export (export default {…} or module.exports = {…})",
    );
  }
  if (typeof def.name !== "string" || def.name.trim() === "") invalid("The component needs a `name` string");
  if (typeof def.version !== "string" || def.version.trim() === "")
    invalid("The component needs a `version` string");
  if (def.key !== undefined && typeof def.key !== "string") invalid("`key` must be a string");
  if (def.description !== undefined && typeof def.description !== "string")
    invalid("`description` must be a string");
  const type = def.type ?? "source";
  if (type !== "source" && type !== "action")
    invalid(`\`type\` must be "source" or "action", not ${JSON.stringify(type)}`);
  const dedupe = def.dedupe;
  if (dedupe !== undefined && dedupe !== "unique" && dedupe !== "greatest" && dedupe !== "last") {
    invalid(`\`dedupe\` must be "unique", "greatest" or "last", not ${JSON.stringify(dedupe)}`);
  }

  const props = resolveProps(def.props);
  const hasTimer = props.some((p) => p.type === "$.interface.timer");
  const run = def.run;
  if (run !== undefined && typeof run !== "function") invalid("`run` must be a method");
  const additionalProps = def.additionalProps;
  if (additionalProps !== undefined && typeof additionalProps !== "function")
    invalid("`additionalProps` must be a method");
  if (run === undefined && !hasTimer) invalid("The component needs a `run` method");

  const methods: Record<string, Fn> = {};
  if (def.methods !== undefined) {
    if (!isObject(def.methods)) invalid("`methods` must be an object of functions");
    for (const [name, fn] of Object.entries(def.methods)) {
      if (typeof fn !== "function") invalid(`Method "${name}" is not a function`);
      methods[name] = fn as Fn;
    }
  }
  const hooks: LoadedComponent["hooks"] = {};
  if (def.hooks !== undefined) {
    if (!isObject(def.hooks)) invalid("`hooks` must be an object");
    for (const name of hookNames) {
      const fn = def.hooks[name];
      if (fn === undefined) continue;
      if (typeof fn !== "function") invalid(`Hook "${name}" is not a function`);
      hooks[name] = fn as Fn;
    }
  }

  const meta: ComponentMeta = {
    name: def.name,
    version: def.version,
    type,
    props: props.map(propMeta),
    hooks: hookNames.filter((h) => hooks[h]),
    methods: Object.keys(methods),
    hasRun: typeof run === "function",
  };
  if (typeof def.key === "string") meta.key = def.key;
  if (typeof def.description === "string") meta.description = def.description;
  if (dedupe !== undefined) meta.dedupe = dedupe;
  if (typeof additionalProps === "function") meta.additionalProps = true;
  return {
    meta,
    props,
    methods,
    hooks,
    run: run as Fn | undefined,
    additionalProps: additionalProps as Fn | undefined,
    hasTimer,
  };
}

/**
 * The dynamic props an `additionalProps()` call returned, checked like declared props. Names of
 * declared props are skipped (components often return `{...previousPropDefs, …}`), so a declared prop
 * is never redefined; a `propDefinition` may name a declared app prop.
 */
export function dynamicProps(component: LoadedComponent, returned: unknown): ResolvedProp[] {
  if (returned === undefined || returned === null) return [];
  if (!isObject(returned)) invalid("additionalProps() must return an object of props");
  const declared = new Map(component.props.map((p) => [p.name, p.spec]));
  const fresh = Object.fromEntries(Object.entries(returned).filter(([name]) => !declared.has(name)));
  const props = resolveProps(fresh, declared);
  for (const prop of props) {
    if (staticOnlyTypes.has(prop.type)) {
      invalid(`Dynamic prop "${prop.name}" has type ${prop.type}, which only a declared prop may have`);
    }
  }
  return props;
}

/** What the server keeps of dynamic props: their `PropMeta`. */
export function dynamicPropMetas(component: LoadedComponent, returned: unknown): PropMeta[] {
  return dynamicProps(component, returned).map(propMeta);
}

/** `previousPropDefs` of `additionalProps()`: the component's props as it declares them. */
export function declaredPropDefs(component: LoadedComponent): Obj {
  return Object.fromEntries(component.props.map((p) => [p.name, p.spec]));
}

/**
 * Expands shorthands and applies `propDefinition`s. `scope` holds further props a propDefinition may
 * find its app prop among (the declared ones, for dynamic props).
 */
function resolveProps(raw: unknown, scope?: Map<string, Obj>): ResolvedProp[] {
  if (raw === undefined) return [];
  if (!isObject(raw)) invalid("`props` must be an object");
  const expanded = new Map<string, Obj>();
  for (const [name, value] of Object.entries(raw)) {
    if (typeof value === "string") expanded.set(name, { type: value });
    else if (isObject(value)) expanded.set(name, value);
    else invalid(`Prop "${name}" must be an object or a type name string`);
  }
  const candidates = [...(scope ?? []), ...expanded];
  const out: ResolvedProp[] = [];
  for (const [name, local] of expanded) {
    let spec = local;
    let app: ResolvedProp["app"];
    let inputFn: Fn | undefined;
    if (local.propDefinition !== undefined) {
      const pd = local.propDefinition;
      if (!Array.isArray(pd) || !isObject(pd[0]) || typeof pd[1] !== "string") {
        invalid(`Prop "${name}": propDefinition must be [app, "definitionName", optionalFunction]`);
      }
      const [appDef, defName, fn] = pd as [Obj, string, unknown];
      const defs = appDef.propDefinitions;
      if (!isObject(defs) || !isObject(defs[defName])) {
        invalid(`Prop "${name}": the app ${JSON.stringify(appDef.app)} has no propDefinition "${defName}"`);
      }
      const appProp = candidates.find(([, s]) => s === appDef || (s.type === "app" && s.app === appDef.app));
      if (!appProp) {
        invalid(
          `Prop "${name}" uses a propDefinition of app ${JSON.stringify(appDef.app)}, which is not among the props`,
        );
      }
      if (fn !== undefined && typeof fn !== "function")
        invalid(`Prop "${name}": the third propDefinition element must be a function`);
      const { propDefinition: _, ...rest } = local;
      spec = { ...(defs[defName] as Obj), ...rest };
      app = { def: appDef, prop: appProp[0], name: defName };
      inputFn = fn as Fn | undefined;
    }
    const type = spec.type;
    if (typeof type !== "string") invalid(`Prop "${name}" has no type`);
    if (!knownTypes.has(type)) invalid(`Prop "${name}" has unknown type ${JSON.stringify(type)}`);
    if (type === "app" && (typeof spec.app !== "string" || spec.app === "")) {
      invalid(`App prop "${name}" needs an \`app\` name slug`);
    }
    out.push({ name, type, spec, app, inputFn });
  }
  return out;
}

function propMeta(prop: ResolvedProp): PropMeta {
  const { spec, name, type } = prop;
  const meta: PropMeta & { alertType?: string; content?: string } = { name, type };
  for (const key of ["label", "description"] as const) {
    if (typeof spec[key] === "string") meta[key] = spec[key] as string;
  }
  for (const key of [
    "optional",
    "secret",
    "useQuery",
    "reloadProps",
    "disabled",
    "hidden",
    "customResponse",
  ] as const) {
    if (typeof spec[key] === "boolean") meta[key] = spec[key] as boolean;
  }
  for (const key of ["min", "max"] as const) {
    if (typeof spec[key] === "number") meta[key] = spec[key] as number;
  }
  if (spec.default !== undefined) {
    try {
      meta.default = JSON.parse(JSON.stringify(spec.default));
    } catch {
      invalid(`Prop "${name}": \`default\` must be a JSON value`);
    }
  }
  if (type === "app") meta.app = spec.app as string;
  if (spec.options !== undefined) meta.options = propOptions(name, spec.options);
  if (prop.app) meta.propDefinition = { appProp: prop.app.prop, name: prop.app.name };
  if (type === "alert") {
    // Pipedream's info boxes: not inputs, kept so a UI can show them.
    if (typeof spec.alertType === "string") meta.alertType = spec.alertType;
    if (typeof spec.content === "string") {
      meta.content = spec.content;
      meta.description ??= spec.content;
    }
  }
  return meta;
}

function propOptions(name: string, options: unknown): PropOption[] | "dynamic" {
  if (typeof options === "function") return "dynamic";
  if (!Array.isArray(options)) invalid(`Prop "${name}": \`options\` must be an array or a method`);
  return options.map((o) => {
    if (typeof o === "string" || typeof o === "number" || typeof o === "boolean") return o;
    if (isObject(o) && typeof o.label === "string" && "value" in o) return { label: o.label, value: o.value };
    return invalid(`Prop "${name}": each option must be a string, number, boolean or {label, value}`);
  });
}
