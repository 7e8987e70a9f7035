/**
 * Small shared pieces: page titles, error notes, copy buttons, a loader hook, a JSON tree, tables and
 * descriptions in Markdown.
 */
import type { ComponentChildren } from "preact";
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { useHeadingFocus } from "./focus.ts";
import { type Inline, parseMarkdown } from "./markdown.ts";

/** The page's heading and the document's title; it takes focus after a route change (focus.ts). */
export function Title({ children, text }: { children?: ComponentChildren; text: string }) {
  const ref = useRef<HTMLHeadingElement>(null);
  useEffect(() => {
    document.title = `${text} · Fount`;
  }, [text]);
  useHeadingFocus(ref);
  return (
    <h1 tabIndex={-1} class="title" ref={ref} data-page-heading>
      {children ?? text}
    </h1>
  );
}

/**
 * A description in Markdown (markdown.ts), rendered as elements whose children are text only: nothing
 * the component wrote becomes markup. Links open in a new tab, so that a half-filled form stays.
 */
export function Markdown({ text, id, class: className }: { text: string; id?: string; class?: string }) {
  return (
    <div id={id} class={className ? `markdown ${className}` : "markdown"}>
      {parseMarkdown(text).map((block, i) =>
        block.kind === "paragraph" ? (
          <p key={String(i)}>{inline(block.children)}</p>
        ) : (
          <ul key={String(i)}>
            {block.items.map((item, j) => (
              <li key={String(j)}>{inline(item)}</li>
            ))}
          </ul>
        ),
      )}
    </div>
  );
}

function inline(nodes: Inline[]): ComponentChildren {
  return nodes.map((n, i) => {
    const key = String(i);
    if (n.kind === "text") return n.text;
    if (n.kind === "code") return <code key={key}>{n.text}</code>;
    if (n.kind === "em" || n.kind === "strong") {
      const Tag = n.kind;
      return <Tag key={key}>{inline(n.children)}</Tag>;
    }
    return (
      <a key={key} href={n.href} target="_blank" rel="noopener noreferrer nofollow">
        {inline(n.children)}
        <span class="visually-hidden"> (opens in a new tab)</span>
      </a>
    );
  });
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

/** What the console's text fields set on their input besides its value. */
interface InputAttributes {
  type?: "url" | "email" | "datetime-local";
  required?: boolean;
  placeholder?: string;
  autoComplete?: string;
}

/** A labelled text input: the label's `for` and the input's `id` always agree. */
export function TextField({
  id,
  label,
  value,
  onValue,
  type,
  ...attributes
}: { id: string; label: string; value: string; onValue: (value: string) => void } & InputAttributes) {
  const onInput = (e: { currentTarget: HTMLInputElement }) => onValue(e.currentTarget.value);
  // Preact types an input's attributes per `type`, so each kind is written out.
  const input =
    type === "url" ? (
      <input id={id} type="url" value={value} onInput={onInput} {...attributes} />
    ) : type === "email" ? (
      <input id={id} type="email" value={value} onInput={onInput} {...attributes} />
    ) : type === "datetime-local" ? (
      <input id={id} type="datetime-local" value={value} onInput={onInput} {...attributes} />
    ) : (
      <input id={id} value={value} onInput={onInput} {...attributes} />
    );
  return (
    <div class="field">
      <label for={id}>{label}</label>
      {input}
    </div>
  );
}

/** A labelled, required choice of one of `options` (value, text), with an empty first option saying `prompt`. */
export function SelectField({
  id,
  label,
  prompt,
  options,
  value,
  onValue,
}: {
  id: string;
  label: string;
  prompt: string;
  options: Array<[value: string, text: string]>;
  value: string;
  onValue: (value: string) => void;
}) {
  return (
    <div class="field">
      <label for={id}>{label}</label>
      <select id={id} required value={value} onChange={(e) => onValue(e.currentTarget.value)}>
        <option value="">{prompt}</option>
        {options.map(([v, text]) => (
          <option key={v} value={v}>
            {text}
          </option>
        ))}
      </select>
    </div>
  );
}

export interface Column<T> {
  label: string;
  cell: (row: T) => ComponentChildren;
  /** A class for the column's cells ("wrap" for long values such as URLs). */
  class?: string;
}

/**
 * A captioned table of rows: the first column heads its row, and `actions` (buttons for one row) fill a
 * last column whose header only screen readers hear. An empty list shows `empty` instead, if given.
 */
export function DataTable<T>({
  caption,
  columns,
  rows,
  rowKey,
  actions,
  empty,
}: {
  caption: string;
  columns: Column<T>[];
  rows: T[];
  rowKey: (row: T) => string;
  actions?: (row: T) => ComponentChildren;
  empty?: string;
}) {
  if (rows.length === 0) return empty ? <p>{empty}</p> : null;
  const [head, ...rest] = columns;
  return (
    <div class="scroll">
      <table>
        <caption>{caption}</caption>
        <thead>
          <tr>
            {columns.map((c) => (
              <th scope="col" key={c.label}>
                {c.label}
              </th>
            ))}
            {actions && (
              <th scope="col">
                <span class="visually-hidden">Actions</span>
              </th>
            )}
          </tr>
        </thead>
        <tbody>
          {rows.map((row) => (
            <tr key={rowKey(row)}>
              {head && <th scope="row">{head.cell(row)}</th>}
              {rest.map((c) => (
                <td key={c.label} class={c.class}>
                  {c.cell(row)}
                </td>
              ))}
              {actions && <td>{actions(row)}</td>}
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

/** A row's delete (or revoke) button, named for what it removes. */
export function DangerButton({ label, what, onClick }: { label: string; what: string; onClick: () => void }) {
  return (
    <button type="button" class="danger" aria-label={`${label} ${what}`} onClick={onClick}>
      {label}
    </button>
  );
}
