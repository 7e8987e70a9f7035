/**
 * Browsing what can be deployed, as Pipedream's clients do: the registry's components (`GET
 * /components/registry`), a search over the registry and the caller's own components (`GET
 * /components/search`), and the apps those components' app props name (`GET /apps`, `GET /apps/{app}`).
 */
import type { FastifyInstance, FastifyRequest } from "fastify";
import { Type } from "typebox";
import { registryOwner } from "../../domain/components/components.ts";
import type { ComponentRecord, Page, WithSeq } from "../../domain/types.ts";
import { notFound } from "../../errors.ts";
import {
  commonParams,
  errorResponses,
  type ListPage,
  type ListPageQuery,
  pageEnvelope,
  pageParams,
  pageQuery,
  pageResponse,
  visibleOwners,
} from "../conventions.ts";

const componentSummarySchema = Type.Object(
  {
    id: Type.String(),
    key: Type.Union([Type.String(), Type.Null()]),
    name: Type.String(),
    version: Type.String(),
    description: Type.Union([Type.String(), Type.Null()]),
    type: Type.String(),
    registry: Type.Boolean(),
    apps: Type.Array(Type.String()),
    created_at: Type.Integer(),
  },
  { description: "Component summary" },
);

const appSchema = Type.Object(
  {
    id: Type.String(),
    name_slug: Type.String(),
    name: Type.String(),
    auth_type: Type.String(),
    auth_fields: Type.Array(Type.String()),
    components: Type.Array(Type.String()),
  },
  { description: "App" },
);

/** Components read at most for a search or the apps list (newest version of each key only). */
const scannedComponents = 2000;

function appsOf(c: ComponentRecord): string[] {
  const slugs = c.meta.props.filter((p) => p.type === "app" && p.app).map((p) => p.app as string);
  return [...new Set(slugs)];
}

function summarise(c: ComponentRecord): Record<string, unknown> {
  return {
    id: c.id,
    key: c.key,
    name: c.name,
    version: c.version,
    description: c.meta.description ?? null,
    type: c.meta.type,
    registry: c.ownerId === registryOwner,
    apps: appsOf(c),
    created_at: c.createdAt,
  };
}

/** The fields component code reads from `this.$auth` (`$auth.api_key`, `$auth?.token`, `$auth["x"]`). */
export function authFieldsIn(code: string): string[] {
  const fields = new Set<string>();
  for (const m of code.matchAll(
    /\$auth\s*(?:\?\.|\.)\s*([A-Za-z_$][\w$]*)|\$auth\s*\[\s*["'`]([^"'`]{1,64})["'`]\s*\]/g,
  )) {
    const field = m[1] ?? m[2];
    if (field) fields.add(field);
  }
  return [...fields].sort();
}

/** Words of a search: every one must appear in the key, name or description (any case). */
function matches(c: ComponentRecord, query: string | undefined, app: string | undefined): boolean {
  if (app && !appsOf(c).includes(app) && !c.key?.startsWith(`${app}-`)) return false;
  if (!query) return true;
  const text = `${c.key ?? ""} ${c.name} ${c.meta.description ?? ""}`.toLowerCase();
  return query
    .toLowerCase()
    .split(/\s+/)
    .filter(Boolean)
    .every((word) => text.includes(word));
}

/** A page of an in-memory list ordered by `seq`, newest first, cut as the store would cut it. */
function pageOf<T>(all: Array<WithSeq<T>>, q: ListPageQuery): ListPage<WithSeq<T>> {
  const { afterSeq, beforeSeq, pageSize } = q;
  if (beforeSeq !== undefined) {
    const newer = all.filter((x) => x.seq > beforeSeq);
    return { items: newer.slice(-pageSize), totalCount: all.length, more: newer.length > 0 };
  }
  const older = afterSeq === undefined ? all : all.filter((x) => x.seq < afterSeq);
  return { items: older.slice(0, pageSize), totalCount: all.length, more: older.length > pageSize };
}

export async function catalogRoutes(app: FastifyInstance): Promise<void> {
  const { store } = app.fount;

  /** The newest version of each key of these owners, newest first (up to `scannedComponents`). */
  async function latest(owners: string[]): Promise<Array<WithSeq<ComponentRecord>>> {
    const out: Array<WithSeq<ComponentRecord>> = [];
    let afterSeq: number | undefined;
    while (out.length < scannedComponents) {
      const page: Page<WithSeq<ComponentRecord>> = await store.listLatestComponents(owners, {
        limit: 100,
        afterSeq,
      });
      out.push(...page.items);
      const last = page.items[page.items.length - 1];
      if (!last || page.items.length < 100) break;
      afterSeq = last.seq;
    }
    return out;
  }

  /** The registry's components, then the caller's (the caller's own version of a key first). */
  async function visibleComponents(request: FastifyRequest): Promise<ComponentRecord[]> {
    const own = await latest(visibleOwners(request));
    const ownKeys = new Set<string | null>(own.map((c) => c.key).filter((k) => k !== null));
    const registry = (await latest([registryOwner])).filter((c) => !ownKeys.has(c.key));
    return [...own, ...registry];
  }

  const searchParams = {
    q: Type.Optional(
      Type.String({ maxLength: 200, description: "Words to find in key, name or description" }),
    ),
    app: Type.Optional(Type.String({ maxLength: 100, description: "Only components with this app's props" })),
  };

  app.get(
    "/components/registry",
    {
      schema: {
        tags: ["components"],
        summary: "Browse the registry's components (newest version of each key), newest first",
        querystring: Type.Object(
          { ...commonParams, ...pageParams, ...searchParams },
          { additionalProperties: false },
        ),
        response: { 200: pageResponse(componentSummarySchema), ...errorResponses() },
      },
    },
    async (request) => {
      const q = request.query as {
        q?: string;
        app?: string;
        limit?: number;
        after?: string;
        before?: string;
      };
      const pq = pageQuery(q);
      const found = (await latest([registryOwner])).filter((c) => matches(c, q.q, q.app));
      return pageEnvelope(pageOf(found, pq), summarise);
    },
  );

  app.get(
    "/components/search",
    {
      schema: {
        tags: ["components"],
        summary: "Search the registry and your components by words and app",
        description:
          "Every word of query must appear in the component's key, name or description (any case); Pipedream matches by meaning instead. similarity_threshold and debug are accepted and ignored.",
        querystring: Type.Object(
          {
            ...commonParams,
            query: Type.Optional(Type.String({ maxLength: 500 })),
            app: searchParams.app,
            similarity_threshold: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
            debug: Type.Optional(Type.Boolean()),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({
            sources: Type.Array(Type.String()),
            actions: Type.Array(Type.String()),
            data: Type.Array(Type.Partial(componentSummarySchema)),
          }),
          ...errorResponses(),
        },
      },
    },
    async (request) => {
      const q = request.query as { query?: string; app?: string };
      const found = (await visibleComponents(request)).filter((c) => matches(c, q.query, q.app));
      const keys = (type: string) =>
        found.filter((c) => c.meta.type === type && c.key !== null).map((c) => c.key as string);
      return { sources: keys("source"), actions: keys("action"), data: found.map(summarise) };
    },
  );

  /** Apps named by app props of the registry's and the caller's components, by name slug. */
  async function knownApps(request: FastifyRequest): Promise<Array<WithSeq<Record<string, unknown>>>> {
    const byApp = new Map<string, { fields: Set<string>; components: Set<string> }>();
    for (const c of await visibleComponents(request)) {
      const slugs = appsOf(c);
      if (slugs.length === 0) continue;
      // The fields a component reads from $auth; with several apps, each is credited with all of them.
      const fields = authFieldsIn(c.code);
      for (const slug of slugs) {
        const entry = byApp.get(slug) ?? { fields: new Set(), components: new Set() };
        for (const f of fields) entry.fields.add(f);
        entry.components.add(c.key ?? c.id);
        byApp.set(slug, entry);
      }
    }
    const slugs = [...byApp.keys()].sort();
    // Alphabetical; seq counts down so that the list's cursor order (newest first) is that order.
    return slugs.map((slug, i) => {
      const entry = byApp.get(slug) as { fields: Set<string>; components: Set<string> };
      const fields = [...entry.fields].sort();
      return {
        seq: slugs.length - i,
        id: slug,
        name_slug: slug,
        name: slug,
        auth_type:
          fields.length === 0 ? "none" : fields.some((f) => f.startsWith("oauth_")) ? "oauth" : "keys",
        auth_fields: fields,
        components: [...entry.components].sort(),
      };
    });
  }

  app.get(
    "/apps",
    {
      schema: {
        tags: ["components"],
        summary: "Apps known from the app props of the registry's and your components",
        querystring: Type.Object(
          { ...commonParams, ...pageParams, q: searchParams.q },
          { additionalProperties: false },
        ),
        response: { 200: pageResponse(appSchema), ...errorResponses() },
      },
    },
    async (request) => {
      const q = request.query as { q?: string; limit?: number; after?: string; before?: string };
      const pq = pageQuery(q);
      const word = q.q?.toLowerCase();
      const apps = (await knownApps(request)).filter((a) => !word || String(a.name_slug).includes(word));
      return pageEnvelope(pageOf(apps, pq), ({ seq: _seq, ...a }) => a);
    },
  );

  app.get(
    "/apps/:app",
    {
      schema: {
        tags: ["components"],
        summary: "One known app by name slug",
        params: Type.Object({
          app: Type.String({ minLength: 1, maxLength: 100, pattern: "^[A-Za-z0-9_.-]+$" }),
        }),
        querystring: Type.Object(commonParams, { additionalProperties: false }),
        response: { 200: Type.Object({ data: Type.Partial(appSchema) }), ...errorResponses(404) },
      },
    },
    async (request) => {
      const { app: slug } = request.params as { app: string };
      const found = (await knownApps(request)).find((a) => a.name_slug === slug);
      if (!found) throw notFound("App", slug);
      const { seq: _seq, ...data } = found;
      return { data };
    },
  );
}
