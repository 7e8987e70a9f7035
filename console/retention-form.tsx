/**
 * A source's retention (issue 28): how many events each channel keeps and for how many days, or the
 * server's defaults. Saved on its own (`PUT /v1/sources/{id}` with `retention` only), so that changing it
 * never re-runs the source's hooks as a props change does.
 */
import { useState } from "preact/hooks";
import { ApiError, api } from "./api.ts";
import { ErrorNote } from "./ui.tsx";

/** `retention` as the API renders it; null: the server's defaults. */
export type Retention = { events?: number; days?: number } | null;

const fields = [
  [
    "events",
    "Events kept per channel",
    "The newest ones; leave empty for the server's default (100 unless changed).",
  ],
  [
    "days",
    "Days kept",
    "Older events are deleted; leave empty for the server's default (no age limit unless changed).",
  ],
] as const;

export function RetentionForm({
  sourceId,
  retention,
  onSaved,
}: {
  sourceId: string;
  retention: Retention;
  onSaved: () => void;
}) {
  const [text, setText] = useState({
    events: retention?.events?.toString() ?? "",
    days: retention?.days?.toString() ?? "",
  });
  const [error, setError] = useState<unknown>();
  const [saved, setSaved] = useState("");
  async function put(value: Retention, what: string) {
    setError(undefined);
    setSaved("");
    try {
      await api("PUT", `/v1/sources/${sourceId}`, { retention: value });
      setSaved(what);
      onSaved();
    } catch (err) {
      setError(err);
    }
  }
  function save(e: Event) {
    e.preventDefault();
    const policy: { events?: number; days?: number } = {};
    for (const [key] of fields) {
      const raw = text[key].trim();
      if (raw === "") continue;
      const n = Number(raw);
      if (!Number.isInteger(n) || n < 1) {
        setSaved("");
        setError(
          new ApiError(400, "invalid_parameter", "Give a whole number of at least 1", `retention.${key}`),
        );
        return;
      }
      policy[key] = n;
    }
    void put(Object.keys(policy).length > 0 ? policy : null, "Retention saved.");
  }
  const field = error instanceof ApiError ? error.field : undefined;
  return (
    <form onSubmit={save} class="form" noValidate aria-labelledby="retention-heading">
      <h2 id="retention-heading">Retention</h2>
      {fields.map(([key, label, help]) => {
        const id = `retention-${key}`;
        const invalid = field === `retention.${key}`;
        return (
          <div class="field" key={key}>
            <label for={id}>{label}</label>
            <input
              id={id}
              inputMode="numeric"
              value={text[key]}
              onInput={(e) => setText({ ...text, [key]: e.currentTarget.value })}
              aria-invalid={invalid ? true : undefined}
              aria-describedby={`${id}-help${invalid ? ` ${id}-error` : ""}`}
            />
            <p class="help" id={`${id}-help`}>
              {help}
            </p>
            {invalid && (
              <p class="error" id={`${id}-error`} role="alert">
                {(error as Error).message}
              </p>
            )}
          </div>
        );
      })}
      {!field && <ErrorNote error={error} />}
      <div class="actions">
        <button type="submit">Save retention</button>
        <button
          type="button"
          class="secondary"
          onClick={() => {
            setText({ events: "", days: "" });
            void put(null, "Back to the server's defaults.");
          }}
        >
          Use the server's defaults
        </button>
      </div>
      <p aria-live="polite">{saved}</p>
    </form>
  );
}
