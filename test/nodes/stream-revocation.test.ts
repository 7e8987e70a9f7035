/**
 * A revocation made through one node ends the SSE streams it affects on the other nodes at once: two
 * servers, each its own node, on one PostgreSQL schema. The streams' periodic check is put an hour away
 * on the node that holds them, so only the revocation's message on the cluster channel can end them.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { fetch as undiciFetch } from "undici";
import { streamHubOf } from "../../src/http/routes/stream.ts";
import type { TestServer } from "../helpers.ts";
import { startNodes as startClusterNodes } from "./nodes.ts";

/** Two servers on one fresh schema, each its own node. */
async function startNodes(): Promise<[TestServer, TestServer]> {
  const [a, b] = await startClusterNodes(2, "revoker");
  return [a!, b!];
}

const probeCode = `export default {
  name: "revocation-probe",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  run(e) { this.$emit(e.body ?? {}, { summary: "x" }); },
};
`;

/** An open stream: `ended` resolves with the milliseconds from `since()` to the end of its body. */
async function openStream(url: string, key: string) {
  const controller = new AbortController();
  const res = await undiciFetch(url, {
    headers: { authorization: `Bearer ${key}` },
    signal: controller.signal,
  });
  assert.equal(res.status, 200);
  const reader = res.body!.getReader();
  let text = "";
  const decoder = new TextDecoder();
  const read = async (until: (t: string) => boolean) => {
    while (!until(text)) {
      const { value, done } = await reader.read();
      if (done) return true;
      text += decoder.decode(value, { stream: true });
    }
    return false;
  };
  // Open once its preamble arrived.
  await read((t) => t.includes("\n\n"));
  let from = 0;
  return {
    since: () => {
      from = Date.now();
    },
    /** Resolves with how long after `since()` the body ended; rejects after 30 s. */
    ended: async () => {
      const timer = setTimeout(() => controller.abort(), 30_000);
      try {
        await read(() => false);
        return Date.now() - from;
      } finally {
        clearTimeout(timer);
      }
    },
    close: () => controller.abort(),
  };
}

test("a key revoked, or a member removed, through one node ends the streams they opened on another at once", async (t) => {
  const [a, b] = await startNodes();
  const hub = streamHubOf(b.built.services)!;
  // The periodic check out of reach: before, a stream on node B outlived a revocation through node A
  // until that check (10 s by default).
  hub.configure({ recheckMs: 3_600_000 });
  const fay = await a.createUser(`revoked-remote-${process.pid}`);
  const org = await a.api("POST", "/v1/admin/orgs", {
    body: {
      orgname: `revoked-org-${process.pid}`,
      owner_id: (await a.api("GET", "/v1/users/me")).body.data.id,
    },
  });
  assert.equal(org.status, 200, org.text);
  const orgId = org.body.data.id as string;
  assert.equal(
    (await a.api("POST", `/v1/admin/orgs/${orgId}/members`, { body: { user_id: fay.id } })).status,
    200,
  );
  const made = await a.api("POST", "/v1/sources", { body: { component_code: probeCode, org_id: orgId } });
  assert.equal(made.status, 200, made.text);
  const streamUrl = `${b.url}/sources/${made.body.data.id}/sse`;

  // An admin's revocation of a key names no user: every stream of the other node checks.
  const second = await a.api("POST", `/v1/admin/users/${fay.id}/keys`, { body: { name: "second" } });
  assert.equal(second.status, 200, second.text);
  const byKey = await openStream(streamUrl, second.body.data.api_key);
  const keyEnded = byKey.ended();
  byKey.since();
  assert.equal((await a.api("DELETE", `/v1/admin/keys/${second.body.data.id}`)).status, 200);
  const afterKey = await keyEnded;
  assert.ok(afterKey < 8_000, `the stream ended ${afterKey} ms after the revocation`);

  // A member's removal names the user: that user's streams on the other node check.
  const byMember = await openStream(streamUrl, fay.key);
  const memberEnded = byMember.ended();
  byMember.since();
  const left = await a.api("DELETE", `/v1/admin/orgs/${orgId}/members?user_id=${fay.id}`);
  assert.equal(left.status, 200, left.text);
  const afterMember = await memberEnded;
  assert.ok(afterMember < 8_000, `the stream ended ${afterMember} ms after the removal`);
  t.diagnostic(`ended ${afterKey} ms after the key's revocation, ${afterMember} ms after the removal`);
  // The client's reconnection is refused.
  assert.equal((await b.api("GET", `/sources/${made.body.data.id}/sse`, { key: fay.key })).status, 404);
});
