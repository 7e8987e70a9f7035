/**
 * Props: `configurable_props` as the API shows them, validation of `configured_props` against the
 * definition, their stored form (secrets sealed), how the API renders them back, and the values a
 * component receives at run time.
 */
import { Cron } from "croner";
import { AppError } from "../../errors.ts";
import type { ComponentMeta, PropMeta } from "../../runtime/types.ts";
import { maskHttpRequest, openHttpRequest, parseHttpRequest } from "./http-request-prop.ts";
import { isSealed, type SealedValue, type Sealer, secretMask } from "./sealed-values.ts";

export { isSealed, type SealedValue, type Sealer, secretMask };

/** Largest configured value of one prop (JSON bytes), as the spec's limits table says. */
export const maxPropValueBytes = 64 * 1024;

/**
 * Timer props one source may have. Each is a row claimed at every tick, and nothing bounded them: 100
 * sources of 500 every-second timers (.probe-r2/p2-timers.ts) left another account's 1 s timer 2 ticks
 * in 28 s. A component wanting several schedules needs a few; more is one timer's work.
 */
export const maxTimerProps = 10;

const scalarTypes = new Set(["string", "integer", "boolean", "object", "any"]);
const arrayTypes = new Set(["string[]", "integer[]", "boolean[]", "object[]", "any[]"]);
/** Props the platform fills in; the user configures nothing for them. */
const platformTypes = new Set(["$.interface.http", "$.service.db", "alert"]);

export interface TimerConfig {
  intervalSeconds: number | null;
  cron: string | null;
  timezone: string | null;
}

function propsInvalid(prop: string, message: string): AppError {
  return new AppError("props_invalid", message, { details: { prop } });
}

/**
 * Where a source's stored props keep the definitions of its dynamic props (what `additionalProps()`
 * returned at its last deploy or update), beside their values. `$` keeps it clear of prop names, which
 * Pipedream's components write as plain identifiers.
 */
export const dynamicPropsKey = "$dynamicProps";

/** The dynamic props stored with a source's props (none for most sources). */
export function storedDynamicProps(stored: Record<string, unknown>): PropMeta[] {
  const list = stored[dynamicPropsKey];
  return Array.isArray(list) ? (list as PropMeta[]) : [];
}

/** Every prop of a source: the component's, then its dynamic ones. */
export function sourceProps(meta: ComponentMeta, stored: Record<string, unknown>): PropMeta[] {
  const dynamic = storedDynamicProps(stored);
  return dynamic.length === 0 ? meta.props : [...meta.props, ...dynamic];
}

/** The spec's `configurable_props` entry for each prop a deploy can configure. */
export function configurableProps(meta: ComponentMeta): Array<Record<string, unknown>> {
  return configurablePropList(meta.props);
}

/** `configurable_props` entries of a list of props (a component's, or with its dynamic ones). */
export function configurablePropList(props: PropMeta[]): Array<Record<string, unknown>> {
  return props
    .filter((p) => !p.hidden)
    .map((p) => {
      const entry: Record<string, unknown> = { name: p.name, type: p.type };
      if (p.label !== undefined) entry.label = p.label;
      if (p.description !== undefined) entry.description = p.description;
      if (p.optional) entry.optional = true;
      if (p.default !== undefined) entry.default = p.default;
      if (p.app !== undefined) entry.app = p.app;
      if (p.secret) entry.secret = true;
      if (p.min !== undefined) entry.min = p.min;
      if (p.max !== undefined) entry.max = p.max;
      if (p.options !== undefined) entry.options = p.options === "dynamic" ? undefined : p.options;
      if (p.options === "dynamic") entry.remoteOptions = true;
      if (p.customResponse) entry.customResponse = true;
      if (p.useQuery) entry.useQuery = true;
      if (p.reloadProps) entry.reloadProps = true;
      if (p.propDefinition) entry.propDefinition = [p.propDefinition.appProp, p.propDefinition.name];
      return entry;
    });
}

/** Refuses components whose props Fount cannot run as a source. */
export function assertDeployable(meta: ComponentMeta): void {
  if (meta.type === "action")
    throw new AppError("not_deployable", "Actions are saved but cannot be deployed as sources");
  const hook = meta.props.find((p) => p.type === "$.interface.apphook");
  if (hook) {
    throw new AppError(
      "not_deployable",
      `Prop ${hook.name} is a $.interface.apphook, which needs Pipedream's managed app webhooks`,
      {
        details: { prop: hook.name },
      },
    );
  }
}

export function parseTimer(prop: string, value: unknown): TimerConfig {
  if (!value || typeof value !== "object" || Array.isArray(value)) {
    throw propsInvalid(prop, `Timer prop ${prop} must be an object with intervalSeconds or cron`);
  }
  const v = value as Record<string, unknown>;
  const interval = v.intervalSeconds ?? v.interval_seconds;
  const timezone = v.timezone ?? null;
  if (timezone !== null) {
    if (typeof timezone !== "string") throw propsInvalid(prop, "timezone must be a string");
    try {
      new Intl.DateTimeFormat("en", { timeZone: timezone });
    } catch {
      throw propsInvalid(prop, `Unknown timezone ${timezone}`);
    }
  }
  if (typeof v.cron === "string" && v.cron.trim() !== "") {
    const fields = v.cron.trim().split(/\s+/).length;
    if (fields !== 5 && fields !== 6 && !v.cron.trim().startsWith("@")) {
      throw propsInvalid(prop, `cron must have 5 or 6 fields, got ${fields}`);
    }
    try {
      new Cron(v.cron, { paused: true, timezone: (timezone as string | null) ?? "UTC" }).stop();
    } catch (err) {
      throw propsInvalid(prop, `Invalid cron expression: ${(err as Error).message}`);
    }
    return { intervalSeconds: null, cron: v.cron.trim(), timezone: (timezone as string | null) ?? null };
  }
  if (typeof interval === "number" && Number.isInteger(interval) && interval >= 1) {
    return { intervalSeconds: interval, cron: null, timezone: null };
  }
  throw propsInvalid(prop, `Timer prop ${prop} needs intervalSeconds (an integer ≥ 1) or cron`);
}

function checkScalar(p: PropMeta, type: string, value: unknown, label: string): void {
  switch (type) {
    case "string":
      if (typeof value !== "string") throw propsInvalid(p.name, `${label} must be a string`);
      break;
    case "integer":
      if (typeof value !== "number" || !Number.isInteger(value))
        throw propsInvalid(p.name, `${label} must be an integer`);
      if (p.min !== undefined && value < p.min) throw propsInvalid(p.name, `${label} must be ≥ ${p.min}`);
      if (p.max !== undefined && value > p.max) throw propsInvalid(p.name, `${label} must be ≤ ${p.max}`);
      break;
    case "boolean":
      if (typeof value !== "boolean") throw propsInvalid(p.name, `${label} must be a boolean`);
      break;
    case "object":
      if (!value || typeof value !== "object" || Array.isArray(value))
        throw propsInvalid(p.name, `${label} must be an object`);
      break;
  }
  if (Array.isArray(p.options) && p.options.length > 0 && (type === "string" || type === "integer")) {
    const allowed = p.options.map((o) => (typeof o === "object" && o !== null ? o.value : o));
    if (!allowed.some((a) => a === value)) {
      throw new AppError("props_invalid", `${label} must be one of the prop's options`, {
        details: { prop: p.name, allowed },
      });
    }
  }
}

/** The integer props of Pipedream clients often arrive as numeric strings (HTML forms, `--prop k=v`). */
function coerce(type: string, value: unknown): unknown {
  if (type === "integer" && typeof value === "string" && /^-?\d{1,15}$/.test(value)) return Number(value);
  if (type === "boolean" && (value === "true" || value === "false")) return value === "true";
  return value;
}

export interface ValidateOptions {
  /** The stored props before this update: secrets not given again are kept. */
  previous?: Record<string, unknown>;
  sealer: Sealer;
  /** Checks an app account reference and returns its app slug (throws 422 when unusable). */
  appAccount: (prop: string, id: string) => Promise<string>;
  /** Dynamic props (from `additionalProps()`), validated like the component's own. */
  dynamic?: PropMeta[];
}

/** Validates `configured_props` and returns their stored form, applying defaults. */
export async function validateProps(
  meta: ComponentMeta,
  given: Record<string, unknown>,
  options: ValidateOptions,
): Promise<Record<string, unknown>> {
  const props = options.dynamic?.length ? [...meta.props, ...options.dynamic] : meta.props;
  const timers = props.filter((p) => p.type === "$.interface.timer");
  if (timers.length > maxTimerProps) {
    throw propsInvalid(
      timers[maxTimerProps]!.name,
      `A source may have at most ${maxTimerProps} timer props ($.interface.timer); this one has ${timers.length}`,
    );
  }
  const known = new Map(props.map((p) => [p.name, p]));
  for (const name of Object.keys(given)) {
    if (!known.has(name)) throw propsInvalid(name, `The component has no prop named ${name}`);
  }
  const out: Record<string, unknown> = {};
  for (const p of props) {
    let value = given[p.name];
    if (value !== undefined && Buffer.byteLength(JSON.stringify(value) ?? "") > maxPropValueBytes) {
      throw propsInvalid(p.name, `The value of ${p.name} is over 64 KB`);
    }
    if (platformTypes.has(p.type)) continue;
    if (p.type === "$.interface.timer") {
      const timer = parseTimer(p.name, value ?? p.default ?? (p.optional ? undefined : null));
      out[p.name] = timer;
      continue;
    }
    if (p.type === "app") {
      if (value === undefined || value === null) {
        // Apps without auth (http, rss, schedule) need no account.
        continue;
      }
      const ref =
        typeof value === "object" && !Array.isArray(value)
          ? (value as Record<string, unknown>).authProvisionId
          : undefined;
      if (typeof ref !== "string")
        throw propsInvalid(p.name, `App prop ${p.name} takes {"authProvisionId": "apn_…"}`);
      const app = await options.appAccount(p.name, ref);
      if (p.app && app !== p.app)
        throw propsInvalid(p.name, `Account ${ref} is for app ${app}, not ${p.app}`);
      out[p.name] = { authProvisionId: ref };
      continue;
    }
    if (p.type === "http_request") {
      if (value === undefined || value === null) {
        if (p.optional) continue;
        value = p.default ?? null;
        if (value === null) throw propsInvalid(p.name, `Prop ${p.name} is required`);
      }
      out[p.name] = parseHttpRequest(p, value, options.previous?.[p.name], options.sealer);
      continue;
    }
    // The mask the API shows for a secret, sent back unchanged (a form or a script round-tripping a
    // GET), means "keep it", never a new secret of ten asterisks.
    if (p.secret && value === secretMask && options.previous?.[p.name] !== undefined) value = undefined;
    if (value === undefined || value === null) {
      const kept = options.previous?.[p.name];
      if (p.secret && kept !== undefined) {
        out[p.name] = kept;
        continue;
      }
      if (p.default !== undefined) value = p.default;
      else if (p.optional) continue;
      else throw propsInvalid(p.name, `Prop ${p.name} is required`);
    }
    if (arrayTypes.has(p.type)) {
      const inner = p.type.slice(0, -2);
      if (typeof value === "string" && value.trim().startsWith("[")) {
        try {
          value = JSON.parse(value);
        } catch {
          // Reported below as not an array.
        }
      }
      if (!Array.isArray(value)) throw propsInvalid(p.name, `${p.name} must be an array`);
      value = value.map((v) => coerce(inner, v));
      (value as unknown[]).forEach((v, i) => {
        checkScalar(p, inner, v, `${p.name}[${i}]`);
      });
    } else if (scalarTypes.has(p.type)) {
      value = coerce(p.type, value);
      checkScalar(p, p.type, value, p.name);
    } else {
      throw propsInvalid(p.name, `Prop ${p.name} has type ${p.type}, which cannot be configured`);
    }
    out[p.name] =
      p.secret && typeof value === "string"
        ? ({ $sealed: options.sealer.seal(value) } satisfies SealedValue)
        : value;
  }
  return out;
}

/** `configured_props` as the API returns them: timers and endpoints normalised, secrets masked. */
export function renderProps(
  meta: ComponentMeta,
  stored: Record<string, unknown>,
  endpointUrl: string | null,
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const p of sourceProps(meta, stored)) {
    if (p.type === "$.interface.http") {
      out[p.name] = { endpoint_url: endpointUrl };
      continue;
    }
    const value = stored[p.name];
    if (value === undefined) continue;
    if (p.type === "$.interface.timer") {
      const t = value as TimerConfig;
      out[p.name] = {
        cron: t.cron,
        interval_seconds: t.intervalSeconds,
        ...(t.timezone ? { timezone: t.timezone } : {}),
      };
    } else if (isSealed(value)) {
      out[p.name] = secretMask;
    } else if (p.type === "http_request") {
      out[p.name] = maskHttpRequest(value);
    } else {
      out[p.name] = value;
    }
  }
  return out;
}

/** Timer props of a source, with their configuration. */
export function timerProps(
  meta: ComponentMeta,
  stored: Record<string, unknown>,
): Array<{ name: string; config: TimerConfig }> {
  return meta.props
    .filter((p) => p.type === "$.interface.timer" && stored[p.name])
    .map((p) => ({ name: p.name, config: stored[p.name] as TimerConfig }));
}

/** Plain values for the component: secrets opened; app and interface props are filled in by the runner. */
export function runtimeValue(p: PropMeta, value: unknown, sealer: Sealer): unknown {
  if (p.type === "http_request") return openHttpRequest(value, sealer);
  return isSealed(value) ? sealer.open(value.$sealed) : value;
}
