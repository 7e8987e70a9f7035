/**
 * How commands find the source or webhook a user names: its ID or name as the API takes them, else any
 * unique prefix of an ID or a name (`fount describe my` for `my-source`). A prefix that fits several is
 * an error listing them, so that nothing is done to a resource the user did not mean.
 */
import { type ApiClient, ApiError } from "./client.ts";
import { CliError } from "./command.ts";
import { printable } from "./output.ts";

/** What resolving needs to know of a source. */
export interface NamedSource {
  id: string;
  name_slug: string;
}

/** What resolving needs to know of a webhook. */
export interface NamedWebhook {
  id: string;
  name: string | null;
  url: string;
}

/** How many candidates an ambiguity error lists before "and N more". */
const listedCandidates = 8;

/**
 * The one item `ref` names among `items`: an exact key first, then a unique prefix of one. Throws a
 * CliError listing the candidates when several fit; undefined when none does.
 */
export function pickByPrefix<T>(
  items: T[],
  ref: string,
  keys: (item: T) => Array<string | null>,
  label: (item: T) => string,
  what: string,
): T | undefined {
  const exact = items.filter((item) => keys(item).includes(ref));
  if (exact.length === 1) return exact[0];
  const fits =
    exact.length > 1 ? exact : items.filter((item) => keys(item).some((k) => k?.startsWith(ref) === true));
  if (fits.length <= 1) return fits[0];
  // One line each, whatever the names hold: the message lists them a line apart.
  const shown = fits.slice(0, listedCandidates).map((item) => `  ${printable(label(item))}`);
  if (fits.length > listedCandidates) shown.push(`  … and ${fits.length - listedCandidates} more`);
  throw new CliError(
    `"${ref}" could be any of ${fits.length} ${what}s; give more of the name, or the ID:\n${shown.join("\n")}`,
    `ambiguous_${what}`,
  );
}

const isNotFound = (err: unknown) => err instanceof ApiError && err.status === 404;

/** The source named by `ref` (ID, name slug, or a unique prefix of either). */
export async function resolveSource<T extends NamedSource = NamedSource>(
  client: ApiClient,
  ref: string,
): Promise<T> {
  try {
    return (await client.get<{ data: T }>(`/v1/sources/${encodeURIComponent(ref)}`)).data;
  } catch (err) {
    if (!isNotFound(err)) throw err;
    const list = client.orgId
      ? `/v1/orgs/${encodeURIComponent(client.orgId)}/sources`
      : "/v1/users/me/sources";
    const found = pickByPrefix(
      await client.listAll<T>(list),
      ref,
      (s) => [s.id, s.name_slug],
      (s) => `${s.name_slug} (${s.id})`,
      "source",
    );
    if (found === undefined) throw err;
    return found;
  }
}

/** The webhook named by `ref`: its ID, its URL, its name, or a unique prefix of the ID or the name. */
export async function resolveWebhook(client: ApiClient, ref: string): Promise<NamedWebhook> {
  let notFound: unknown;
  if (/^wh_[A-Za-z0-9]+$/.test(ref)) {
    try {
      return (await client.get<{ data: NamedWebhook }>(`/v1/webhooks/${ref}`)).data;
    } catch (err) {
      if (!isNotFound(err)) throw err;
      notFound = err;
    }
  }
  const list = client.orgId
    ? `/v1/orgs/${encodeURIComponent(client.orgId)}/webhooks`
    : "/v1/users/me/webhooks";
  const trimmed = (url: string) => url.replace(/\/+$/, "");
  const found = pickByPrefix(
    await client.listAll<NamedWebhook>(list),
    /^https?:\/\//i.test(ref) ? trimmed(ref) : ref,
    (w) => [w.id, w.name, trimmed(w.url)],
    (w) => `${w.id}  ${w.url}${w.name ? `  (${w.name})` : ""}`,
    "webhook",
  );
  if (found === undefined) {
    throw (
      notFound ??
      new CliError(`No webhook of yours has the ID, URL or name "${ref}", or one starting so`, "not_found")
    );
  }
  return found;
}
