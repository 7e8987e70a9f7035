/**
 * New source: pick a registry component (searchable) or write, paste or upload code in the editor, fill
 * in its props, deploy. Each step hands focus to the heading of the next one.
 */
import { useState } from "preact/hooks";
import { ApiError, api, withOrg } from "../api.ts";
import { type CodeError, CodeField } from "../code-field.tsx";
import { focusHeadingSoon } from "../focus.ts";
import { initialValues, type PropSpec, PropsForm, type Values } from "../props-form.tsx";
import { navigate } from "../router.ts";
import { ErrorNote, Markdown, Title, useLoad } from "../ui.tsx";

/** The place a 422 build error gives (`details.line`, `details.column`, 1-based), if it gives one. */
function codeErrorOf(error: unknown): CodeError | undefined {
  if (!(error instanceof ApiError) || typeof error.details.line !== "number") return undefined;
  const { line, column, message } = error.details;
  return {
    line,
    column: typeof column === "number" ? column : undefined,
    message: typeof message === "string" ? message : error.message,
  };
}

interface RegistryEntry {
  id: string;
  key: string;
  name: string;
  version: string;
  description: string | null;
}

interface Component {
  id: string;
  key: string | null;
  name: string;
  description: string | null;
  configurable_props: PropSpec[];
}

export function NewSourcePage({ orgId }: { orgId: string | undefined }) {
  const [query, setQuery] = useState("");
  const [component, setComponent] = useState<Component | undefined>();
  const [values, setValues] = useState<Values>({});
  const [name, setName] = useState("");
  const [error, setError] = useState<ApiError | Error | undefined>();
  const [code, setCode] = useState("");
  const [busy, setBusy] = useState(false);
  const [fromRegistry, setFromRegistry] = useState(false);
  const registry = useLoad(
    () =>
      api<{ data: RegistryEntry[] }>(
        "GET",
        `/v1/components/registry?limit=100&q=${encodeURIComponent(query)}`,
      ),
    [query],
  );

  function choose(c: Component) {
    focusHeadingSoon();
    setComponent(c);
    setValues(initialValues(c.configurable_props));
    setError(undefined);
  }
  async function pick(key: string) {
    setError(undefined);
    try {
      const r = await api<{ data: Component }>("GET", `/v1/components/registry/${encodeURIComponent(key)}`);
      setFromRegistry(true);
      choose(r.data);
    } catch (err) {
      setError(err as Error);
    }
  }
  async function loadCode(e: Event) {
    e.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      const r = await api<{ data: Component }>("POST", withOrg("/v1/components", orgId), {
        component_code: code,
      });
      setFromRegistry(false);
      choose(r.data);
    } catch (err) {
      setError(err as Error);
    } finally {
      setBusy(false);
    }
  }
  async function deploy(e: Event) {
    e.preventDefault();
    if (!component) return;
    setBusy(true);
    setError(undefined);
    try {
      const r = await api<{ data: { id: string } }>("POST", "/v1/sources", {
        // A registry component is deployed by key; pasted code was saved first and goes by its ID.
        ...(fromRegistry && component.key ? { key: component.key } : { component_id: component.id }),
        ...(name ? { name } : {}),
        configured_props: values,
        ...(orgId ? { org_id: orgId } : {}),
      });
      navigate(`/sources/${r.data.id}`);
    } catch (err) {
      setError(err as Error);
    } finally {
      setBusy(false);
    }
  }

  const fieldError =
    error instanceof ApiError && error.field ? { field: error.field, message: error.message } : undefined;
  const propNames = new Set(component?.configurable_props.map((p) => p.name) ?? []);
  const generalError =
    fieldError && (propNames.has(fieldError.field) || fieldError.field === "name") ? undefined : error;

  const codeError = codeErrorOf(error);
  if (component) {
    return (
      <>
        <Title text={`New source: ${component.name}`} />
        {component.description && <Markdown class="description" text={component.description} />}
        <form onSubmit={deploy} class="form" noValidate>
          <div class="field">
            <label for="source-name">Source name (optional)</label>
            <input
              id="source-name"
              value={name}
              onInput={(e) => setName(e.currentTarget.value)}
              aria-invalid={fieldError?.field === "name" ? true : undefined}
              aria-describedby={fieldError?.field === "name" ? "source-name-error" : undefined}
            />
            {fieldError?.field === "name" && (
              <p class="error" id="source-name-error" role="alert">
                {fieldError.message}
              </p>
            )}
          </div>
          <PropsForm
            props={component.configurable_props}
            values={values}
            onChange={setValues}
            fieldError={fieldError}
            componentRef={component.key ?? component.id}
            orgId={orgId}
          />
          <ErrorNote error={generalError} />
          <div class="actions">
            <button type="submit" disabled={busy}>
              Deploy
            </button>
            <button
              type="button"
              class="secondary"
              onClick={() => {
                focusHeadingSoon();
                setComponent(undefined);
              }}
            >
              Choose another component
            </button>
          </div>
        </form>
      </>
    );
  }

  return (
    <>
      <Title text="New source" />
      <section aria-labelledby="registry-heading">
        <h2 id="registry-heading">From the registry</h2>
        <label for="registry-search">Search components</label>
        <input
          id="registry-search"
          type="search"
          value={query}
          onInput={(e) => setQuery(e.currentTarget.value)}
        />
        <ErrorNote error={registry.error} />
        <ul class="cards" aria-label="Registry components">
          {(registry.value?.data ?? []).map((c) => (
            <li key={c.key}>
              <h3>{c.name}</h3>
              <p class="muted">
                {c.key} · {c.version}
              </p>
              {c.description && <Markdown text={c.description} />}
              <button type="button" onClick={() => pick(c.key)} aria-label={`Use ${c.name}`}>
                Use
              </button>
            </li>
          ))}
        </ul>
        {registry.value?.data.length === 0 && <p>No component matches.</p>}
      </section>
      <section aria-labelledby="code-heading">
        <h2 id="code-heading">From code</h2>
        <form onSubmit={loadCode} class="form">
          <CodeField
            id="component-code"
            label="Component code"
            value={code}
            onValue={setCode}
            error={codeError}
            upload={{ label: "Or upload a file", accept: ".js,.mjs,.cjs,.ts" }}
          />
          <ErrorNote
            error={
              codeError && error instanceof ApiError && error.details.message
                ? `Line ${codeError.line}${codeError.column ? `, column ${codeError.column}` : ""}: ${codeError.message}`
                : error
            }
          />
          <div class="actions">
            <button type="submit" disabled={busy || code.trim() === ""}>
              Continue with this code
            </button>
          </div>
        </form>
      </section>
    </>
  );
}
