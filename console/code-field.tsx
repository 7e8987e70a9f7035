/**
 * A labelled code field: a plain textarea until the editor chunk (code-editor.ts, CodeMirror) has
 * loaded, then the editor, which takes over the text and, if the textarea had it, focus. A build error
 * with a position (`line`, `column`, from a 422's details) is marked at its line. A file can be read
 * into it. Once the editor is there it owns the text and reports changes: the `value` it was given is
 * not pushed back into it, since a render may carry a value older than the keys typed since.
 */
import { useEffect, useRef, useState } from "preact/hooks";
import type { CodeEditor } from "./code-editor.ts";

type EditorModule = typeof import("./code-editor.ts");
let editorModule: Promise<EditorModule> | undefined;

/** A build error at a place in the code. */
export interface CodeError {
  line: number;
  column: number | undefined;
  message: string;
}

function styleNonce(): string | undefined {
  return document.querySelector<HTMLMetaElement>('meta[name="fount-style-nonce"]')?.content || undefined;
}

export function CodeField({
  id,
  label,
  value,
  onValue,
  error,
  upload,
}: {
  id: string;
  label: string;
  value: string;
  onValue: (value: string) => void;
  error: CodeError | undefined;
  /** A file input that reads a file into the field: its label and accepted types. */
  upload?: { label: string; accept: string };
}) {
  const host = useRef<HTMLDivElement>(null);
  const textarea = useRef<HTMLTextAreaElement>(null);
  const editor = useRef<CodeEditor | undefined>(undefined);
  const [ready, setReady] = useState(false);
  const [failed, setFailed] = useState(false);
  // The latest value and handler, for the editor's change listener, which is made once.
  const latest = useRef({ value, onValue });
  latest.current = { value, onValue };

  useEffect(() => {
    let live = true;
    editorModule ??= import("./code-editor.ts");
    editorModule.then(
      (m) => {
        if (!live || !host.current) return;
        const hadFocus = document.activeElement === textarea.current;
        editor.current = m.createCodeEditor(host.current, {
          value: latest.current.value,
          onChange: (text) => latest.current.onValue(text),
          labelledBy: `${id}-label`,
          describedBy: `${id}-help`,
          styleNonce: styleNonce(),
        });
        setReady(true);
        if (hadFocus) editor.current.focus();
      },
      () => {
        // Without the chunk (an old page after an upgrade), the textarea stays and does the job.
        editorModule = undefined;
        if (live) setFailed(true);
      },
    );
    return () => {
      live = false;
      editor.current?.destroy();
      editor.current = undefined;
    };
  }, [id]);

  async function readFile(file: File | undefined) {
    if (!file) return;
    const text = await file.text();
    if (editor.current) editor.current.setValue(text);
    else onValue(text);
  }

  useEffect(() => {
    if (!editor.current) return;
    if (error) editor.current.markError(error.line, error.column, error.message);
    else editor.current.clearErrors();
  }, [error, ready]);

  return (
    <div class="field code-field">
      {ready ? (
        // The editor's content is named by this (aria-labelledby): a contenteditable has no <label for>.
        <span class="label" id={`${id}-label`}>
          {label}
        </span>
      ) : (
        <label id={`${id}-label`} for={id}>
          {label}
        </label>
      )}
      <p class="help" id={`${id}-help`}>
        {ready
          ? "JavaScript or TypeScript. Tab indents; press Escape, then Tab, to move on."
          : failed
            ? "JavaScript or TypeScript."
            : "JavaScript or TypeScript (loading the editor…)."}
      </p>
      {!ready && (
        <textarea
          id={id}
          ref={textarea}
          class="code"
          rows={10}
          value={value}
          aria-describedby={`${id}-help`}
          onInput={(e) => onValue(e.currentTarget.value)}
        />
      )}
      <div ref={host} class="code-editor" hidden={!ready} />
      {upload && (
        <>
          <label for={`${id}-file`}>{upload.label}</label>
          <input
            id={`${id}-file`}
            type="file"
            accept={upload.accept}
            onChange={(e) => readFile(e.currentTarget.files?.[0])}
          />
        </>
      )}
    </div>
  );
}
