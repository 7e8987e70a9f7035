/**
 * A form generated from a component's `configurable_props`: one field per prop type, timers as an
 * interval or cron with a preview of the next ticks, app props choosing an account, remote options
 * fetched from the options endpoint. Values are kept as the API takes them (`configured_props`).
 */
import type { JSX } from "preact";
import { useEffect, useState } from "preact/hooks";
import { api, withOrg } from "./api.ts";
import { Markdown } from "./ui.tsx";

/** One entry of `configurable_props`. */
export interface PropSpec {
  name: string;
  type: string;
  label?: string;
  description?: string;
  optional?: boolean;
  default?: unknown;
  app?: string;
  secret?: boolean;
  min?: number;
  max?: number;
  options?: Array<string | number | { label: string; value: unknown }>;
  remoteOptions?: boolean;
  propDefinition?: [string, string];
}

export type Values = Record<string, unknown>;

/** Props with no field of their own (the platform fills them in), and what to call them without a label. */
const platformTypes = new Map([
  ["$.interface.http", "HTTP endpoint"],
  ["$.service.db", "Key-value store"],
  ["$.interface.apphook", "App events"],
]);

/** A prop's name for people: its `label` as the component gives it, else its kind (platform props), else its name. */
export function propLabel(p: PropSpec): string {
  return p.label ?? platformTypes.get(p.type) ?? (p.type === "$.interface.timer" ? "Timer" : p.name);
}

export function initialValues(props: PropSpec[]): Values {
  const out: Values = {};
  for (const p of props) if (p.default !== undefined) out[p.name] = p.default;
  return out;
}

interface FormProps {
  props: PropSpec[];
  values: Values;
  onChange: (values: Values) => void;
  /** The prop the server's last error names, and that error. */
  fieldError?: { field: string; message: string } | undefined;
  /** For remote options: the component's key or ID. */
  componentRef: string | undefined;
  orgId: string | undefined;
}

export function PropsForm({ props, values, onChange, fieldError, componentRef, orgId }: FormProps) {
  const set = (name: string, value: unknown) => {
    const next = { ...values };
    if (value === undefined) delete next[name];
    else next[name] = value;
    onChange(next);
  };
  return (
    <>
      {props.map((p) => {
        const id = `prop-${p.name}`;
        const error = fieldError?.field === p.name ? fieldError.message : undefined;
        const errorId = `${id}-error`;
        const described = [p.description ? `${id}-help` : "", error ? errorId : ""].filter(Boolean).join(" ");
        const common = {
          id,
          "aria-invalid": error ? true : undefined,
          "aria-describedby": described || undefined,
        };
        const label = `${propLabel(p)}${p.optional ? " (optional)" : ""}`;
        if (platformTypes.has(p.type)) {
          return (
            <div class="field" key={p.name}>
              <span class="label">{propLabel(p)}</span>
              {p.description && <Markdown class="help" text={p.description} />}
              <p class="help">
                {p.type === "$.interface.http"
                  ? "The source gets its own endpoint URL when deployed."
                  : "Provided by Fount."}
              </p>
            </div>
          );
        }
        let input: JSX.Element;
        if (p.type === "$.interface.timer") {
          input = (
            <TimerField id={id} value={values[p.name]} onChange={(v) => set(p.name, v)} label={label} />
          );
          return (
            <fieldset class="field" key={p.name} aria-describedby={described || undefined}>
              <legend>{label}</legend>
              {input}
              <Help p={p} id={id} error={error} />
            </fieldset>
          );
        }
        if (p.type === "app") {
          input = (
            <AppField
              {...common}
              app={p.app ?? ""}
              orgId={orgId}
              value={values[p.name]}
              onChange={(v) => set(p.name, v)}
            />
          );
        } else if (p.type === "boolean") {
          return (
            <div class="field check" key={p.name}>
              <input
                {...common}
                type="checkbox"
                checked={values[p.name] === true}
                onChange={(e) => set(p.name, e.currentTarget.checked)}
              />
              <label for={id}>{label}</label>
              <Help p={p} id={id} error={error} />
            </div>
          );
        } else if (p.options || p.remoteOptions) {
          input = (
            <OptionsField
              {...common}
              spec={p}
              values={values}
              componentRef={componentRef}
              orgId={orgId}
              onChange={(v) => set(p.name, v)}
            />
          );
        } else if (p.type.endsWith("[]")) {
          const list = Array.isArray(values[p.name]) ? (values[p.name] as unknown[]) : [];
          input = (
            <textarea
              {...common}
              rows={3}
              value={list.join("\n")}
              onInput={(e) => {
                const lines = e.currentTarget.value.split("\n").filter((l) => l !== "");
                set(p.name, lines.length ? lines : undefined);
              }}
            />
          );
        } else if (p.type === "integer") {
          input = (
            <input
              {...common}
              type="number"
              min={p.min}
              max={p.max}
              step={1}
              value={values[p.name] === undefined ? "" : String(values[p.name])}
              onInput={(e) => {
                const v = e.currentTarget.value;
                set(p.name, v === "" ? undefined : Number(v));
              }}
            />
          );
        } else if (p.type === "object" || p.type === "any") {
          input = (
            <textarea
              {...common}
              rows={4}
              class="code"
              value={
                typeof values[p.name] === "string"
                  ? (values[p.name] as string)
                  : JSON.stringify(values[p.name] ?? "", null, 2)
              }
              onInput={(e) => {
                const text = e.currentTarget.value;
                try {
                  set(p.name, text.trim() === "" ? undefined : JSON.parse(text));
                } catch {
                  set(p.name, text);
                }
              }}
            />
          );
        } else {
          const text = values[p.name] === undefined ? "" : String(values[p.name]);
          const onInput = (e: { currentTarget: HTMLInputElement }) =>
            set(p.name, e.currentTarget.value === "" ? undefined : e.currentTarget.value);
          input = p.secret ? (
            <input {...common} type="password" autoComplete="off" value={text} onInput={onInput} />
          ) : (
            <input {...common} type="text" autoComplete="off" value={text} onInput={onInput} />
          );
        }
        return (
          <div class="field" key={p.name}>
            <label for={id}>{label}</label>
            {input}
            <Help p={p} id={id} error={error} />
          </div>
        );
      })}
    </>
  );
}

function Help({ p, id, error }: { p: PropSpec; id: string; error: string | undefined }) {
  return (
    <>
      {p.description && <Markdown class="help" id={`${id}-help`} text={p.description} />}
      {error && (
        <p class="error" id={`${id}-error`} role="alert">
          {error}
        </p>
      )}
    </>
  );
}

type Timer = { intervalSeconds?: number; cron?: string; timezone?: string };

type CronModule = typeof import("croner");
let croner: Promise<CronModule> | undefined;

/** The next `n` ticks of a timer, as ISO times, or an error message for a bad cron. */
export function nextTicks(
  timer: Timer,
  n: number,
  cron: CronModule | undefined,
  from = new Date(),
): string[] | string {
  if (timer.cron) {
    if (!cron) return "…";
    try {
      const job = new cron.Cron(timer.cron, { timezone: timer.timezone || undefined, paused: true });
      return job.nextRuns(n, from).map((d) => d.toISOString());
    } catch (err) {
      return (err as Error).message;
    }
  }
  if (timer.intervalSeconds && timer.intervalSeconds > 0) {
    return Array.from({ length: n }, (_, i) =>
      new Date(from.getTime() + (i + 1) * timer.intervalSeconds! * 1000).toISOString(),
    );
  }
  return "Give an interval or a cron expression.";
}

/** The cron parser, loaded the first time a cron timer is shown (a third of the bundle, and only timer forms need it). */
function useCron(needed: boolean): CronModule | undefined {
  const [module, setModule] = useState<CronModule>();
  useEffect(() => {
    if (!needed || module) return;
    croner ??= import("croner");
    croner.then(setModule);
  }, [needed, module]);
  return module;
}

function TimerField({
  id,
  value,
  onChange,
}: {
  id: string;
  value: unknown;
  label: string;
  onChange: (v: Timer | undefined) => void;
}) {
  const timer = (value && typeof value === "object" ? value : {}) as Timer;
  const mode = timer.cron !== undefined ? "cron" : "interval";
  const cron = useCron(mode === "cron");
  const ticks = nextTicks(timer, 3, cron);
  return (
    <>
      <div class="radios" role="radiogroup" aria-label="Timer kind">
        <label>
          <input
            type="radio"
            name={`${id}-mode`}
            checked={mode === "interval"}
            onChange={() => onChange({ intervalSeconds: timer.intervalSeconds ?? 900 })}
          />{" "}
          Interval
        </label>
        <label>
          <input
            type="radio"
            name={`${id}-mode`}
            checked={mode === "cron"}
            onChange={() => onChange({ cron: "0 * * * *" })}
          />{" "}
          Cron
        </label>
      </div>
      {mode === "interval" ? (
        <>
          <label for={`${id}-interval`}>Interval in seconds</label>
          <input
            id={`${id}-interval`}
            type="number"
            min={1}
            value={timer.intervalSeconds ?? ""}
            onInput={(e) => onChange({ intervalSeconds: Number(e.currentTarget.value) })}
          />
        </>
      ) : (
        <>
          <label for={`${id}-cron`}>Cron expression</label>
          <input
            id={`${id}-cron`}
            value={timer.cron ?? ""}
            onInput={(e) => onChange({ ...timer, cron: e.currentTarget.value })}
          />
          <label for={`${id}-tz`}>Time zone (optional)</label>
          <input
            id={`${id}-tz`}
            value={timer.timezone ?? ""}
            placeholder="UTC"
            onInput={(e) => onChange({ ...timer, timezone: e.currentTarget.value || undefined })}
          />
        </>
      )}
      <div class="help" aria-live="polite">
        {typeof ticks === "string" ? (
          ticks
        ) : (
          <>
            Next ticks: <span>{ticks.map((t) => t.replace("T", " ").slice(0, 19)).join(", ")}</span> (UTC)
          </>
        )}
      </div>
    </>
  );
}

function AppField({
  app,
  orgId,
  value,
  onChange,
  ...rest
}: {
  id: string;
  app: string;
  orgId: string | undefined;
  value: unknown;
  onChange: (v: unknown) => void;
}) {
  const [accounts, setAccounts] = useState<Array<{ id: string; name: string; app: { name_slug: string } }>>();
  if (accounts === undefined) {
    api<{ data: Array<{ id: string; name: string; app: { name_slug: string } }> }>(
      "GET",
      withOrg("/v1/accounts?limit=100", orgId),
    ).then(
      (r) => setAccounts(r.data.filter((a) => !app || a.app.name_slug === app)),
      () => setAccounts([]),
    );
  }
  const current = (value as { authProvisionId?: string } | undefined)?.authProvisionId ?? "";
  return (
    <select
      {...rest}
      value={current}
      onChange={(e) =>
        onChange(e.currentTarget.value ? { authProvisionId: e.currentTarget.value } : undefined)
      }
    >
      <option value="">
        {accounts?.length === 0 ? `No ${app} accounts (add one under Accounts)` : "Choose an account"}
      </option>
      {(accounts ?? []).map((a) => (
        <option key={a.id} value={a.id}>
          {a.name}
        </option>
      ))}
    </select>
  );
}

function OptionsField({
  spec,
  values,
  componentRef,
  orgId,
  onChange,
  ...rest
}: {
  id: string;
  spec: PropSpec;
  values: Values;
  componentRef: string | undefined;
  orgId: string | undefined;
  onChange: (v: unknown) => void;
}) {
  const [remote, setRemote] = useState<Array<{ label: string; value: unknown }>>();
  const [error, setError] = useState<string>();
  const normal = (o: string | number | { label: string; value: unknown }) =>
    typeof o === "object" ? o : { label: String(o), value: o };
  const options = spec.options ? spec.options.map(normal) : (remote ?? []);
  async function load() {
    if (!componentRef) return;
    setError(undefined);
    try {
      const r = await api<{ data: { options: Array<string | number | { label: string; value: unknown }> } }>(
        "POST",
        withOrg(
          `/v1/components/${encodeURIComponent(componentRef)}/props/${encodeURIComponent(spec.name)}/options`,
          orgId,
        ),
        { configured_props: values },
      );
      setRemote(r.data.options.map(normal));
    } catch (err) {
      setError((err as Error).message);
    }
  }
  const index = options.findIndex((o) => JSON.stringify(o.value) === JSON.stringify(values[spec.name]));
  return (
    <>
      <select
        {...rest}
        value={index < 0 ? "" : String(index)}
        onChange={(e) => {
          const i = e.currentTarget.value;
          onChange(i === "" ? undefined : options[Number(i)]?.value);
        }}
      >
        <option value="">Choose…</option>
        {options.map((o, i) => (
          <option key={String(i)} value={String(i)}>
            {o.label}
          </option>
        ))}
      </select>
      {spec.remoteOptions && (
        <button type="button" onClick={load}>
          Load options for {propLabel(spec)}
        </button>
      )}
      {error && <p class="error">{error}</p>}
    </>
  );
}
