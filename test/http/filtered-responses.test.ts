/**
 * `include`/`exclude` on every route that takes them, with field lists that keep nothing, keep one field
 * or drop the ID: never a 500 (a response schema with required fields made the serializer throw).
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { adminKey, startServer, type TestServer } from "../helpers.ts";
import { ensureAll, makerContext, operations, ownValues, send, toRequest, unique } from "./openapi-walk.ts";

let server: TestServer;
before(async () => {
  server = await startServer();
});
after(() => server.close());

test("include and exclude never make a route fail, whatever fields they name", async () => {
  const ops = await operations(server);
  const owner = makerContext(server, ops, await server.createUser(unique("filter")));
  await ensureAll(owner, ops);
  let checked = 0;
  for (const op of ops) {
    if (op.streaming || op.method === "DELETE") continue;
    if (!op.params.some((p) => p.name === "include")) continue;
    const values = await ownValues(owner, op);
    if (!values) continue;
    const filters: Array<Record<string, string>> = [
      { include: "nothing" },
      { include: "name" },
      { exclude: "id" },
      { include: "0" },
    ];
    for (const query of filters) {
      const req = toRequest(op, values, op.hasBody ? { body: query } : { query });
      const res = await send(server, op, op.admin ? adminKey : owner.user.key, req);
      assert.ok(
        res.status < 500,
        `${op.label} ${JSON.stringify(query)} → ${res.status} ${res.text.slice(0, 200)}`,
      );
      checked++;
    }
  }
  assert.ok(checked > 40, `routes with include were found (${checked} requests)`);
});
