/**
 * The starter components `fount init` writes. Each deploys as it is (no package to install, no
 * account to connect) and shows one way of Pipedream's component format, with comments for a reader
 * who is new to it.
 */

/** The templates, by the name `--template` takes. */
export const templateNames = ["http", "timer", "polling"] as const;
export type TemplateName = (typeof templateNames)[number];

/** What a template is, for the help and the message after writing it. */
export const templateSummaries: Record<TemplateName, string> = {
  http: "an HTTP source: emits each request to its endpoint and answers it",
  timer: "a timer source: emits an event on a schedule, counting runs in this.db",
  polling: "a polling source: emits new items of a JSON list, each once (dedupe and a cursor in this.db)",
};

interface Names {
  /** Component key, also the file name: `new-orders`. */
  key: string;
  /** Human name: `New Orders`. */
  name: string;
}

const http = ({ key, name }: Names) => `/**
 * ${name}: an HTTP source. Every request to its endpoint (printed by \`fount deploy\`) runs \`run\`
 * with the request as the event, and is emitted.
 */
export default {
  key: "${key}",
  name: "${name}",
  description: "Emit every HTTP request sent to the source's endpoint",
  version: "0.0.1",
  type: "source",
  props: {
    // customResponse: run answers the request itself with this.http.respond().
    http: { type: "$.interface.http", customResponse: true },
  },
  async run(event) {
    // event: { method, path, query, headers, body, bodyRaw, url }
    this.http.respond({
      status: 200,
      headers: { "content-type": "application/json" },
      body: { received: true },
    });
    this.$emit(event, { summary: \`\${event.method} \${event.path}\`, ts: Date.now() });
  },
};
`;

const timer = ({ key, name }: Names) => `/**
 * ${name}: a timer source. \`run\` is called on the schedule of the timer prop (change it per source
 * with \`fount update <source> --prop 'timer={"intervalSeconds":300}'\`), or now with \`fount run\`.
 */
export default {
  key: "${key}",
  name: "${name}",
  description: "Emit an event on a schedule",
  version: "0.0.1",
  type: "source",
  props: {
    // this.db keeps small JSON values between runs (and across updates of the code).
    db: "$.service.db",
    timer: {
      type: "$.interface.timer",
      default: { intervalSeconds: 60 * 60 },
    },
  },
  async run(event) {
    const runs = (this.db.get("runs") ?? 0) + 1;
    this.db.set("runs", runs);
    this.$emit({ runs, timestamp: event.timestamp }, { summary: \`Run #\${runs}\`, ts: Date.now() });
  },
};
`;

const polling = ({ key, name }: Names) => `/**
 * ${name}: a polling source. On each tick of the timer it reads a JSON list and emits the items it
 * has not emitted before. Two guards, as in Pipedream's own polling sources:
 * - a cursor in this.db (the highest id emitted) skips what earlier runs have seen;
 * - dedupe "unique" drops an event whose meta id was emitted before (of the last 100).
 * Point the url prop at your own API: \`fount deploy ${key}.mjs --prop url=https://…\`.
 */
export default {
  key: "${key}",
  name: "${name}",
  description: "Emit new items of a JSON list, each once",
  version: "0.0.1",
  type: "source",
  dedupe: "unique",
  props: {
    db: "$.service.db",
    timer: {
      type: "$.interface.timer",
      default: { intervalSeconds: 15 * 60 },
    },
    url: {
      type: "string",
      label: "URL",
      description: "A JSON array of objects, each with a numeric id",
      default: "https://api.github.com/repos/nodejs/node/releases?per_page=10",
    },
  },
  async run() {
    const cursor = this.db.get("cursor") ?? 0;
    const res = await fetch(this.url, { headers: { accept: "application/json" } });
    if (!res.ok) throw new Error(\`\${this.url} answered \${res.status}\`);
    const items = await res.json();
    // Oldest first, so that the event list reads in order.
    const fresh = items.filter((item) => item.id > cursor).sort((a, b) => a.id - b.id);
    for (const item of fresh) {
      this.$emit(item, {
        id: item.id,
        summary: item.name ?? item.title ?? \`Item \${item.id}\`,
        ts: Date.now(),
      });
    }
    if (fresh.length > 0) this.db.set("cursor", fresh[fresh.length - 1].id);
  },
};
`;

const writers: Record<TemplateName, (names: Names) => string> = { http, timer, polling };

/** The code of template `name` for a component keyed `key`. */
export function templateCode(name: TemplateName, key: string): string {
  const title = key
    .split("-")
    .filter(Boolean)
    .map((w) => w[0]!.toUpperCase() + w.slice(1))
    .join(" ");
  return writers[name]({ key, name: title || key });
}
