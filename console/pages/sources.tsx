/** The source list: name, component, state, last event and last error, a page at a time. */
import { useState } from "preact/hooks";
import { api, formatTime } from "../api.ts";
import { ErrorNote, Title, useLoad } from "../ui.tsx";

interface SourceRow {
  id: string;
  name: string;
  component_key: string | null;
  component_id: string;
  active: boolean;
  created_at: number;
}

interface Page<T> {
  page_info: { total_count: number; end_cursor: string | null };
  data: T[];
}

const pageSize = 25;

export function SourcesPage({ orgId }: { orgId: string | undefined }) {
  const [cursors, setCursors] = useState<string[]>([]);
  const after = cursors[cursors.length - 1];
  const { value, error } = useLoad(
    () =>
      api<Page<SourceRow>>(
        "GET",
        `${orgId ? `/v1/orgs/${orgId}/sources` : "/v1/users/me/sources"}?limit=${pageSize}${after ? `&after=${encodeURIComponent(after)}` : ""}`,
      ),
    [orgId, after],
  );
  return (
    <>
      <Title text="Sources" />
      <p>
        <a class="button" href="#/new">
          New source
        </a>
      </p>
      <ErrorNote error={error} />
      {value && value.data.length === 0 && <p>No sources yet.</p>}
      {value && value.data.length > 0 && (
        <div class="scroll">
          <table>
            <caption>
              {value.page_info.total_count} source{value.page_info.total_count === 1 ? "" : "s"}
            </caption>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Component</th>
                <th scope="col">State</th>
                <th scope="col">Last event</th>
                <th scope="col">Last error</th>
              </tr>
            </thead>
            <tbody>
              {value.data.map((s) => (
                <Row key={s.id} source={s} />
              ))}
            </tbody>
          </table>
        </div>
      )}
      <nav aria-label="Pages" class="pager">
        {cursors.length > 0 && (
          <button type="button" onClick={() => setCursors(cursors.slice(0, -1))}>
            Previous page
          </button>
        )}
        {value && value.data.length === pageSize && value.page_info.end_cursor && (
          <button type="button" onClick={() => setCursors([...cursors, value.page_info.end_cursor!])}>
            Next page
          </button>
        )}
      </nav>
    </>
  );
}

function Row({ source }: { source: SourceRow }) {
  // Each row asks for its newest event and error; only the rows of the page shown are asked for.
  const { value } = useLoad(async () => {
    const [events, errors] = await Promise.all([
      api<Page<{ indexed_at_ms: number }>>("GET", `/v1/sources/${source.id}/event_summaries?limit=1`),
      api<Page<{ indexed_at_ms: number }>>(
        "GET",
        `/v1/sources/${source.id}/event_summaries?limit=1&event_name=%24errors`,
      ),
    ]);
    return { event: events.data[0]?.indexed_at_ms, error: errors.data[0]?.indexed_at_ms };
  }, [source.id]);
  return (
    <tr>
      <th scope="row">
        <a href={`#/sources/${source.id}`}>{source.name}</a>
      </th>
      <td>{source.component_key ?? source.component_id}</td>
      <td>{source.active ? "Active" : "Paused"}</td>
      <td>{value ? formatTime(value.event, "ms") : "…"}</td>
      <td>{value ? formatTime(value.error, "ms") : "…"}</td>
    </tr>
  );
}
