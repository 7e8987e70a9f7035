/** Sources (deployed components): create, read, update, delete, list, and run by hand. */
import type { FastifyInstance, FastifyRequest } from "fastify";
import { Type } from "typebox";
import { renderProps } from "../../domain/components/props.ts";
import type { RunOutcome } from "../../domain/sources/runner.ts";
import type { RetentionPolicy, SourceRecord } from "../../domain/types.ts";
import { AppError } from "../../errors.ts";
import {
  actingOwner,
  commonParams,
  errorResponses,
  type ListQuery,
  listQuerystring,
  pageEnvelope,
  pageParams,
  pageQuery,
  pageResponse,
  params,
  principal,
  trimPage,
  visibleOr404,
  visibleOwners,
} from "../conventions.ts";
import { renderEvent } from "../event-entries.ts";
import { refuseOverLimit } from "../owner-limits.ts";

/** `retention` of a source (extension, issue 28): null means the instance's defaults. */
const retentionSchema = Type.Union(
  [
    Type.Object(
      {
        events: Type.Optional(
          Type.Integer({ minimum: 1, description: "Events kept per channel (newest first)" }),
        ),
        days: Type.Optional(Type.Integer({ minimum: 1, description: "Days an event is kept" })),
      },
      { additionalProperties: false },
    ),
    Type.Null(),
  ],
  {
    description:
      "How long its events are kept (extension); a field left out, or null, takes the instance's default. $logs and $errors follow the instance's settings.",
  },
);

const sourceSchema = Type.Object(
  {
    id: Type.String(),
    user_id: Type.Optional(Type.String()),
    owner_id: Type.String(),
    component_id: Type.String(),
    component_key: Type.Union([Type.String(), Type.Null()]),
    configured_props: Type.Object({}, { additionalProperties: true }),
    active: Type.Boolean(),
    created_at: Type.Integer(),
    updated_at: Type.Integer(),
    name: Type.String(),
    name_slug: Type.String(),
    endpoint_url: Type.Optional(Type.String()),
    retention: retentionSchema,
  },
  { description: "Source" },
);

/** A source by `dc_…` ID or by name slug, when the caller may see it; 404 otherwise. */
export async function visibleSource(
  app: FastifyInstance,
  request: FastifyRequest,
  idOrSlug: string,
): Promise<SourceRecord> {
  const { store } = app.fount;
  const source = idOrSlug.startsWith("dc_")
    ? await store.getSource(idOrSlug)
    : await store.getSourceBySlug(visibleOwners(request), idOrSlug);
  return visibleOr404(request, source, "Source", idOrSlug);
}

export const sourceIdParams = Type.Object({
  id: Type.String({
    minLength: 1,
    maxLength: 80,
    pattern: "^[A-Za-z0-9_-]+$",
    description: "dc_… ID or name slug",
  }),
});

const componentChoice = {
  component_id: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
  component_code: Type.Optional(Type.String({ minLength: 1, maxLength: 1024 * 1024 })),
  component_url: Type.Optional(Type.String({ minLength: 1, maxLength: 2048 })),
  key: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
};

type ChoiceParams = { component_id?: string; component_code?: string; component_url?: string; key?: string };

function choice(
  p: ChoiceParams,
): { componentId?: string; code?: string; url?: string; key?: string } | undefined {
  if (
    p.component_id === undefined &&
    p.component_code === undefined &&
    p.component_url === undefined &&
    p.key === undefined
  ) {
    return undefined;
  }
  return { componentId: p.component_id, code: p.component_code, url: p.component_url, key: p.key };
}

/** Renders a run's outcome for the manual-run endpoint. */
export function renderOutcome(o: RunOutcome): Record<string, unknown> {
  return {
    ok: o.ok,
    emits: o.emits.map((e) => renderEvent(e, true)),
    logs: o.logs,
    error: o.error ? { code: o.error.code, message: o.error.message, stack: o.error.stack } : null,
    return_value: o.returnValue ?? null,
    duration_ms: o.durationMs,
  };
}

export async function sourceRoutes(app: FastifyInstance): Promise<void> {
  const tags = ["sources"];
  const { store, catalog, sources, runner } = app.fount;

  async function render(source: SourceRecord, withUser: boolean): Promise<Record<string, unknown>> {
    const record = await catalog.record(source.componentId);
    const endpoint = runner.endpointUrl(source);
    return {
      id: source.id,
      ...(withUser ? { user_id: source.createdBy } : {}),
      owner_id: source.ownerId,
      component_id: source.componentId,
      component_key: record.key,
      configured_props: renderProps(record.meta, source.props, endpoint),
      active: source.active,
      created_at: source.createdAt,
      updated_at: source.updatedAt,
      name: source.name,
      name_slug: source.nameSlug,
      ...(endpoint ? { endpoint_url: endpoint } : {}),
      retention: source.retention ?? null,
    };
  }

  const one = { 200: Type.Object({ data: Type.Partial(sourceSchema) }) };
  const list = {
    200: pageResponse(sourceSchema),
  };

  app.post(
    "/sources",
    {
      schema: {
        tags,
        summary: "Deploy a source",
        description:
          "Precedence: component_id, then component_code, then component_url (then only metadata), then key (own components, then the registry). Runs the deploy and activate hooks.",
        body: Type.Object(
          {
            ...commonParams,
            ...componentChoice,
            name: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
            configured_props: Type.Optional(Type.Object({}, { additionalProperties: true })),
            retention: Type.Optional(retentionSchema),
          },
          { additionalProperties: false },
        ),
        response: { ...one, ...errorResponses(404, 409, 413, 422) },
      },
    },
    async (request) => {
      const p = params<
        ChoiceParams & {
          name?: string;
          configured_props?: Record<string, unknown>;
          org_id?: string;
          retention?: RetentionPolicy | null;
        }
      >(request);
      const component = choice(p);
      if (!component) {
        throw new AppError(
          "invalid_parameter",
          "Give one of component_id, component_code, component_url or key",
          {
            details: { field: "component_id" },
          },
        );
      }
      const ownerId = actingOwner(request, p.org_id);
      const owned = await store.listSources([ownerId], { limit: 1 });
      refuseOverLimit(app.fount.config.ownerLimits, "sources", owned.totalCount);
      const source = await sources.create({
        ownerId,
        createdBy: principal(request).user.id,
        visibleOwners: visibleOwners(request),
        component,
        name: p.name,
        configuredProps: p.configured_props,
        retention:
          p.retention === undefined
            ? undefined
            : app.fount.retention.check(p.retention, principal(request).user.plan),
      });
      return { data: await render(source, true) };
    },
  );

  app.get(
    "/sources/:id",
    {
      schema: {
        tags,
        summary: "Get a source (extension)",
        params: sourceIdParams,
        querystring: Type.Object(commonParams, { additionalProperties: false }),
        response: { ...one, ...errorResponses(404) },
      },
    },
    async (request) => {
      const { id } = request.params as { id: string };
      return { data: await render(await visibleSource(app, request, id), true) };
    },
  );

  app.put(
    "/sources/:id",
    {
      schema: {
        tags,
        summary: "Update a source: code, name, active, configured_props, retention",
        description:
          'A code or props change runs deactivate, swaps, then activate. {"active": false} alone disables the source. ' +
          "configured_props replaces every prop; without it, new code keeps the stored props it still declares. " +
          'A secret left out, or sent back as the mask "**********", keeps its value.',
        params: sourceIdParams,
        body: Type.Object(
          {
            ...commonParams,
            ...componentChoice,
            name: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
            active: Type.Optional(Type.Boolean()),
            configured_props: Type.Optional(Type.Object({}, { additionalProperties: true })),
            retention: Type.Optional(retentionSchema),
          },
          { additionalProperties: false },
        ),
        response: { ...one, ...errorResponses(404, 409, 413, 422) },
      },
    },
    async (request) => {
      const { id } = request.params as { id: string };
      const p = params<
        ChoiceParams & {
          name?: string;
          active?: boolean;
          configured_props?: Record<string, unknown>;
          retention?: RetentionPolicy | null;
        }
      >(request);
      const source = await visibleSource(app, request, id);
      // The plan of the account that created the source, whose quotas it counts against.
      const creator = p.retention ? await store.getUser(source.createdBy) : undefined;
      const retention =
        p.retention === undefined
          ? undefined
          : app.fount.retention.check(p.retention, creator?.plan ?? "free");
      const updated = await sources.update(source, {
        visibleOwners: visibleOwners(request),
        component: choice(p),
        name: p.name,
        active: p.active,
        configuredProps: p.configured_props,
        retention,
      });
      // A smaller window is pruned at the next pass, not at the next sweep.
      if (retention !== undefined) app.fount.pruner.sweepSoon();
      // Deliveries parked while it was inactive are due now, in batches (it may listen to other emitters);
      // made inactive, its due ones are parked in batches.
      if (p.active) app.fount.dispatcher.unparkSoon();
      else if (p.active === false) app.fount.dispatcher.parkSoon(updated.id);
      return { data: await render(updated, true) };
    },
  );

  app.delete(
    "/sources/:id",
    {
      schema: {
        tags,
        summary: "Delete a source (runs its deactivate hook)",
        params: sourceIdParams,
        querystring: Type.Object(commonParams, { additionalProperties: false }),
        response: { 200: Type.Object({ data: Type.Object({ id: Type.String() }) }), ...errorResponses(404) },
      },
    },
    async (request) => {
      const { id } = request.params as { id: string };
      const source = await visibleSource(app, request, id);
      await sources.delete(source);
      return { data: { id: source.id } };
    },
  );

  app.get(
    "/users/me/sources",
    {
      schema: {
        tags,
        summary: "List the user's sources (newest first)",
        querystring: listQuerystring(),
        response: { ...list, ...errorResponses(404) },
      },
    },
    async (request) => {
      const q = request.query as ListQuery;
      const owner = q.org_id ? actingOwner(request, q.org_id) : principal(request).user.id;
      const pq = pageQuery(q);
      const page = trimPage(await store.listSources([owner], pq), pq);
      const data = [];
      for (const s of page.items) data.push(await render(s, false));
      return { ...pageEnvelope(page, (x) => x), data };
    },
  );

  app.get(
    "/orgs/:org_id/sources",
    {
      schema: {
        tags,
        summary: "List an organization's sources",
        params: Type.Object({ org_id: Type.String({ pattern: "^o_[A-Za-z0-9]+$", maxLength: 64 }) }),
        querystring: Type.Object(
          { include: commonParams.include, exclude: commonParams.exclude, ...pageParams },
          { additionalProperties: false },
        ),
        response: { ...list, ...errorResponses(404) },
      },
    },
    async (request) => {
      const { org_id } = request.params as { org_id: string };
      const pq = pageQuery(request.query as ListQuery);
      const page = trimPage(await store.listSources([actingOwner(request, org_id)], pq), pq);
      const data = [];
      for (const s of page.items) data.push(await render(s, false));
      return { ...pageEnvelope(page, (x) => x), data };
    },
  );

  app.post(
    "/sources/:id/run",
    {
      schema: {
        tags,
        summary: "Run a source now (extension)",
        description:
          "Invokes run(event) with the given event (default: a manual-run event) and answers with its emits and logs.",
        params: sourceIdParams,
        body: Type.Object(
          { ...commonParams, event: Type.Optional(Type.Unknown()) },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({ data: Type.Object({}, { additionalProperties: true }) }),
          ...errorResponses(404, 409, 422),
        },
      },
    },
    async (request) => {
      const { id } = request.params as { id: string };
      const { event } = params<{ event?: unknown }>(request);
      const source = await visibleSource(app, request, id);
      if (!source.active) throw new AppError("conflict", "The source is inactive; activate it first");
      const hold = await runner.checkQuota(source);
      const now = app.fount.clock.now();
      const outcome = await runner.invoke(
        source,
        { kind: "run", event: event ?? { timestamp: Math.floor(now / 1000), manual: true } },
        { trigger: "manual", hold },
      );
      return { data: renderOutcome(outcome) };
    },
  );
}
