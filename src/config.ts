import { readFileSync } from "node:fs";
import { isIP } from "node:net";
import os from "node:os";
import path from "node:path";
import { checkEndpointUrl, derivedEndpointUrl } from "./endpoint-origin.ts";

/** Everything Fount reads from its environment, parsed once. */
export interface Config {
  host: string;
  port: number;
  /** Where clients reach the API and the console; never ends with a slash. */
  publicUrl: string;
  /**
   * Where clients reach source endpoints (FOUNT_ENDPOINT_URL), an origin of their own: a base URL
   * (endpoints at `<base>/e/<id>`) or a pattern with `{id}` as the host's first label; default PUBLIC_URL
   * on `endpointPort` (src/endpoint-origin.ts). Never ends with a slash.
   */
  endpointUrl: string;
  /** The port of the listener that serves source endpoints only (FOUNT_ENDPOINT_PORT, default PORT+1). */
  endpointPort: number;
  dataDir: string;
  /** npm cache shared by package installs of components; default `<dataDir>/npm-cache`. */
  npmCacheDir: string;
  /** npm registry the packages components import come from (FOUNT_NPM_REGISTRY); undefined: npm's own. */
  npmRegistry: string | undefined;
  /** Package installs of components running at once, each in its own process (FOUNT_INSTALL_CONCURRENCY). */
  installConcurrency: number;
  /** Heap cap of each install process, MiB (FOUNT_INSTALL_MEMORY_MB). */
  installMemoryMb: number;
  /** Largest installed package set of a component on disk, MiB (FOUNT_INSTALL_MAX_MB). */
  installMaxMb: number;
  /** The npm cache is emptied once it holds more than this, MiB (FOUNT_NPM_CACHE_MAX_MB; 0: after every install). */
  npmCacheMaxMb: number;
  /** Bytes an owner's saved components may keep, past which a new save is refused (FOUNT_MAX_COMPONENT_BYTES_PER_OWNER). */
  maxComponentBytesPerOwner: number;
  /** How long a package set no source uses is kept after its last build, ms (FOUNT_PACKAGE_SET_GRACE_MS). */
  packageSetGraceMs: number;
  /** `postgres://…` selects the PostgreSQL store; undefined means embedded SQLite in dataDir. */
  databaseUrl: string | undefined;
  /** How long a PostgreSQL operation waits for a connection or an answer before it fails with 503 (FOUNT_STORE_TIMEOUT_MS). */
  storeTimeoutMs: number;
  /** With SQLite: how long after commit, at most, the event search's index catches up (FOUNT_SEARCH_INDEX_DELAY_MS). */
  searchIndexDelayMs: number;
  bootstrapApiKey: string | undefined;
  /** Requests per minute per API key; 0 turns the limit off. */
  rateLimit: number;
  /** Time a request may take to arrive whole, headers and body (FOUNT_REQUEST_TIMEOUT_MS). */
  requestTimeoutMs: number;
  /** Time a request's headers may take to arrive (FOUNT_HEADERS_TIMEOUT_MS). */
  headersTimeoutMs: number;
  /** Connections each listener holds at once (FOUNT_MAX_CONNECTIONS). */
  maxConnections: number;
  /** Connections one client address may hold on each listener; 0: no bound (FOUNT_MAX_CONNECTIONS_PER_ADDRESS). */
  maxConnectionsPerAddress: number;
  /** SSE streams one user may have open on a node at once (FOUNT_SSE_MAX_STREAMS). */
  sseMaxStreams: number;
  /** SSE streams one user may have replaying stored events on a node at once (FOUNT_SSE_MAX_REPLAYS). */
  sseMaxReplays: number;
  /** Ms an SSE resume waits for a replay turn, then is told to come back (FOUNT_SSE_REPLAY_WAIT_MS). */
  sseReplayWaitMs: number;
  /**
   * Whose `X-Forwarded-For` names the client (FOUNT_TRUST_PROXY): false (the connection's address, the
   * default), or the addresses and CIDR ranges of the reverse proxies.
   */
  trustProxy: false | string[];
  /** Wrong API keys one address may send per `authFailureWindowMs` before it is throttled; 0 turns it off. */
  authFailureLimit: number;
  authFailureWindowMs: number;
  webhookAllowPrivate: boolean;
  /** Hostnames (`*.corp.example` too), IP addresses and CIDR ranges deliveries may reach even when private. */
  webhookAllowHosts: string[];
  /** Deliveries of one owner sent at once by this node, all their destinations together (FOUNT_DELIVERY_MAX_PER_OWNER). */
  deliveryMaxPerOwner: number;
  logLevel: string;
  /**
   * How log lines are written (LOG_FORMAT): `pretty` (one readable line each), `json` (pino's JSON lines);
   * undefined: pretty when stdout is a terminal, JSON otherwise (src/logging.ts).
   */
  logFormat: "pretty" | "json" | undefined;
  /** Per-invocation wall-clock limit for component code. */
  invocationTimeoutMs: number;
  /** Endpoint hits one source may have waiting for (or in) their run on a node; past it, 429 (FOUNT_MAX_QUEUED_HITS). */
  maxQueuedHits: number;
  /** Body bytes those hits may hold together (FOUNT_MAX_QUEUED_HIT_BYTES). */
  maxQueuedHitBytes: number;
  /** PEM file of extra CAs that component code trusts (FOUNT_EXECUTOR_CA_CERTS). */
  executorCaCerts: string | undefined;
  /** Memory cap of each executor process. */
  executorMemoryMb: number;
  /** Size limit of each owner's scratch folder, in MiB (FOUNT_EXECUTOR_SCRATCH_MB). */
  executorScratchMb: number;
  /** Realms per owner's executor process; past it, sources share realms. */
  executorRealmsPerOwner: number;
  /** V8 flags added to every executor process (FOUNT_EXECUTOR_V8_FLAGS); those this Node lacks are dropped. */
  executorV8Flags: string[];
  /** An owner's executor with nothing to do for this long is stopped (FOUNT_EXECUTOR_IDLE_S). */
  executorIdleMs: number;
  /** Executor processes started ahead for owners whose process is not running (FOUNT_EXECUTOR_SPARES). */
  executorSpares: number;
  /** glibc malloc arenas of each executor process (FOUNT_EXECUTOR_MALLOC_ARENA_MAX); 0: glibc's default. */
  executorMallocArenaMax: number;
  /** Young-generation cap of each realm in MiB (FOUNT_EXECUTOR_REALM_YOUNG_MB); 0: V8's default. */
  executorRealmYoungMb: number;
  /** Largest event a source may emit (JSON bytes). */
  maxEventBytes: number;
  /** JSON bytes all the emits of one run may hold; the emit that crosses it fails the run. */
  maxRunEmitBytes: number;
  /** Largest `this.db` of one source (JSON bytes); writes beyond it fail the invocation. */
  maxDbBytes: number;
  /** Subscriptions that may route one emitter's events (FOUNT_MAX_LISTENERS_PER_EMITTER; docs/delivery.md). */
  maxListenersPerEmitter: number;
  /** Event JSON one run's emits may have routing copy into deliveries, all listeners together (FOUNT_MAX_RUN_ROUTED_BYTES). */
  maxRunRoutedBytes: number;
  /** The sources' dbs the runner keeps in memory, in all (JSON bytes; FOUNT_DB_CACHE_BYTES). */
  dbCacheBytes: number;
  /** Largest API request body. */
  bodyLimitBytes: number;
  /** Daily quotas of free accounts. */
  freeDailyInvocations: number;
  freeDailyComputeMs: number;
  /** JSON bytes of events and delivery copies a free account's runs may store a day (FOUNT_FREE_DAILY_STORED_BYTES). */
  freeDailyStoredBytes: number;
  /** Run each owner's executor under a uid of its own (FOUNT_EXECUTOR_ISOLATE_USERS); undefined: when root. */
  executorIsolateUsers: boolean | undefined;
  /** First uid of this server's executor range (FOUNT_EXECUTOR_UID_BASE); undefined: claim a free range. */
  executorUidBase: number | undefined;
  /** Let component code connect to loopback, private and link-local addresses (FOUNT_EXECUTOR_ALLOW_PRIVATE). */
  executorAllowPrivate: boolean;
  /** Addresses component code may reach even when private (FOUNT_EXECUTOR_ALLOW_HOSTS), webhook syntax. */
  executorAllowHosts: string[];
  /**
   * Answer component code's requests to https://api.pipedream.com/v1 with this server's API, over the
   * executor's IPC (FOUNT_PIPEDREAM_API, default true); false: they go to the network as before.
   */
  pipedreamApi: boolean;
  /** Serve `GET /metrics` (FOUNT_METRICS, default true). */
  metrics: boolean;
  /** When set, `/metrics` asks for `Authorization: Bearer <token>` (FOUNT_METRICS_TOKEN). */
  metricsToken: string | undefined;
  /** When set, `/metrics` is served on this port alone, not on PORT (FOUNT_METRICS_PORT). */
  metricsPort: number | undefined;
  /** The address of the metrics port (FOUNT_METRICS_HOST; default HOST). */
  metricsHost: string;
  /** This node's name in metrics (FOUNT_NODE_ID); default host name and port. */
  nodeId: string;
  /**
   * Several nodes: where the others reach this one with the hits they forward (FOUNT_NODE_URL); when
   * unset, the address it listens on (HOST, or this machine's first non-loopback IPv4 address when HOST
   * is a wildcard); `off`: it takes no forwarded hits.
   */
  nodeUrl: string | undefined;
  /** How long events are kept, and how the pruner works (FOUNT_RETENTION_*). */
  retention: RetentionSettings;
  /** How many sources, webhooks, workflows and app accounts one owner may have. */
  ownerLimits: OwnerLimits;
}

export class ConfigError extends Error {}

/** How many of each one owner may have (FOUNT_MAX_*_PER_OWNER; src/http/owner-limits.ts). */
export interface OwnerLimits {
  sources: number;
  webhooks: number;
  workflows: number;
  appAccounts: number;
}

/** A channel's retention: its newest `events`, none older than `days` (undefined: no age limit). */
export interface RetentionLimits {
  events: number;
  days: number | undefined;
}

/** How long events are kept (docs/streams.md, "Retention"). */
export interface RetentionSettings {
  /** A source's channels, for what its own policy leaves out (and every workflow's). */
  defaults: RetentionLimits;
  /** The largest policy a source may set; finite, so that no window grows without bound. */
  max: { events: number; days: number };
  /**
   * The largest policy a free account's source may set (FOUNT_FREE_RETENTION_MAX_*; the instance's
   * maximum unless set). With `days` set, a free account's policy that names no age gets that one.
   */
  freeMax: { events: number; days: number | undefined };
  /** Every emitter's `$logs` and `$errors`, whatever its policy. */
  logs: RetentionLimits;
  errors: RetentionLimits;
  /** How often the pruner visits the windows that got events since its last visit. */
  pruneIntervalMs: number;
  /** How often it visits every window (for the age limits). */
  sweepIntervalMs: number;
  /** Events deleted per short transaction. */
  pruneBatch: number;
  /** Events a second the pruner deletes from one channel at most. */
  pruneRate: number;
}

function limits(
  env: NodeJS.ProcessEnv,
  prefix: string,
  max: { events: number; days: number },
): RetentionLimits {
  const events = int(env, `${prefix}_EVENTS`, 100, 1);
  const days = env[`${prefix}_DAYS`] ? int(env, `${prefix}_DAYS`, 0, 1) : undefined;
  if (events > max.events)
    throw new ConfigError(`${prefix}_EVENTS (${events}) is over FOUNT_RETENTION_MAX_EVENTS (${max.events})`);
  if (days !== undefined && days > max.days)
    throw new ConfigError(`${prefix}_DAYS (${days}) is over FOUNT_RETENTION_MAX_DAYS (${max.days})`);
  return { events, days };
}

function retentionSettings(env: NodeJS.ProcessEnv): RetentionSettings {
  const max = {
    events: int(env, "FOUNT_RETENTION_MAX_EVENTS", 1_000_000, 1),
    days: int(env, "FOUNT_RETENTION_MAX_DAYS", 3650, 1),
  };
  const freeDays = env.FOUNT_FREE_RETENTION_MAX_DAYS
    ? int(env, "FOUNT_FREE_RETENTION_MAX_DAYS", 0, 1)
    : undefined;
  const freeMax = { events: int(env, "FOUNT_FREE_RETENTION_MAX_EVENTS", max.events, 1), days: freeDays };
  if (freeMax.events > max.events)
    throw new ConfigError(
      `FOUNT_FREE_RETENTION_MAX_EVENTS (${freeMax.events}) is over FOUNT_RETENTION_MAX_EVENTS (${max.events})`,
    );
  if (freeDays !== undefined && freeDays > max.days)
    throw new ConfigError(
      `FOUNT_FREE_RETENTION_MAX_DAYS (${freeDays}) is over FOUNT_RETENTION_MAX_DAYS (${max.days})`,
    );
  return {
    defaults: limits(env, "FOUNT_RETENTION", max),
    max,
    freeMax,
    logs: limits(env, "FOUNT_RETENTION_LOGS", max),
    errors: limits(env, "FOUNT_RETENTION_ERRORS", max),
    pruneIntervalMs: int(env, "FOUNT_RETENTION_PRUNE_MS", 1000, 10),
    sweepIntervalMs: int(env, "FOUNT_RETENTION_SWEEP_MS", 60_000, 10),
    pruneBatch: int(env, "FOUNT_RETENTION_PRUNE_BATCH", 500, 1),
    pruneRate: int(env, "FOUNT_RETENTION_PRUNE_RATE", 100_000, 1),
  };
}

function int(env: NodeJS.ProcessEnv, name: string, fallback: number, min = 0): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min)
    throw new ConfigError(`${name} must be an integer ≥ ${min}, got "${raw}"`);
  return value;
}

function bool(env: NodeJS.ProcessEnv, name: string): boolean {
  const raw = (env[name] ?? "").toLowerCase();
  return raw === "1" || raw === "true" || raw === "yes";
}

/** true, false, or undefined when unset (the caller picks the default). */
function optionalBool(env: NodeJS.ProcessEnv, name: string): boolean | undefined {
  const raw = (env[name] ?? "").toLowerCase();
  if (raw === "") return undefined;
  if (raw === "1" || raw === "true" || raw === "yes") return true;
  if (raw === "0" || raw === "false" || raw === "no") return false;
  throw new ConfigError(`${name} must be true or false, got "${env[name]}"`);
}

/** An IP address or a CIDR range (`10.0.0.0/8`, `fd00::/8`). */
function isAddressOrRange(entry: string): boolean {
  const [net, bits, extra] = entry.split("/");
  const family = isIP(net ?? "");
  const maxBits = family === 4 ? 32 : 128;
  return (
    extra === undefined &&
    family !== 0 &&
    (bits === undefined || (/^\d{1,3}$/.test(bits) && Number(bits) <= maxBits))
  );
}

/** A comma-separated list of hostnames, IP addresses and CIDR ranges (`10.0.0.0/8`, `fd00::/8`). */
function hostList(env: NodeJS.ProcessEnv, name: string): string[] {
  const entries = (env[name] ?? "")
    .split(",")
    .map((s) => s.trim().toLowerCase())
    .filter(Boolean);
  for (const entry of entries) {
    const validName = /^(\*\.)?[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?$/.test(entry);
    if (!(isAddressOrRange(entry) || validName)) {
      throw new ConfigError(`${name}: "${entry}" is neither a hostname nor an IP address or CIDR range`);
    }
  }
  return entries;
}

/**
 * Connections each of the two listeners holds by default: 40 % of the process's open-file limit, so that
 * both together leave a fifth of the descriptors to the store, the executors and outgoing requests (a
 * flood of connections took every descriptor before, and then the store's too). 4,096 where the limit
 * cannot be read (not Linux).
 */
function defaultMaxConnections(): number {
  try {
    const line = readFileSync("/proc/self/limits", "utf8")
      .split("\n")
      .find((l) => l.startsWith("Max open files"));
    const soft = Number(line?.split(/\s{2,}/)[1]);
    if (Number.isFinite(soft) && soft > 0) return Math.max(64, Math.floor(soft * 0.4));
  } catch {
    // Not Linux: the fallback below.
  }
  return 4096;
}

/** Names proxy-addr (Fastify's `trustProxy`) accepts for sets of addresses, besides IPs and CIDRs. */
const proxyRanges = new Set(["loopback", "linklocal", "uniquelocal"]);

/**
 * FOUNT_TRUST_PROXY: empty (trust no proxy), or a comma-separated list of the proxies' IPs, CIDR ranges
 * and the names `loopback`, `linklocal`, `uniquelocal`. Trusting every hop (`true`) or a hop count is
 * refused: neither can tell a proxy from a client that connects directly and writes X-Forwarded-For
 * itself (Fastify 5 ignores a hop count for that reason).
 */
function trustProxy(env: NodeJS.ProcessEnv): false | string[] {
  const raw = (env.FOUNT_TRUST_PROXY ?? "").trim();
  if (raw === "" || raw.toLowerCase() === "false") return false;
  const entries = raw.split(",").map((s) => s.trim().toLowerCase());
  for (const entry of entries) {
    if (proxyRanges.has(entry) || isAddressOrRange(entry)) continue;
    throw new ConfigError(
      `FOUNT_TRUST_PROXY must list the reverse proxies' addresses or CIDR ranges (or loopback, linklocal, ` +
        `uniquelocal), got "${entry}": trusting any hop or a number of hops would let a client that ` +
        "connects directly choose its own address",
    );
  }
  return entries;
}

/** LOG_FORMAT: `pretty`, `json`, or unset (chosen by whether stdout is a terminal). */
function logFormat(env: NodeJS.ProcessEnv): Config["logFormat"] {
  const raw = (env.LOG_FORMAT ?? "").trim().toLowerCase();
  if (raw === "") return undefined;
  if (raw === "pretty" || raw === "json") return raw;
  throw new ConfigError(`LOG_FORMAT must be pretty or json, got "${env.LOG_FORMAT}"`);
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env, overrides: Partial<Config> = {}): Config {
  const host = env.HOST || "127.0.0.1";
  const port = int(env, "PORT", 8787);
  const publicUrl = (env.PUBLIC_URL || `http://${host.includes(":") ? `[${host}]` : host}:${port}`).replace(
    /\/+$/,
    "",
  );
  if (!URL.canParse(publicUrl) || !/^https?:/.test(publicUrl))
    throw new ConfigError(`PUBLIC_URL must be an http:// or https:// URL, got "${publicUrl}"`);
  // 0 (any free port) for PORT makes the endpoint listener take any free port too.
  const endpointPort = int(env, "FOUNT_ENDPOINT_PORT", port === 0 ? 0 : port + 1);
  if (endpointPort > 65535 || (endpointPort === port && port !== 0)) {
    throw new ConfigError(
      `FOUNT_ENDPOINT_PORT must be a free port other than PORT (${port}), got ${endpointPort}: source endpoints have a listener of their own`,
    );
  }
  let endpointUrl = derivedEndpointUrl(publicUrl, endpointPort);
  if (env.FOUNT_ENDPOINT_URL) {
    try {
      endpointUrl = checkEndpointUrl(env.FOUNT_ENDPOINT_URL, publicUrl);
    } catch (err) {
      throw new ConfigError(`FOUNT_ENDPOINT_URL: ${(err as Error).message}`);
    }
  }
  const databaseUrl = env.DATABASE_URL || undefined;
  const nodeUrl = env.FOUNT_NODE_URL?.replace(/\/+$/, "") || undefined;
  if (nodeUrl && nodeUrl !== "off" && !/^https?:\/\/[^/]+$/.test(nodeUrl)) {
    throw new ConfigError(
      "FOUNT_NODE_URL must be http://host:port (where the other nodes reach this one, no path), or off",
    );
  }
  if (databaseUrl && !/^postgres(ql)?:\/\//.test(databaseUrl)) {
    throw new ConfigError(
      "DATABASE_URL must start with postgres:// (leave it unset for the embedded SQLite store)",
    );
  }
  const executorIsolateUsers = optionalBool(env, "FOUNT_EXECUTOR_ISOLATE_USERS");
  if (executorIsolateUsers && process.getuid?.() !== 0) {
    throw new ConfigError(
      "FOUNT_EXECUTOR_ISOLATE_USERS=true needs the server to run as root (it gives executors uids of their own)",
    );
  }
  return {
    host,
    port,
    publicUrl,
    endpointUrl,
    endpointPort,
    dataDir: path.resolve(env.FOUNT_DATA_DIR || ".fount"),
    databaseUrl,
    storeTimeoutMs: int(env, "FOUNT_STORE_TIMEOUT_MS", 5000, 100),
    searchIndexDelayMs: int(env, "FOUNT_SEARCH_INDEX_DELAY_MS", 1000, 10),
    npmCacheDir: path.resolve(env.FOUNT_NPM_CACHE || path.join(env.FOUNT_DATA_DIR || ".fount", "npm-cache")),
    npmRegistry: env.FOUNT_NPM_REGISTRY || undefined,
    installConcurrency: int(env, "FOUNT_INSTALL_CONCURRENCY", 2, 1),
    installMemoryMb: int(env, "FOUNT_INSTALL_MEMORY_MB", 512, 64),
    installMaxMb: int(env, "FOUNT_INSTALL_MAX_MB", 512, 1),
    npmCacheMaxMb: int(env, "FOUNT_NPM_CACHE_MAX_MB", 1024, 0),
    // 256 saves of the largest code (1 MiB), or thousands of usual ones; the records are kept for ever.
    maxComponentBytesPerOwner: int(env, "FOUNT_MAX_COMPONENT_BYTES_PER_OWNER", 256 * 2 ** 20, 1),
    packageSetGraceMs: int(env, "FOUNT_PACKAGE_SET_GRACE_MS", 10 * 60_000, 0),
    bootstrapApiKey: env.FOUNT_BOOTSTRAP_API_KEY || undefined,
    rateLimit: int(env, "FOUNT_RATE_LIMIT", 6000),
    requestTimeoutMs: int(env, "FOUNT_REQUEST_TIMEOUT_MS", 30_000, 1000),
    headersTimeoutMs: int(env, "FOUNT_HEADERS_TIMEOUT_MS", 15_000, 1000),
    maxConnections: int(env, "FOUNT_MAX_CONNECTIONS", defaultMaxConnections(), 1),
    maxConnectionsPerAddress: int(env, "FOUNT_MAX_CONNECTIONS_PER_ADDRESS", 256, 0),
    sseMaxStreams: int(env, "FOUNT_SSE_MAX_STREAMS", 2000, 1),
    sseMaxReplays: int(env, "FOUNT_SSE_MAX_REPLAYS", 8, 1),
    sseReplayWaitMs: int(env, "FOUNT_SSE_REPLAY_WAIT_MS", 30_000, 100),
    trustProxy: trustProxy(env),
    authFailureLimit: int(env, "FOUNT_AUTH_FAILURE_LIMIT", 20),
    authFailureWindowMs: int(env, "FOUNT_AUTH_FAILURE_WINDOW_S", 300, 1) * 1000,
    webhookAllowPrivate: bool(env, "FOUNT_WEBHOOK_ALLOW_PRIVATE"),
    webhookAllowHosts: hostList(env, "FOUNT_WEBHOOK_ALLOW_HOSTS"),
    deliveryMaxPerOwner: int(env, "FOUNT_DELIVERY_MAX_PER_OWNER", 32, 1),
    logLevel: env.LOG_LEVEL || "info",
    logFormat: logFormat(env),
    invocationTimeoutMs: int(env, "FOUNT_INVOCATION_TIMEOUT_MS", 30_000, 100),
    // 100 hits keep a source's burst within one executor batch; 16 MiB is 32 hits at the 512 KB body limit.
    maxQueuedHits: int(env, "FOUNT_MAX_QUEUED_HITS", 100, 1),
    maxQueuedHitBytes: int(env, "FOUNT_MAX_QUEUED_HIT_BYTES", 16 * 1024 * 1024, 1),
    executorCaCerts: env.FOUNT_EXECUTOR_CA_CERTS ? path.resolve(env.FOUNT_EXECUTOR_CA_CERTS) : undefined,
    executorMemoryMb: int(env, "FOUNT_EXECUTOR_MEMORY_MB", 256, 32),
    executorScratchMb: int(env, "FOUNT_EXECUTOR_SCRATCH_MB", 256, 1),
    executorRealmsPerOwner: int(env, "FOUNT_EXECUTOR_REALMS_PER_OWNER", 16, 1),
    executorV8Flags: (env.FOUNT_EXECUTOR_V8_FLAGS ?? "").split(/\s+/).filter(Boolean),
    executorIdleMs: int(env, "FOUNT_EXECUTOR_IDLE_S", 600, 1) * 1000,
    executorSpares: int(env, "FOUNT_EXECUTOR_SPARES", 2, 0),
    executorMallocArenaMax: int(env, "FOUNT_EXECUTOR_MALLOC_ARENA_MAX", 2, 0),
    executorRealmYoungMb: int(env, "FOUNT_EXECUTOR_REALM_YOUNG_MB", 0, 0),
    maxEventBytes: int(env, "FOUNT_MAX_EVENT_BYTES", 1024 * 1024, 1024),
    // Well above a first poll's few MB of items; docs/isolation.md, "How much one run may emit".
    maxRunEmitBytes: int(env, "FOUNT_MAX_RUN_EMIT_BYTES", 64 * 1024 * 1024, 1024),
    maxDbBytes: int(env, "FOUNT_MAX_DB_BYTES", 4 * 1024 * 1024, 1024),
    // Each listener copies every event the emitter stores, in the emitter's commit: 50 listeners of a
    // 1,000-event run write 50,000 deliveries (2 s on SQLite with 2 cores; docs/delivery.md).
    maxListenersPerEmitter: int(env, "FOUNT_MAX_LISTENERS_PER_EMITTER", 50, 1),
    // About 1.5 to 5 s of one commit on SQLite here (docs/delivery.md, "Listeners per emitter").
    maxRunRoutedBytes: int(env, "FOUNT_MAX_RUN_ROUTED_BYTES", 128 * 1024 * 1024, 1024),
    dbCacheBytes: int(env, "FOUNT_DB_CACHE_BYTES", 256 * 1024 * 1024, 0),
    bodyLimitBytes: 1024 * 1024,
    freeDailyInvocations: int(env, "FOUNT_FREE_DAILY_INVOCATIONS", 10_000),
    freeDailyComputeMs: int(env, "FOUNT_FREE_DAILY_COMPUTE_MS", 30 * 60 * 1000),
    // 1 GiB: a few full 64 MiB runs, and far below the ~600 GB a day one account wrote within its invocations.
    freeDailyStoredBytes: int(env, "FOUNT_FREE_DAILY_STORED_BYTES", 1024 * 1024 * 1024),
    executorIsolateUsers,
    executorUidBase: env.FOUNT_EXECUTOR_UID_BASE ? int(env, "FOUNT_EXECUTOR_UID_BASE", 0, 1000) : undefined,
    executorAllowPrivate: bool(env, "FOUNT_EXECUTOR_ALLOW_PRIVATE"),
    executorAllowHosts: hostList(env, "FOUNT_EXECUTOR_ALLOW_HOSTS"),
    pipedreamApi: optionalBool(env, "FOUNT_PIPEDREAM_API") ?? true,
    metrics: optionalBool(env, "FOUNT_METRICS") ?? true,
    metricsToken: env.FOUNT_METRICS_TOKEN || undefined,
    metricsPort: env.FOUNT_METRICS_PORT ? int(env, "FOUNT_METRICS_PORT", 0) : undefined,
    metricsHost: env.FOUNT_METRICS_HOST || host,
    nodeId: env.FOUNT_NODE_ID || `${os.hostname()}:${port}`,
    nodeUrl,
    retention: retentionSettings(env),
    ownerLimits: {
      sources: int(env, "FOUNT_MAX_SOURCES_PER_OWNER", 10_000, 1),
      webhooks: int(env, "FOUNT_MAX_WEBHOOKS_PER_OWNER", 10_000, 1),
      workflows: int(env, "FOUNT_MAX_WORKFLOWS_PER_OWNER", 10_000, 1),
      appAccounts: int(env, "FOUNT_MAX_APP_ACCOUNTS_PER_OWNER", 10_000, 1),
    },
    ...overrides,
  };
}
