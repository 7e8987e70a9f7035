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
                <th scope="col">Events, last hour</th>
                <th scope="col">Errors, last hour</th>
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

/** Bins of the last hour's chart: 12 of 5 minutes. */
const bins = 12;
const binMs = 5 * 60_000;
/** Events a channel keeps (the API's limit too), so a count at this number means "at least". */
const kept = 100;

function Row({ source }: { source: SourceRow }) {
  // Each row asks for the times of its kept events and errors (times only: `include`); only the rows of
  // the page shown are asked for.
  const { value } = useLoad(async () => {
    const times = `limit=${kept}&include=indexed_at_ms`;
    const [events, errors] = await Promise.all([
      api<Page<{ indexed_at_ms: number }>>("GET", `/v1/sources/${source.id}/event_summaries?${times}`),
      api<Page<{ indexed_at_ms: number }>>(
        "GET",
        `/v1/sources/${source.id}/event_summaries?${times}&event_name=%24errors`,
      ),
    ]);
    return {
      events: events.data.map((e) => e.indexed_at_ms),
      errors: errors.data.map((e) => e.indexed_at_ms),
    };
  }, [source.id]);
  const hourAgo = Date.now() - bins * binMs;
  const errorsInHour = value?.errors.filter((t) => t >= hourAgo).length ?? 0;
  return (
    <tr>
      <th scope="row">
        <a href={`#/sources/${source.id}`}>{source.name}</a>
      </th>
      <td>{source.component_key ?? source.component_id}</td>
      <td>{source.active ? "Active" : "Paused"}</td>
      <td>{value ? formatTime(value.events[0], "ms") : "…"}</td>
      <td>{value ? <HourChart times={value.events} /> : "…"}</td>
      <td>{value ? (errorsInHour === kept ? `${kept}+` : String(errorsInHour)) : "…"}</td>
    </tr>
  );
}

/** Events per 5 minutes over the last hour, as bars; the label says the total for screen readers. */
function HourChart({ times }: { times: number[] }) {
  const now = Date.now();
  const counts = new Array<number>(bins).fill(0);
  for (const t of times) {
    const bin = Math.floor((now - t) / binMs);
    if (bin >= 0 && bin < bins) counts[bins - 1 - bin]! += 1;
  }
  const total = counts.reduce((a, b) => a + b, 0);
  const label = `${total === kept ? `${kept}+` : total} in the last hour`;
  const max = Math.max(1, ...counts);
  return (
    <span class="chart">
      <svg width={bins * 6} height={20} viewBox={`0 0 ${bins * 6} 20`} role="img" aria-label={label}>
        {counts.map((c, i) => {
          const h = c === 0 ? 1 : Math.max(2, Math.round((c / max) * 20));
          return (
            <rect
              key={String(i)}
              x={i * 6}
              y={20 - h}
              width={5}
              height={h}
              fill={c ? "#0b5cad" : "#d0d7de"}
            />
          );
        })}
      </svg>{" "}
      <span class="muted">{label}</span>
    </span>
  );
}
