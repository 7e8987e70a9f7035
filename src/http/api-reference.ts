/**
 * The API reference page (`/docs`), rendered on the server from the app's own OpenAPI document: plain,
 * semantic HTML and one stylesheet, no script. Swagger UI, Redoc, RapiDoc and Scalar were measured for it
 * (docs/api-reference.md): each was 0.9 to 4.5 MB, needed inline styles or fonts from a CDN, and had
 * serious or critical accessibility findings; this page is a few tens of KB compressed, works under a
 * policy that allows no script at all, and leaves trying requests to curl and the CLI.
 */

/** The parts of an OpenAPI 3.1 document the page reads. */
export interface OpenApiDocument {
  info: { title: string; version: string; description?: string };
  servers?: Array<{ url: string }>;
  paths: Record<string, Record<string, Operation | undefined>>;
}

interface Operation {
  operationId?: string;
  summary?: string;
  description?: string;
  tags?: string[];
  security?: unknown[];
  parameters?: Array<{ name: string; in: string; required?: boolean; description?: string; schema?: Schema }>;
  requestBody?: { content?: Record<string, { schema?: Schema }> };
  responses?: Record<string, { description?: string; content?: Record<string, { schema?: Schema }> }>;
}

interface Schema {
  type?: string | string[];
  description?: string;
  properties?: Record<string, Schema>;
  required?: string[];
  additionalProperties?: boolean | Schema;
  items?: Schema;
  anyOf?: Schema[];
  oneOf?: Schema[];
  enum?: unknown[];
  const?: unknown;
  pattern?: string;
  format?: string;
  default?: unknown;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  maxItems?: number;
}

const methods = ["get", "post", "put", "patch", "delete"] as const;

/** Text safe in HTML content and in double-quoted attributes. */
function esc(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

/** Description text: escaped, with Markdown's `code` spans kept as code (the only markup the routes use). */
function prose(text: string): string {
  return esc(text).replace(/`([^`]+)`/g, "<code>$1</code>");
}

/** A short label of a schema's type: `string`, `integer | null`, `array of object`, `"event"`. */
function typeLabel(schema: Schema): string {
  const alternatives = schema.anyOf ?? schema.oneOf;
  if (alternatives) return [...new Set(alternatives.map(typeLabel))].join(" | ");
  if (schema.const !== undefined) return JSON.stringify(schema.const);
  const types = Array.isArray(schema.type) ? schema.type : schema.type ? [schema.type] : [];
  return (
    types
      .map((t) => (t === "array" && schema.items ? `array of ${typeLabel(schema.items)}` : t))
      .join(" | ") || "any"
  );
}

/** The constraints worth knowing when writing a request: allowed values, bounds, pattern, default. */
function constraints(schema: Schema): string[] {
  const alternatives = schema.anyOf ?? schema.oneOf;
  if (alternatives) return alternatives.flatMap(constraints);
  const out: string[] = [];
  if (schema.enum) out.push(`one of ${schema.enum.map((v) => `<code>${esc(String(v))}</code>`).join(", ")}`);
  if (schema.format) out.push(`format ${esc(schema.format)}`);
  if (schema.minimum !== undefined) out.push(`≥ ${schema.minimum}`);
  if (schema.maximum !== undefined) out.push(`≤ ${schema.maximum}`);
  if (schema.minLength !== undefined && schema.minLength > 1)
    out.push(`at least ${schema.minLength} characters`);
  if (schema.maxLength !== undefined) out.push(`at most ${schema.maxLength} characters`);
  if (schema.maxItems !== undefined) out.push(`at most ${schema.maxItems} items`);
  if (schema.pattern) out.push(`pattern <code>${esc(schema.pattern)}</code>`);
  if (schema.default !== undefined) out.push(`default <code>${esc(JSON.stringify(schema.default))}</code>`);
  return out;
}

/** The object a schema describes fields of, through an array or a nullable union. */
function fieldsOf(schema: Schema): Schema | undefined {
  if (schema.properties && Object.keys(schema.properties).length > 0) return schema;
  if (schema.items) return fieldsOf(schema.items);
  for (const alternative of schema.anyOf ?? schema.oneOf ?? []) {
    const found = fieldsOf(alternative);
    if (found) return found;
  }
  return undefined;
}

/** What is sent (parameters, request bodies: required or not, constraints) or received (the fields alone). */
type Direction = "sent" | "received";

/** One field (a parameter or a property): name, type, what a request must respect, description, its own fields. */
function field(
  name: string,
  schema: Schema,
  direction: Direction,
  required: boolean,
  where?: string,
  description?: string,
): string {
  const facts = [
    `<span class="type">${esc(typeLabel(schema))}</span>`,
    ...(where ? [`in ${esc(where)}`] : []),
    ...(direction === "sent"
      ? [required ? "<strong>required</strong>" : "optional", ...constraints(schema)]
      : []),
  ];
  const text = description ?? schema.description;
  const nested = fieldsOf(schema);
  return `<li><code class="name">${esc(name)}</code> <span class="facts">${facts.join(", ")}</span>${
    text ? `<br>${prose(text)}` : ""
  }${nested ? fields(nested, direction) : ""}</li>`;
}

function fields(schema: Schema, direction: Direction): string {
  const required = new Set(schema.required ?? []);
  const items = Object.entries(schema.properties ?? {}).map(([name, s]) =>
    field(name, s, direction, required.has(name)),
  );
  return items.length > 0 ? `<ul class="fields">${items.join("")}</ul>` : "";
}

/** What a request or response body holds: its fields, or its type when it has none. */
function body(schema: Schema | undefined, mediaType: string, direction: Direction): string {
  if (!schema) return `<p><code>${esc(mediaType)}</code></p>`;
  const nested = fieldsOf(schema);
  const label = `<code>${esc(mediaType)}</code>: ${esc(typeLabel(schema))}`;
  return nested ? `<p>${label}</p>${fields(nested, direction)}` : `<p>${label}</p>`;
}

function isError(status: string): boolean {
  return /^[45]/.test(status);
}

function operationSection(method: string, path: string, op: Operation, id: string): string {
  const parts: string[] = [];
  const headingId = `${id}-title`;
  parts.push(
    `<section class="op" id="${esc(id)}" aria-labelledby="${esc(headingId)}">`,
    `<h3 id="${esc(headingId)}"><span class="method ${method}">${method.toUpperCase()}</span> <code class="path">${esc(path)}</code></h3>`,
  );
  if (op.summary) parts.push(`<p class="summary">${prose(op.summary)}</p>`);
  if (op.description) parts.push(`<p>${prose(op.description)}</p>`);
  const open = Array.isArray(op.security) && op.security.length === 0;
  parts.push(
    `<p class="meta">Operation ID <code>${esc(op.operationId ?? id)}</code> · ${
      open ? "no API key needed" : "API key as a bearer token"
    }</p>`,
  );
  const params = op.parameters ?? [];
  if (params.length > 0) {
    parts.push(
      "<h4>Parameters</h4>",
      `<ul class="fields">${params
        .map((p) => field(p.name, p.schema ?? {}, "sent", p.required === true, p.in, p.description))
        .join("")}</ul>`,
    );
  }
  const request = Object.entries(op.requestBody?.content ?? {})[0];
  if (request) parts.push("<h4>Request body</h4>", body(request[1].schema, request[0], "sent"));
  const responses = Object.entries(op.responses ?? {});
  for (const [status, response] of responses.filter(([s]) => !isError(s))) {
    const content = Object.entries(response.content ?? {})[0];
    const description = response.description && response.description !== "Default Response";
    parts.push(
      `<h4>Response ${esc(status)}${description ? ` · ${prose(response.description!)}` : ""}</h4>`,
      content ? body(content[1].schema, content[0], "received") : "<p>No body.</p>",
    );
  }
  const errors = responses.filter(([s]) => isError(s)).map(([s]) => s);
  if (errors.length > 0)
    parts.push(`<p class="errors">Errors: ${errors.join(", ")} (<a href="#errors">error body</a>)</p>`);
  parts.push("</section>");
  return parts.join("\n");
}

function slug(text: string): string {
  return text.toLowerCase().replace(/[^a-z0-9]+/g, "-");
}

function title(tag: string): string {
  return tag[0]!.toUpperCase() + tag.slice(1);
}

/** The whole page for `doc`; `stylesheet` is the URL of its CSS. */
export function renderApiReference(doc: OpenApiDocument, stylesheet: string): string {
  const groups = new Map<string, Array<{ method: string; path: string; op: Operation; id: string }>>();
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const method of methods) {
      const op = item[method];
      if (!op) continue;
      const tag = op.tags?.[0] ?? "other";
      const id = op.operationId ?? slug(`${method} ${path}`);
      const list = groups.get(tag) ?? [];
      list.push({ method, path, op, id });
      groups.set(tag, list);
    }
  }
  const server = doc.servers?.[0]?.url;
  const nav = [...groups]
    .map(
      ([tag, ops]) =>
        `<li><a href="#tag-${esc(slug(tag))}">${esc(title(tag))}</a><ul>${ops
          .map(
            (o) =>
              `<li><a href="#${esc(o.id)}"><span class="method ${o.method}">${o.method.toUpperCase()}</span> <span class="path">${esc(o.path)}</span></a></li>`,
          )
          .join("")}</ul></li>`,
    )
    .join("");
  const sections = [...groups]
    .map(
      ([tag, ops]) =>
        `<section aria-labelledby="tag-${esc(slug(tag))}"><h2 id="tag-${esc(slug(tag))}">${esc(title(tag))}</h2>\n${ops
          .map((o) => operationSection(o.method, o.path, o.op, o.id))
          .join("\n")}</section>`,
    )
    .join("\n");
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${esc(doc.info.title)} — reference</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="${esc(stylesheet)}">
</head>
<body>
<a class="skip" href="#main">Skip to the operations</a>
<header>
<h1>${esc(doc.info.title)}</h1>
${doc.info.description ? `<p>${prose(doc.info.description)}</p>` : ""}
<p>Version ${esc(doc.info.version)}${server ? ` · base URL <code>${esc(server)}</code>` : ""} · the <a href="/openapi.json">OpenAPI document</a> (for code generators and API clients).</p>
<p>Send the API key as <code>Authorization: Bearer &lt;key&gt;</code>. Parameters of a POST or PUT go in a JSON body or in the query string. Every list answers <code>{data, page_info}</code>; <code>include</code> and <code>exclude</code> pick the fields of each item.</p>
</header>
<nav aria-label="Operations"><h2>Operations</h2><ul>${nav}</ul></nav>
<main id="main">
<section aria-labelledby="errors"><h2 id="errors">Errors</h2>
<p>An error answers <code>{"error": "&lt;message&gt;", "code": "&lt;stable code&gt;", "details": {…}}</code> with its HTTP status; match on <code>code</code>, never on the message. The codes are listed in <code>docs/errors.md</code>.</p></section>
${sections}
</main>
</body>
</html>
`;
}
