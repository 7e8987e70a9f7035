/** Saved components: create from code or URL, read by key or ID, the registry, and async prop options. */
import type { FastifyInstance } from "fastify";
import { Type } from "typebox";
import { registryOwner } from "../../domain/components/components.ts";
import { configurablePropList, configurableProps } from "../../domain/components/props.ts";
import type { ComponentRecord } from "../../domain/types.ts";
import { AppError, notFound } from "../../errors.ts";
import { actingOwner, commonParams, errorResponses, params, visibleOwners } from "../conventions.ts";

const componentSchema = Type.Object(
  {
    id: Type.String(),
    code: Type.String(),
    code_hash: Type.String(),
    name: Type.String(),
    version: Type.String(),
    key: Type.Union([Type.String(), Type.Null()]),
    description: Type.Union([Type.String(), Type.Null()]),
    type: Type.String(),
    configurable_props: Type.Array(Type.Object({}, { additionalProperties: true })),
    dependencies: Type.Object({}, { additionalProperties: Type.String() }),
    component_url: Type.Union([Type.String(), Type.Null()]),
    created_at: Type.Integer(),
    updated_at: Type.Integer(),
  },
  { description: "Component" },
);

export function renderComponent(c: ComponentRecord): Record<string, unknown> {
  return {
    id: c.id,
    code: c.code,
    code_hash: c.codeHash,
    name: c.name,
    version: c.version,
    key: c.key,
    description: c.meta.description ?? null,
    type: c.meta.type,
    configurable_props: configurableProps(c.meta),
    dependencies: c.dependencies,
    component_url: c.componentUrl,
    created_at: c.createdAt,
    updated_at: c.updatedAt,
  };
}

const one = { 200: Type.Object({ data: Type.Partial(componentSchema) }) };
const keyParam = Type.Object({
  key: Type.String({ minLength: 1, maxLength: 200, pattern: "^[A-Za-z0-9_.@/-]+$" }),
});

export async function componentRoutes(app: FastifyInstance): Promise<void> {
  const tags = ["components"];
  const { catalog, executor } = app.fount;

  app.post(
    "/components",
    {
      schema: {
        tags,
        summary: "Save a component",
        description:
          "component_code wins over component_url; the URL is then kept as metadata. Code may be ESM, CommonJS or TypeScript.",
        body: Type.Object(
          {
            ...commonParams,
            component_code: Type.Optional(Type.String({ minLength: 1, maxLength: 1024 * 1024 })),
            component_url: Type.Optional(Type.String({ minLength: 1, maxLength: 2048 })),
          },
          { additionalProperties: false },
        ),
        response: { ...one, ...errorResponses(404, 409, 413, 422) },
      },
    },
    async (request) => {
      const p = params<{ component_code?: string; component_url?: string; org_id?: string }>(request);
      if (p.component_code === undefined && p.component_url === undefined) {
        throw new AppError("invalid_parameter", "Give component_code or component_url", {
          details: { field: "component_code" },
        });
      }
      const owner = actingOwner(request, p.org_id);
      return {
        data: renderComponent(await catalog.save(owner, { code: p.component_code, url: p.component_url })),
      };
    },
  );

  app.get(
    "/components/registry/:key",
    {
      schema: {
        tags,
        summary: "A published component by key",
        params: keyParam,
        querystring: Type.Object(commonParams, { additionalProperties: false }),
        response: { ...one, ...errorResponses(404) },
      },
    },
    async (request) => {
      const { key } = request.params as { key: string };
      const found = await app.fount.store.findComponentByKey([registryOwner], key);
      if (!found) throw notFound("Registry component", key);
      return { data: renderComponent(found) };
    },
  );

  app.get(
    "/components/:key",
    {
      schema: {
        tags,
        summary: "A saved component by ID (sc_…) or key",
        params: keyParam,
        querystring: Type.Object(commonParams, { additionalProperties: false }),
        response: { ...one, ...errorResponses(404) },
      },
    },
    async (request) => {
      const { key } = request.params as { key: string };
      return { data: renderComponent(await catalog.resolve(visibleOwners(request), key)) };
    },
  );

  app.post(
    "/components/:key/props/reload",
    {
      schema: {
        tags,
        summary: "Reload a component's props: its dynamic props for the given values (extension)",
        description:
          "Runs the component's additionalProps() in the caller's sandbox with `this` holding configured_props " +
          '(app props as {"authProvisionId": "apn_…"} get the account\'s $auth) and answers with every configurable ' +
          "prop, the component's own then the dynamic ones. Call it again after setting a prop with reloadProps: true. " +
          "Pipedream's Connect API names this reloadComponentProps and answers dynamicProps.configurableProps.",
        params: keyParam,
        body: Type.Object(
          {
            ...commonParams,
            configured_props: Type.Optional(Type.Object({}, { additionalProperties: true })),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({
            data: Type.Object({
              configurable_props: Type.Array(Type.Object({}, { additionalProperties: true })),
            }),
          }),
          ...errorResponses(404, 422),
        },
      },
    },
    async (request) => {
      const { key } = request.params as { key: string };
      const p = params<{ configured_props?: Record<string, unknown>; org_id?: string }>(request);
      const owner = actingOwner(request, p.org_id);
      const component = await catalog.resolve(visibleOwners(request), key);
      const dynamic = await app.fount.dynamicProps.compute({
        ownerId: owner,
        accountOwners: visibleOwners(request),
        component,
        values: p.configured_props ?? {},
      });
      return { data: { configurable_props: configurablePropList([...component.meta.props, ...dynamic]) } };
    },
  );

  app.post(
    "/components/:key/props/:prop/options",
    {
      schema: {
        tags,
        summary: "Options of a prop whose options come from a method (extension)",
        description:
          "Runs the prop's async options({page, prevContext, query, ...configured_props}) in the caller's sandbox.",
        params: Type.Object({
          key: keyParam.properties.key,
          // Any name a component gives a prop (an object key): it is only looked up, never spliced in.
          prop: Type.String({ minLength: 1, maxLength: 256 }),
        }),
        body: Type.Object(
          {
            ...commonParams,
            page: Type.Optional(Type.Integer({ minimum: 0, maximum: 100000 })),
            prev_context: Type.Optional(Type.Unknown()),
            query: Type.Optional(Type.String({ maxLength: 1024 })),
            configured_props: Type.Optional(Type.Object({}, { additionalProperties: true })),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({
            data: Type.Object({
              options: Type.Array(Type.Unknown()),
              context: Type.Optional(Type.Unknown()),
            }),
          }),
          ...errorResponses(404, 422),
        },
      },
    },
    async (request) => {
      const { key, prop } = request.params as { key: string; prop: string };
      const p = params<{
        page?: number;
        prev_context?: unknown;
        query?: string;
        configured_props?: Record<string, unknown>;
        org_id?: string;
      }>(request);
      const owner = actingOwner(request, p.org_id);
      const component = await catalog.resolve(visibleOwners(request), key);
      const meta = component.meta.props.find((x) => x.name === prop);
      // A prop the component does not declare may be a dynamic one; the sandbox computes them to find it.
      if (!meta && !component.meta.additionalProps) throw notFound("Prop", prop);
      if (meta && meta.options !== "dynamic") {
        return { data: { options: Array.isArray(meta.options) ? meta.options : [] } };
      }
      const { built } = await catalog.load(component.id, owner);
      const configured = p.configured_props ?? {};
      const appProps: Record<string, unknown> = {};
      for (const x of component.meta.props) {
        if (x.type !== "app") continue;
        const ref = (configured[x.name] as { authProvisionId?: string } | undefined)?.authProvisionId;
        const account = ref ? await app.fount.store.getAppAccount(ref) : undefined;
        if (ref && (!account || !visibleOwners(request).includes(account.ownerId)))
          throw notFound("App account", ref);
        appProps[x.name] = {
          app: x.app ?? x.name,
          $auth: account ? JSON.parse(app.fount.secrets.open(account.credentialsSealed)) : {},
        };
      }
      const result = await executor.invoke({
        ownerId: owner,
        sourceId: `options_${component.id}`,
        component: built,
        props: { ...configured, ...appProps },
        dbProps: [],
        httpProps: [],
        // Values of dynamic props are on `this` as well, for an additionalProps() that depends on them.
        dynamicProps: Object.keys(configured)
          .filter((name) => !component.meta.props.some((x) => x.name === name))
          .map((name) => ({ name, type: "any" })),
        db: {},
        dbVersion: 0,
        invocation: {
          kind: "options",
          prop,
          args: { ...configured, page: p.page ?? 0, prevContext: p.prev_context, query: p.query },
        },
        timeoutMs: app.fount.config.invocationTimeoutMs,
      });
      if (result.error) {
        if (!meta && result.error.code === "invalid_parameter") throw notFound("Prop", prop);
        throw new AppError(
          "component_invalid",
          `The options method of ${prop} failed: ${result.error.message}`,
          {
            details: { prop, code: result.error.code, message: result.error.message },
          },
        );
      }
      const value = result.returnValue as unknown;
      if (Array.isArray(value)) return { data: { options: value } };
      if (value && typeof value === "object" && Array.isArray((value as { options?: unknown }).options)) {
        const v = value as { options: unknown[]; context?: unknown };
        return { data: { options: v.options, context: v.context } };
      }
      return { data: { options: [] } };
    },
  );
}
