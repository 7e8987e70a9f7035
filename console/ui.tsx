/** Small shared pieces: page titles, error notes, copy buttons, a loader hook and a JSON tree. */
import type { ComponentChildren } from "preact";
import { useCallback, useEffect, useState } from "preact/hooks";

export function Title({ children, text }: { children?: ComponentChildren; text: string }) {
  useEffect(() => {
    document.title = `${text} · Fount`;
  }, [text]);
  return (
    <h1 tabIndex={-1} class="title">
      {children ?? text}
    </h1>
  );
}

export function ErrorNote({ error }: { error: unknown }) {
  if (!error) return null;
  return (
    <p role="alert" class="error">
      {error instanceof Error ? error.message : String(error)}
    </p>
  );
}

/** Loads once (and again on `reload()`); keeps the last good value while reloading. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[]) {
  const [value, setValue] = useState<T | undefined>(undefined);
  const [error, setError] = useState<unknown>(undefined);
  const [n, setN] = useState(0);
  useEffect(() => {
    let live = true;
    load().then(
      (v) => {
        if (!live) return;
        setValue(v);
        setError(undefined);
      },
      (e) => {
        if (live) setError(e);
      },
    );
    return () => {
      live = false;
    };
  }, [...deps, n]);
  const reload = useCallback(() => setN((x) => x + 1), []);
  return { value, error, reload };
}

export function CopyButton({ text, label }: { text: string; label: string }) {
  const [done, setDone] = useState(false);
  return (
    <button
      type="button"
      onClick={() =>
        navigator.clipboard?.writeText(text).then(
          () => setDone(true),
          () => setDone(false),
        )
      }
    >
      {done ? "Copied" : label}
    </button>
  );
}

/** A collapsible tree of a JSON value, built from <details> so that it works by keyboard and reader. */
export function JsonTree({ value, name, open = true }: { value: unknown; name?: string; open?: boolean }) {
  const label = name === undefined ? null : <span class="k">{name}: </span>;
  if (value !== null && typeof value === "object") {
    const entries = Array.isArray(value)
      ? value.map((v, i) => [String(i), v] as const)
      : Object.entries(value as Record<string, unknown>);
    const brackets = Array.isArray(value) ? `[${entries.length}]` : `{${entries.length}}`;
    return (
      <details open={open} class="node">
        <summary>
          {label}
          <span class="muted">{brackets}</span>
        </summary>
        <ul class="tree">
          {entries.map(([k, v]) => (
            <li key={k}>
              <JsonTree value={v} name={k} open={false} />
            </li>
          ))}
        </ul>
      </details>
    );
  }
  return (
    <span class="leaf">
      {label}
      <span class={`v ${value === null ? "null" : typeof value}`}>{JSON.stringify(value)}</span>
    </span>
  );
}
