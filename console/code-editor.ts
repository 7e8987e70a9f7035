/**
 * The component code editor: CodeMirror 6 with JavaScript/TypeScript highlighting, line numbers, undo,
 * bracket matching and build errors marked at their line (the lint gutter and an underline). Only the
 * "From code" form needs it, so `code-field.tsx` imports this module on first use and esbuild puts it,
 * with CodeMirror, in a chunk of its own: the first page stays small.
 *
 * Tab indents, as in any code editor; Escape then Tab (or Ctrl-M, which toggles it) moves focus on
 * instead, so the editor never traps a keyboard user. Colours are chosen for contrast on white (axe).
 */
import { defaultKeymap, history, historyKeymap, indentWithTab } from "@codemirror/commands";
import { javascript } from "@codemirror/lang-javascript";
import { bracketMatching, HighlightStyle, indentOnInput, syntaxHighlighting } from "@codemirror/language";
import { type Diagnostic, lintGutter, setDiagnostics } from "@codemirror/lint";
import { EditorState } from "@codemirror/state";
import { EditorView, keymap, lineNumbers } from "@codemirror/view";
import { tags } from "@lezer/highlight";

/** What the form does with the editor. */
export interface CodeEditor {
  /** Marks a build error at a 1-based line and column (the API's `details.line`/`column`). */
  markError(line: number, column: number | undefined, message: string): void;
  clearErrors(): void;
  setValue(text: string): void;
  focus(): void;
  destroy(): void;
}

export interface CodeEditorOptions {
  value: string;
  onChange: (value: string) => void;
  /** The ID of the visible label, and of the help text. */
  labelledBy: string;
  describedBy?: string;
  /** The page's style nonce: CodeMirror writes its styles into a `<style>` that the page's policy allows by it. */
  styleNonce?: string;
}

// The palette of the console's JSON tree (styles.css), each at least 4.5:1 on white.
const highlight = HighlightStyle.define([
  { tag: [tags.keyword, tags.operatorKeyword, tags.modifier], color: "#cf222e" },
  { tag: [tags.string, tags.special(tags.string), tags.regexp], color: "#0a3069" },
  { tag: [tags.number, tags.bool, tags.null, tags.atom], color: "#0550ae" },
  { tag: [tags.comment, tags.lineComment, tags.blockComment], color: "#57606a", fontStyle: "italic" },
  { tag: [tags.function(tags.variableName), tags.function(tags.propertyName)], color: "#6639ba" },
  { tag: [tags.definition(tags.propertyName), tags.propertyName], color: "#953800" },
  { tag: [tags.typeName, tags.className, tags.namespace], color: "#116329" },
  { tag: tags.invalid, color: "#b3261e" },
]);

const theme = EditorView.theme({
  "&": { border: "1px solid #8c959f", borderRadius: "6px", backgroundColor: "#fff", color: "#1b1f24" },
  "&.cm-focused": { outline: "3px solid #f0a500", outlineOffset: "2px" },
  ".cm-scroller": {
    fontFamily: "ui-monospace, SFMono-Regular, Menlo, monospace",
    fontSize: "0.9em",
    minHeight: "12em",
    maxHeight: "60vh",
  },
  ".cm-gutters": { backgroundColor: "#f6f8fa", color: "#57606a", borderRight: "1px solid #d0d7de" },
  ".cm-content": { caretColor: "#1b1f24" },
});

export function createCodeEditor(parent: HTMLElement, options: CodeEditorOptions): CodeEditor {
  const view = new EditorView({
    parent,
    state: EditorState.create({
      doc: options.value,
      extensions: [
        lineNumbers(),
        lintGutter(),
        history(),
        indentOnInput(),
        bracketMatching(),
        javascript({ typescript: true }),
        syntaxHighlighting(highlight),
        keymap.of([...defaultKeymap, ...historyKeymap, indentWithTab]),
        theme,
        EditorView.lineWrapping,
        ...(options.styleNonce ? [EditorView.cspNonce.of(options.styleNonce)] : []),
        EditorView.contentAttributes.of({
          "aria-labelledby": options.labelledBy,
          ...(options.describedBy ? { "aria-describedby": options.describedBy } : {}),
        }),
        EditorView.updateListener.of((update) => {
          if (update.docChanged) options.onChange(update.state.doc.toString());
        }),
      ],
    }),
  });
  return {
    markError(line, column, message) {
      const doc = view.state.doc;
      const at = doc.line(Math.min(Math.max(1, line), doc.lines));
      const from = Math.min(at.from + Math.max(0, (column ?? 1) - 1), at.to);
      // The rest of the line from the column, or the whole line when the column is at its end.
      const diagnostic: Diagnostic = {
        from: from < at.to ? from : at.from,
        to: at.to,
        severity: "error",
        message,
      };
      view.dispatch(setDiagnostics(view.state, [diagnostic]));
      view.dispatch({ effects: EditorView.scrollIntoView(diagnostic.from, { y: "center" }) });
    },
    clearErrors() {
      view.dispatch(setDiagnostics(view.state, []));
    },
    setValue(text) {
      if (text === view.state.doc.toString()) return;
      view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: text } });
    },
    focus() {
      view.focus();
    },
    destroy() {
      view.destroy();
    },
  };
}
