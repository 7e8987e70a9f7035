/**
 * API conventions every route shares: the caller's tenant context, parameters from query or body,
 * cursors and `page_info`, and the shared schema fragments for them.
 */
import type { FastifyRequest } from "fastify";
import { type TObject, type TProperties, Type } from "typebox";
import type { Page, PageQuery, Principal, WithSeq } from "../domain/types.ts";
import { AppError, notFound } from "../errors.ts";

declare module "fastify" {
  interface FastifyRequest {
    /** Set by the auth plugin on every authenticated route. */
    principal: Principal | null;
  }
  interface FastifyContextConfig {
    /** Routes that answer without an API key (health, docs, source endpoints). */
    public?: boolean;
    /** Routes that take the body as raw bytes (source endpoints): no query merge, no JSON rules. */
    rawBody?: boolean;
  }
}

/** Parameters every endpoint takes: `include`, `exclude`, and `org_id` to act for an organization. */
export const commonParams = {
  include: Type.Optional(
    Type.String({ maxLength: 1024, description: "Comma-separated fields of each item to keep" }),
  ),
  exclude: Type.Optional(
    Type.String({ maxLength: 1024, description: "Comma-separated fields of each item to drop" }),
  ),
  org_id: Type.Optional(
    Type.String({ pattern: "^o_[A-Za-z0-9]+$", maxLength: 64, description: "Act for this organization" }),
  ),
};

export const pageParams = {
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 10, description: "Page size" })),
  after: Type.Optional(Type.String({ maxLength: 256, description: "Cursor: items older than this one" })),
  before: Type.Optional(Type.String({ maxLength: 256, description: "Cursor: items newer than this one" })),
};

export const pageInfoSchema = Type.Object({
  total_count: Type.Integer(),
  count: Type.Integer(),
  start_cursor: Type.Union([Type.String(), Type.Null()]),
  end_cursor: Type.Union([Type.String(), Type.Null()]),
});

/** The query of a list route: `include`/`exclude`, `org_id`, `limit` and the cursors, nothing else. */
export function listQuerystring() {
  return Type.Object({ ...commonParams, ...pageParams }, { additionalProperties: false });
}

/** What a list route's handler reads from that query. */
export interface ListQuery {
  org_id?: string;
  limit?: number;
  after?: string;
  before?: string;
}

/** The 200 answer of a list route: `page_info` and the items (`include`/`exclude` may drop fields). */
export function pageResponse<T extends TProperties>(item: TObject<T>) {
  return Type.Object({ page_info: pageInfoSchema, data: Type.Array(Type.Partial(item)) });
}

export const errorSchema = Type.Object(
  {
    error: Type.String(),
    code: Type.String(),
    details: Type.Optional(Type.Object({}, { additionalProperties: true })),
  },
  { description: "Error" },
);

/** The standard error responses, for route schemas. */
export function errorResponses(...statuses: number[]): Record<number, typeof errorSchema> {
  return Object.fromEntries([400, 401, 429, ...statuses].map((s) => [s, errorSchema]));
}

/** The API key of an `Authorization: Bearer <key>` header (any case, surrounding spaces ignored). */
export function bearerToken(header: unknown): string | undefined {
  const match = typeof header === "string" ? /^Bearer\s+(\S{1,512})\s*$/i.exec(header) : null;
  return match?.[1];
}

/** Parameters as the route sees them: the JSON body merged over the query for POST and PUT. */
export function params<T>(request: FastifyRequest): T {
  return (request.method === "POST" || request.method === "PUT" ? request.body : request.query) as T;
}

export function principal(request: FastifyRequest): Principal {
  if (!request.principal) throw new AppError("unauthorized");
  return request.principal;
}

/** Owners whose resources the caller may see: the user and every organization it belongs to. */
export function visibleOwners(request: FastifyRequest): string[] {
  const p = principal(request);
  return [p.user.id, ...p.orgIds];
}

/** The owner new resources get: the `org_id` organization (when the caller belongs to it) or the user. */
export function actingOwner(request: FastifyRequest, orgId: string | undefined): string {
  const p = principal(request);
  if (orgId === undefined) return p.user.id;
  // Unknown and foreign organizations look the same, so org IDs do not leak.
  if (!p.orgIds.includes(orgId)) throw notFound("Organization", orgId);
  return orgId;
}

/** Whether the caller may use a resource with this owner. */
export function canSee(request: FastifyRequest, ownerId: string | undefined): boolean {
  return ownerId !== undefined && visibleOwners(request).includes(ownerId);
}

/** `record` when the caller may see it; otherwise 404 (never 403, so other tenants' IDs do not leak). */
export function visibleOr404<T extends { ownerId: string }>(
  request: FastifyRequest,
  record: T | undefined,
  what: string,
  id: string,
): T {
  if (!record || !canSee(request, record.ownerId)) throw notFound(what, id);
  return record;
}

/** Cursors are opaque to clients: base64url of the item's store sequence number. */
export function encodeCursor(seq: number): string {
  return Buffer.from(`s${seq}`).toString("base64url");
}

export function decodeCursor(cursor: string, field: string): number {
  const text = /^[A-Za-z0-9_-]+$/.test(cursor) ? Buffer.from(cursor, "base64url").toString("utf8") : "";
  const match = /^s(\d{1,15})$/.exec(text);
  if (!match)
    throw new AppError("invalid_cursor", `The ${field} cursor is not valid`, { details: { field } });
  return Number(match[1]);
}

/** A store page query of a list route: `limit` is one past the page size when paging toward older items. */
export interface ListPageQuery extends PageQuery {
  /** The page size the client asked for. */
  pageSize: number;
}

export function pageQuery(p: { limit?: number; after?: string; before?: string }): ListPageQuery {
  if (p.after !== undefined && p.before !== undefined) {
    throw new AppError("invalid_parameter", "Give either after or before, not both", {
      details: { field: "before" },
    });
  }
  const limit = p.limit ?? 10;
  // The schema says 1–100, but Ajv's query coercion lets `1e400` through as Infinity.
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > 100) {
    throw new AppError("invalid_parameter", "limit must be an integer from 1 to 100", {
      details: { field: "limit" },
    });
  }
  const beforeSeq = p.before !== undefined ? decodeCursor(p.before, "before") : undefined;
  return {
    // One item past the page tells whether anything older follows, so the last page's end_cursor is null.
    limit: beforeSeq === undefined ? limit + 1 : limit,
    pageSize: limit,
    afterSeq: p.after !== undefined ? decodeCursor(p.after, "after") : undefined,
    beforeSeq,
  };
}

/** A page cut to the size the client asked for, knowing whether older items follow it. */
export interface ListPage<T> extends Page<T> {
  more: boolean;
}

/** Cuts the store's page (one item longer when paging toward older items) to the page size. */
export function trimPage<T>(page: Page<T>, q: ListPageQuery): ListPage<T> {
  // Paging toward newer items, the cursor's own item is older than the page, so something follows.
  if (q.beforeSeq !== undefined) return { ...page, more: page.items.length > 0 };
  return {
    items: page.items.slice(0, q.pageSize),
    totalCount: page.totalCount,
    more: page.items.length > q.pageSize,
  };
}

/** The paginated envelope of the spec: `page_info` and `data`; `end_cursor` is null when nothing follows. */
export function pageEnvelope<T, R>(
  page: ListPage<WithSeq<T>>,
  render: (item: T) => R,
): {
  page_info: { total_count: number; count: number; start_cursor: string | null; end_cursor: string | null };
  data: R[];
} {
  const first = page.items[0];
  const last = page.items[page.items.length - 1];
  return {
    page_info: {
      total_count: page.totalCount,
      count: page.items.length,
      start_cursor: first ? encodeCursor(first.seq) : null,
      end_cursor: last && page.more ? encodeCursor(last.seq) : null,
    },
    data: page.items.map(render),
  };
}

/** Applies `include`/`exclude` to the top-level fields of each item in `data`. */
export function filterFields(
  payload: unknown,
  include: string | undefined,
  exclude: string | undefined,
): unknown {
  if (!payload || typeof payload !== "object" || !("data" in payload)) return payload;
  const keep = include ? new Set(splitList(include)) : undefined;
  const drop = exclude ? new Set(splitList(exclude)) : undefined;
  if (!keep && !drop) return payload;
  const pick = (item: unknown): unknown => {
    if (!item || typeof item !== "object" || Array.isArray(item)) return item;
    return Object.fromEntries(Object.entries(item).filter(([k]) => (!keep || keep.has(k)) && !drop?.has(k)));
  };
  const data = (payload as { data: unknown }).data;
  return { ...payload, data: Array.isArray(data) ? data.map(pick) : pick(data) };
}

function splitList(list: string): string[] {
  return list
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
}
