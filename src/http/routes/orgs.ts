/** `GET /orgs/{org_id}` and its `/workspaces/{org_id}` alias (newer Pipedream clients say workspace). */
import type { FastifyInstance } from "fastify";
import { Type } from "typebox";
import { notFound } from "../../errors.ts";
import { actingOwner, commonParams, errorResponses } from "../conventions.ts";

const orgSchema = Type.Object(
  { id: Type.String(), orgname: Type.String(), name: Type.String(), email: Type.String() },
  { description: "Organization" },
);

export async function orgRoutes(app: FastifyInstance): Promise<void> {
  for (const prefix of ["orgs", "workspaces"] as const) {
    app.get(
      `/${prefix}/:org_id`,
      {
        schema: {
          tags: ["users"],
          summary:
            prefix === "orgs"
              ? "An organization the caller belongs to"
              : "An organization (Pipedream's workspace)",
          params: Type.Object({ org_id: Type.String({ pattern: "^o_[A-Za-z0-9]+$", maxLength: 64 }) }),
          querystring: Type.Object(commonParams, { additionalProperties: false }),
          response: { 200: Type.Object({ data: Type.Partial(orgSchema) }), ...errorResponses(404) },
        },
      },
      async (request) => {
        const { org_id } = request.params as { org_id: string };
        // Unknown and foreign organizations are both 404.
        const org = await app.fount.store.getOrg(actingOwner(request, org_id));
        if (!org) throw notFound("Organization", org_id);
        return { data: { id: org.id, orgname: org.orgname, name: org.name, email: org.email } };
      },
    );
  }
}
