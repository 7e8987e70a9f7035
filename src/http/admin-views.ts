/**
 * What the admin API shows of a user and of an organization, which `fount admin …` prints too: apart
 * from the routes, so that the command line renders them without loading Fastify and the registry.
 */
import type { Org, User } from "../domain/types.ts";

export function renderUser(u: User): Record<string, unknown> {
  return {
    id: u.id,
    username: u.username,
    email: u.email,
    plan: u.plan,
    is_admin: u.isAdmin,
    created_at: u.createdAt,
  };
}

export function renderOrg(o: Org): Record<string, unknown> {
  return {
    id: o.id,
    orgname: o.orgname,
    name: o.name,
    email: o.email,
    owner_id: o.ownerId,
    created_at: o.createdAt,
  };
}
