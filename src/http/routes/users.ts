/** `GET /v1/users/me`: the caller, its organizations and the quota fields of its plan. */
import type { FastifyInstance } from "fastify";
import { Type } from "typebox";
import { planLimits, usageDay } from "../../domain/accounts/quotas.ts";
import { commonParams, errorResponses, principal } from "../conventions.ts";

const orgSchema = Type.Object({
  id: Type.String(),
  name: Type.String(),
  orgname: Type.String(),
  email: Type.String(),
});

const userSchema = Type.Object(
  {
    id: Type.String(),
    username: Type.String(),
    email: Type.String(),
    orgs: Type.Array(orgSchema),
    daily_compute_time_quota: Type.Optional(Type.Integer()),
    daily_compute_time_used: Type.Optional(Type.Integer()),
    daily_invocations_quota: Type.Optional(Type.Integer()),
    daily_invocations_used: Type.Optional(Type.Integer()),
    daily_stored_bytes_quota: Type.Optional(Type.Integer()),
    daily_stored_bytes_used: Type.Optional(Type.Integer()),
    billing_period_start_ts: Type.Optional(Type.Integer()),
    billing_period_end_ts: Type.Optional(Type.Integer()),
    billing_period_invocations: Type.Optional(Type.Integer()),
  },
  { description: "User" },
);

export async function userRoutes(app: FastifyInstance): Promise<void> {
  app.get(
    "/users/me",
    {
      schema: {
        tags: ["users"],
        summary: "The authenticated user",
        querystring: Type.Object(commonParams, { additionalProperties: false }),
        response: { 200: Type.Object({ data: Type.Partial(userSchema) }), ...errorResponses(404) },
      },
    },
    async (request) => {
      const { user } = principal(request);
      const { store, clock, config } = app.fount;
      const orgs = await store.listOrgsOfUser(user.id);
      const now = clock.now();
      const base = {
        id: user.id,
        username: user.username,
        email: user.email,
        orgs: orgs.map((o) => ({ id: o.id, name: o.name, orgname: o.orgname, email: o.email })),
      };
      if (user.plan === "free") {
        const usage = await store.getUsage(user.id, usageDay(now));
        const limits = planLimits(config);
        return {
          data: {
            ...base,
            daily_compute_time_quota: limits.dailyComputeMs,
            daily_compute_time_used: usage.computeMs,
            daily_invocations_quota: limits.dailyInvocations,
            daily_invocations_used: usage.invocations,
            // Fount's own (no Pipedream field): the JSON its events and their delivery copies stored today.
            daily_stored_bytes_quota: limits.dailyStoredBytes,
            daily_stored_bytes_used: usage.storedBytes,
          },
        };
      }
      // Paid accounts: the billing period is the current calendar month (UTC).
      const date = new Date(now);
      const start = Date.UTC(date.getUTCFullYear(), date.getUTCMonth(), 1);
      const end = Date.UTC(date.getUTCFullYear(), date.getUTCMonth() + 1, 1);
      let invocations = 0;
      for (let day = start; day < Math.min(end, now + 1); day += 86_400_000) {
        invocations += (await store.getUsage(user.id, usageDay(day))).invocations;
      }
      return {
        data: {
          ...base,
          billing_period_start_ts: start / 1000,
          billing_period_end_ts: end / 1000,
          billing_period_invocations: invocations,
        },
      };
    },
  );
}
