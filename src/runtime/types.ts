/**
 * The contract between the server and the component runtime: what a built component is, what the
 * sandbox reports about a component's definition, and what an invocation sends and returns.
 * Everything here is plain JSON so that it crosses the executor IPC unchanged.
 */
import type { SerializedError } from "../errors.ts";

/** A component's code after bundling and package installation, ready for an executor to import. */
export interface BuiltComponent {
  /** SHA-256 hex of the code as the user sent it. */
  codeHash: string;
  /** Absolute path of the ESM file an executor imports; it resolves its packages from a sibling node_modules. */
  entryFile: string;
  /**
   * Folders the executor must be allowed to read: `ownerDir` and the package set's shared
   * `node_modules` (when the set has packages).
   */
  readDirs: string[];
  /**
   * The folder of `readDirs` that holds the bundles of one owner only (runtime/bundle-layout.ts): the
   * pool grants it to that owner's executor alone, and refuses it to any other. Absent for code that is
   * no tenant's (tests' fixture folders), whose readDirs every executor may read.
   */
  ownerDir?: string;
  /** Exact package versions the code's bare imports resolved to (`{"axios": "1.7.9"}`), pinned for reuse. */
  dependencies: Record<string, string>;
}

export type PropOption = string | number | boolean | { label: string; value: unknown };

/** A prop as the sandbox found it in the definition, after `propDefinition` was applied. */
export interface PropMeta {
  name: string;
  type: string;
  label?: string;
  description?: string;
  optional?: boolean;
  default?: unknown;
  secret?: boolean;
  min?: number;
  max?: number;
  /** Static options; `"dynamic"` when `options` is a method (served through the options endpoint). */
  options?: PropOption[] | "dynamic";
  /** For `type: "app"`: the app's name slug. */
  app?: string;
  /** For `$.interface.http`. */
  customResponse?: boolean;
  /** For `propDefinition` props: the app prop it came from and the definition name. */
  propDefinition?: { appProp: string; name: string };
  useQuery?: boolean;
  reloadProps?: boolean;
  disabled?: boolean;
  hidden?: boolean;
}

/** What loading a component in the sandbox reports about its definition. */
export interface ComponentMeta {
  name: string;
  key?: string;
  version: string;
  /** `source` when the definition has no type. */
  type: "source" | "action";
  description?: string;
  dedupe?: "unique" | "greatest" | "last";
  props: PropMeta[];
  hooks: Array<"deploy" | "activate" | "deactivate">;
  methods: string[];
  hasRun: boolean;
  /** The component has `additionalProps()`: its dynamic props depend on the configured ones. */
  additionalProps?: boolean;
}

/** A value an app prop receives: the account's credentials and the app's name slug. */
export interface AppPropValue {
  app: string;
  $auth: Record<string, unknown>;
}

/** A dynamic prop as the runtime needs it: its name and type. */
export interface DynamicPropRef {
  name: string;
  type: string;
}

/** Resolved prop values handed to the component: plain values, `{endpoint}` for HTTP, `AppPropValue` for apps. */
export type PropValues = Record<string, unknown>;

export type InvocationKind =
  /**
   * `parseBody`: `event` is an endpoint event without `body`, which the executor parses from `bodyRaw`
   * (child/component/http-body.ts) before `run` sees it.
   */
  | { kind: "run"; event: unknown; parseBody?: boolean }
  | { kind: "hook"; hook: "deploy" | "activate" | "deactivate" }
  /** Calls a prop's async `options({page, prevContext, query, ...configured})` and returns what it returns. */
  | { kind: "options"; prop: string; args: Record<string, unknown> }
  /**
   * Calls `additionalProps(previousPropDefs)` with `this` holding the configured props and returns the
   * dynamic props it defines as `PropMeta[]` (none when the component has no such method).
   */
  | { kind: "props" };

export interface InvokeRequest {
  /** Tenant whose executor runs this: code of different owners never shares a process. */
  ownerId: string;
  /** The source (`dc_…`), or a throwaway id for options calls on a saved component. */
  sourceId: string;
  component: BuiltComponent;
  props: PropValues;
  /** Names of props that are `$.service.db`; each gets the source's db. */
  dbProps: string[];
  /**
   * Props that `props` holds a value for but the definition does not declare: the source's dynamic
   * props (from `additionalProps()`), with their type so that the runtime builds their value.
   */
  dynamicProps?: DynamicPropRef[];
  /** Names of props that are `$.interface.http` and whether they hold the response (customResponse). */
  httpProps: Array<{ name: string; endpoint: string; customResponse: boolean }>;
  /** The source's db contents when the invocation starts (authoritative copy kept by the server). */
  db: Record<string, unknown>;
  /** Monotonic version of `db`; an executor may cache contents per source and skip the copy when it matches. */
  dbVersion: number;
  invocation: InvocationKind;
  /** Wall-clock limit for this invocation; past it the executor is killed and replaced. */
  timeoutMs: number;
  /** Aborted: the invocation is dropped, failing with the signal's reason, while it waits unsent. */
  signal?: AbortSignal | undefined;
}

export interface EmitMeta {
  id?: string | number;
  name?: string;
  summary?: string;
  ts?: number;
  /** Epoch ms before which the event is not delivered to its listeners (Pipedream's `delivery_ts`). */
  delivery_ts?: number;
}

export interface EmittedEvent {
  event: unknown;
  meta: EmitMeta;
  /**
   * The UTF-8 bytes of the event's JSON, as the executor measured them when it serialized the event;
   * on the server, at least the server's own lower bound (`jsonLength`) whatever the executor said.
   * What the free plan's stored bytes count (a lower bound alone let number-heavy events pass 12 times
   * the quota). Absent on emits no executor measured.
   */
  bytes?: number;
}

export interface LogEntry {
  level: "log" | "info" | "warn" | "error" | "debug";
  message: string;
  /** Epoch ms. */
  ts: number;
}

export interface HttpResponse {
  status: number;
  /** Header values as text; `set-cookie` (any case) may be a list, one cookie each. */
  headers: Record<string, string | string[]>;
  /** Body as text, or base64 when `bodyBase64` is set (a Buffer in the component). */
  body: string | null;
  bodyBase64?: boolean;
  /**
   * `respond({sandbox: false})`: the component asks that its answer not carry `Content-Security-Policy:
   * sandbox`; honoured only where the endpoint origin makes that safe (docs/isolation.md).
   */
  sandbox?: false;
}

export interface InvokeResult {
  /** Emits in call order (the server orders `ts` emits and applies dedupe when it commits). */
  emits: EmittedEvent[];
  logs: LogEntry[];
  /** Keys written with db.set during this invocation and their final values (JSON). */
  dbWrites: Record<string, unknown>;
  /** Problems that did not stop the run: an emit over the size limit, too many emits, too many logs. */
  warnings: SerializedError[];
  /** Set when the invocation failed; its emits and db writes must then be discarded. */
  error?: SerializedError;
  /** For `options` invocations: what the method returned. */
  returnValue?: unknown;
  /** The first `http.respond()` of the invocation, when the component called it. */
  response?: HttpResponse;
  durationMs: number;
}

/**
 * A request component code sent to `https://api.pipedream.com` (Pipedream's app files hard-code it),
 * carried over the executor's IPC to be answered by this server's own API (docs/isolation.md).
 */
export interface ComponentApiRequest {
  method: string;
  /** Path and query as the component sent them (`/v1/...`). */
  url: string;
  /** Lower-case names; hop-by-hop headers and content-length left out. */
  headers: Record<string, string>;
  /** The body, base64; at most the API's body limit plus one byte (so that a larger one is refused as such). */
  body: string;
}

/** The API's answer to a `ComponentApiRequest`, as the component's HTTP client gets it. */
export interface ComponentApiResponse {
  status: number;
  headers: Record<string, string | string[]>;
  /** base64 */
  body: string;
}

/** Answers a component's request with the API; `ownerId` is whose executor sent it (for logs and throttling only). */
export type ComponentApiHandler = (
  request: ComponentApiRequest,
  caller: { ownerId: string },
) => Promise<ComponentApiResponse>;

/** Work a source's code did while none of its invocations ran (timers, promises left running after `run`). */
export interface LateWork {
  ownerId: string;
  sourceId: string;
  /** CPU time to charge to the owner's compute quota. */
  cpuMs: number;
  /** Set when it went wrong: `late_emit`, `late_work_stopped`, or the crash's code. */
  error?: { code: string; message: string; stack?: string };
}

/**
 * Runs component code in sandboxed executor processes. `invoke` calls of one source run one at a time,
 * in the order they were made; `onRespond` fires as soon as the component calls
 * `http.respond({ immediate: true, … })` (any other response comes with the result).
 */
export interface Executor {
  inspect(ownerId: string, component: BuiltComponent, timeoutMs?: number): Promise<ComponentMeta>;
  invoke(request: InvokeRequest, onRespond?: (response: HttpResponse) => void): Promise<InvokeResult>;
  /**
   * The caller applied every result of the source's invocations up to db `version`: each request it
   * makes from now on carries at least that version, so the writes it returned need not be kept.
   */
  applied?(ownerId: string, sourceId: string, version: number): void;
  /** Stops every executor process; pending invocations fail with `executor_stopped`. */
  close(): Promise<void>;
}

/** Failure codes an invocation's `error.code` can carry besides the component's own thrown codes. */
export const invocationFailureCodes = [
  "component_error",
  "timeout",
  "out_of_memory",
  "scratch_full",
  "process_exit",
  "executor_crash",
  "executor_stopped",
  "unhandled_rejection",
] as const;
