/** `GET /v1/components/registry`: every published component (newest version of each key), for pickers. */
import type { FastifyInstance } from "fastify";
import { Type } from "typebox";
import { registryOwner } from "../../domain/components.ts";
import { errorResponses } from "../conventions.ts";

const entrySchema = Type.Object({
  id: Type.String(),
  key: Type.String(),
  name: Type.String(),
  version: Type.String(),
  description: Type.Union([Type.String(), Type.Null()]),
});

export async function registryListRoutes(app: FastifyInstance): Promise<void> {
  app.get(
    "/components/registry",
    {
      schema: {
        tags: ["components"],
        summary: "List the registry's components (the newest version of each key), by key",
        description:
          "A Fount extension. `q` keeps those whose key, name or description contains it (any case).",
        querystring: Type.Object(
          { q: Type.Optional(Type.String({ maxLength: 200 })) },
          { additionalProperties: false },
        ),
        response: { 200: Type.Object({ data: Type.Array(entrySchema) }), ...errorResponses() },
      },
    },
    async (request) => {
      const q = ((request.query as { q?: string }).q ?? "").trim().toLowerCase();
      const all = await app.fount.store.listNewestComponents(registryOwner);
      const entries = all.map((c) => ({
        id: c.id,
        key: c.key ?? "",
        name: c.name,
        version: c.version,
        description: c.meta.description ?? null,
      }));
      return {
        data: q
          ? entries.filter((e) => `${e.key}\n${e.name}\n${e.description ?? ""}`.toLowerCase().includes(q))
          : entries,
      };
    },
  );
}
