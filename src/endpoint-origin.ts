/**
 * Where source endpoints are served: on an origin of their own, never the console's and the API's, so
 * that a page a source answers never runs with a signed-in user's authority (docs/isolation.md, "What a
 * source can reach in a browser"). FOUNT_ENDPOINT_URL is a base URL (endpoints at `<base>/e/<id>`) or a
 * pattern whose host starts with the label `{id}` (`https://{id}.hooks.example.com`, the endpoint ID read
 * from the Host); unset, it is PUBLIC_URL on FOUNT_ENDPOINT_PORT. config.ts checks the setting with these
 * functions; the runner builds endpoint URLs and the HTTP server recognises endpoint hosts with them.
 */

/** The placeholder of a host pattern: the whole first label of the host. */
export const idPlaceholder = "{id}";

/** The base URL of endpoints when FOUNT_ENDPOINT_URL is unset: PUBLIC_URL's scheme and host on `port`. */
export function derivedEndpointUrl(publicUrl: string, port: number): string {
  const url = new URL(publicUrl);
  url.port = String(port);
  // `URL` drops a port that is the scheme's default; the origin is what is left.
  return url.origin;
}

/**
 * FOUNT_ENDPOINT_URL checked and without a trailing slash; throws an Error whose message says what is
 * wrong. It must be an http(s) origin without a path, query or credentials, `{id}` at most once and
 * only as the host's first label, and never the origin of `publicUrl` (nor a pattern `publicUrl`'s host
 * fits), since endpoints sharing the console's origin are what this setting exists to prevent.
 */
export function checkEndpointUrl(raw: string, publicUrl: string): string {
  const value = raw.trim().replace(/\/+$/, "");
  const pattern = value.includes(idPlaceholder);
  if (pattern && !/^https?:\/\/\{id\}\.[^{}]+$/i.test(value)) {
    throw new Error(
      `"${raw}": {id} may only be the first label of the host, once (https://{id}.hooks.example.com)`,
    );
  }
  let url: URL;
  try {
    // A stand-in ID makes the pattern a URL to check.
    url = new URL(pattern ? value.replace(idPlaceholder, "x0") : value);
  } catch {
    throw new Error(`"${raw}" is not a URL (https://hooks.example.com or https://{id}.hooks.example.com)`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:")
    throw new Error(`"${raw}" must start with http:// or https://`);
  if (url.pathname !== "/" || url.search || url.hash || url.username || url.password)
    throw new Error(`"${raw}" must be a scheme and host (and port) only, with no path, query or credentials`);
  const consoleUrl = new URL(publicUrl);
  // A trailing dot (a fully qualified name) names the same host: compared without it.
  const sameOrigin = pattern
    ? new EndpointHosts(value, publicUrl).match(consoleUrl.host) !== undefined
    : url.protocol === consoleUrl.protocol &&
      url.port === consoleUrl.port &&
      withoutRootDot(url.hostname) === withoutRootDot(consoleUrl.hostname);
  if (sameOrigin) {
    throw new Error(
      `"${raw}" is the origin of PUBLIC_URL (${publicUrl}): source endpoints need an origin of their own (docs/operations.md)`,
    );
  }
  // Host names are case-insensitive; the pattern has nothing else.
  return pattern ? value.toLowerCase() : url.origin;
}

/** The URL of the endpoint `id` under the setting (a base URL, or a pattern). */
export function endpointUrlOf(setting: string, id: string): string {
  return setting.includes(idPlaceholder) ? setting.replace(idPlaceholder, id) : `${setting}/e/${id}`;
}

/** The setting as a CSP source expression: its origin, or with a pattern every host of it (`https://*.hooks.example.com`). */
export function endpointSource(setting: string): string {
  return setting.replace(idPlaceholder, "*");
}

/** Where the setting's endpoints are, for messages: `<base>/e/{id}`, or the pattern. */
export function endpointPlace(setting: string): string {
  return endpointUrlOf(setting, idPlaceholder);
}

/**
 * Recognises the Host headers of the endpoint origin. A host name other than the console's is compared
 * without its port (a proxy may drop or change it); one the console shares (endpoints on another port of
 * it) is compared with its port, the scheme's default port counting as none.
 */
export class EndpointHosts {
  readonly setting: string;
  readonly publicUrl: string;
  /** The pattern's host after `{id}` (`.hooks.example.com`), or the base's host; lower case. */
  readonly #host: string;
  readonly #pattern: boolean;
  readonly #withPort: boolean;
  readonly #defaultPort: string;
  /**
   * Whether a component's answer may leave the sandbox (`http.respond({sandbox: false})`): only where no
   * script on the endpoint origin can set or shadow the console's session cookie, nor reach another
   * endpoint's pages. That needs both origins on https (the session cookie is then `__Host-`: set by the
   * console's own host only, always at `Path=/`), on different host names (cookies are not scoped by
   * port), and an origin per endpoint (an `{id}` pattern): on a shared endpoint host one tenant's script
   * could read another's pages and cookies, or register a service worker over them.
   */
  readonly scriptsMayRun: boolean;

  constructor(setting: string, publicUrl: string) {
    this.setting = setting;
    this.publicUrl = publicUrl;
    this.#pattern = setting.includes(idPlaceholder);
    const url = new URL(this.#pattern ? setting.replace(idPlaceholder, "x0") : setting);
    const consoleUrl = new URL(publicUrl);
    const hostname = withoutRootDot(url.hostname);
    const sameName = hostname === withoutRootDot(consoleUrl.hostname);
    this.#withPort = !this.#pattern && sameName;
    this.scriptsMayRun =
      this.#pattern && url.protocol === "https:" && consoleUrl.protocol === "https:" && !sameName;
    this.#defaultPort = url.protocol === "https:" ? ":443" : ":80";
    const host = this.#withPort && url.port ? `${hostname}:${url.port}` : hostname;
    this.#host = this.#pattern ? host.slice(2) : host;
  }

  /**
   * The `Path` a cookie set by endpoint `id`'s answer is kept under (http/fount-cookies.ts,
   * `componentCookie`): the endpoint's own path, `<base path>/e/<id>` (which a browser matches for it and
   * what is under it only), wherever endpoints share a host name: with each other under a base URL (one
   * tenant's cookie would otherwise go to every other tenant's endpoint, and be read there), and with the
   * console on another port of its name (and reach the console: a few large ones made every console
   * request too large to answer). Undefined with a pattern: each endpoint's host is its own, and its
   * cookies, host-only, reach no other.
   */
  cookieScope(id: string): string | undefined {
    return this.#pattern ? undefined : new URL(endpointUrlOf(this.setting, id)).pathname;
  }

  /**
   * For a Host of the endpoint origin: the endpoint ID it names (a pattern; the ID is not checked
   * further), or "" (a base URL: the ID is in the path). Undefined for any other host.
   */
  match(hostHeader: string | undefined): string | undefined {
    if (!hostHeader) return undefined;
    let host = hostHeader.toLowerCase();
    let port = "";
    const colon = host.lastIndexOf(":");
    // An IPv6 literal's colons are inside its brackets.
    if (colon > host.lastIndexOf("]")) {
      port = host.slice(colon);
      host = host.slice(0, colon);
    }
    // `hooks.example.com.` is the same host as `hooks.example.com` (a browser keeps the dot in Host).
    host = withoutRootDot(host);
    if (this.#withPort && port !== this.#defaultPort) host += port;
    if (!this.#pattern) return host === this.#host ? "" : undefined;
    return host.length > this.#host.length && host.endsWith(this.#host)
      ? host.slice(0, -this.#host.length)
      : undefined;
  }
}

/** A host name without the trailing dot of a fully qualified name (`example.com.`): the same host. */
function withoutRootDot(hostname: string): string {
  return hostname.endsWith(".") ? hostname.slice(0, -1) : hostname;
}

/** The matcher of the current setting: rebuilt only when the setting or PUBLIC_URL changes (tests bind port 0). */
export function endpointHostsFor(setting: string, publicUrl: string, last?: EndpointHosts): EndpointHosts {
  return last && last.setting === setting && last.publicUrl === publicUrl
    ? last
    : new EndpointHosts(setting, publicUrl);
}
