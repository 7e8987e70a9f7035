/**
 * With traces off no OpenTelemetry module is loaded: only src/tracing-sdk.ts imports their code (the
 * rest imports types, which Node strips), and tracing-sdk.ts is itself imported only dynamically
 * (main.ts, when traces are wanted) or for its types.
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { tracesWanted } from "../../src/tracing.ts";

const src = path.join(import.meta.dirname, "../../src");
const files = readdirSync(src, { recursive: true, encoding: "utf8" })
  .filter((f) => f.endsWith(".ts"))
  .map((f) => f.split(path.sep).join("/"));

/** Static import and export declarations: whether type-only, and what they import. */
function imports(text: string): { typeOnly: boolean; names: string; from: string }[] {
  const found = [];
  for (const m of text.matchAll(/^(?:import|export)\s+(type\s+)?([^;]*?)\s*from\s+"([^"]+)"/gms)) {
    const names = m[2]!;
    // `import { type A, type B } from` is type-only too.
    const inner = /^\{([\s\S]*)\}$/.exec(names.trim())?.[1];
    const allTypes =
      inner
        ?.split(",")
        .map((n) => n.trim())
        .filter(Boolean)
        .every((n) => n.startsWith("type ")) ?? false;
    found.push({ typeOnly: m[1] !== undefined || allTypes, names, from: m[3]! });
  }
  return found;
}

test("only src/tracing-sdk.ts imports OpenTelemetry's code, and only main.ts loads it, dynamically", () => {
  for (const file of files) {
    const text = readFileSync(path.join(src, file), "utf8");
    for (const i of imports(text)) {
      if (i.from.startsWith("@opentelemetry/") && file !== "tracing-sdk.ts")
        assert.ok(i.typeOnly, `${file} imports ${i.from} for more than its types: ${i.names}`);
      if (i.from.endsWith("/tracing-sdk.ts") || i.from === "./tracing-sdk.ts")
        assert.ok(i.typeOnly, `${file} imports tracing-sdk.ts statically: ${i.names}`);
    }
    if (/import\("\.\/tracing-sdk\.ts"\)/.test(text)) assert.equal(file, "main.ts");
  }
});

test("traces are wanted only with an OTLP endpoint, and not when the SDK or its exporter is turned off", () => {
  assert.equal(tracesWanted({}), false);
  assert.equal(tracesWanted({ OTEL_EXPORTER_OTLP_ENDPOINT: "" }), false);
  assert.equal(tracesWanted({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:4318" }), true);
  assert.equal(tracesWanted({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "http://c:4318/v1/traces" }), true);
  assert.equal(
    tracesWanted({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:4318", OTEL_SDK_DISABLED: "TRUE" }),
    false,
  );
  assert.equal(
    tracesWanted({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:4318", OTEL_TRACES_EXPORTER: "none" }),
    false,
  );
});
