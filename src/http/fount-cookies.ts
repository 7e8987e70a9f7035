/**
 * Fount's own cookies (the console's session, `fount_session` or `__Host-fount_session`, and any later
 * one named `fount_…`) never reach component code and are never set by it: a request to a source
 * endpoint loses them before the component or the store sees it, and a component's answer loses any
 * `Set-Cookie` of such a name. Cookies are not scoped by port, and a sibling host may share them, so an
 * endpoint origin of its own does not keep them apart by itself (docs/isolation.md, "What a source can
 * reach in a browser"). One predicate decides for both directions.
 */

/** A cookie name of Fount's: `fount_…`, with or without a `__Host-` or `__Secure-` prefix, in any case. */
const fountCookieName = /^(__Host-|__Secure-)?fount_/i;

/** Whether `name` (as the browser sends or stores it, surrounding spaces allowed) is a cookie of Fount's. */
export function isFountCookieName(name: string): boolean {
  return fountCookieName.test(name.trimStart());
}

/**
 * A `Cookie` request header without Fount's cookies: unchanged when it holds none (the common case,
 * found without splitting), undefined when nothing else is left.
 */
export function withoutFountCookies(header: string): string | undefined {
  if (!/fount_/i.test(header)) return header;
  const kept = header.split(";").filter((pair) => {
    const eq = pair.indexOf("=");
    // A pair without `=` is a nameless cookie holding that value; as a name it would still read as ours.
    return !isFountCookieName(eq === -1 ? pair : pair.slice(0, eq));
  });
  return kept.length === 0 ? undefined : kept.join(";").trimStart();
}

/**
 * Whether a `Set-Cookie` value would set, replace or clear a cookie of Fount's. A browser reads one
 * cookie per value, named by what precedes the first `=` (a value without `=` names a nameless cookie;
 * it is refused too, as the name a lenient parser would read). A nameless cookie (`=fount_session=x`) is
 * sent as its value alone, which a server reads as a cookie of that name: refused when that is Fount's.
 */
export function setsFountCookie(value: string): boolean {
  const semicolon = value.indexOf(";");
  const pair = semicolon === -1 ? value : value.slice(0, semicolon);
  const eq = pair.indexOf("=");
  if (isFountCookieName(eq === -1 ? pair : pair.slice(0, eq))) return true;
  return eq !== -1 && pair.slice(0, eq).trim() === "" && isFountCookieName(pair.slice(eq + 1));
}

/**
 * A component's `Set-Cookie` value as it may leave, or undefined when it is refused. Refused: a cookie
 * of Fount's name, and a nameless one (no `=`, or nothing before it: a browser sends its value alone,
 * which a server reads as `name=value`, so `=fount_session=x` would arrive as Fount's cookie). What
 * leaves is host-only: every `Domain` attribute is dropped, so no cookie reaches a sibling or parent
 * host. With `scope` (the endpoint's path, wherever endpoints share a host name, with each other or with
 * the console, which its cookies would otherwise reach: `EndpointHosts.cookieScope`), every `Path` is replaced by one under
 * it: `scope` followed by the component's own path when that is longer than `/`, so what the component
 * scoped to a sub-path of its endpoint stays there. Everything else (`Max-Age`, `Secure`, …) is kept.
 */
export function componentCookie(value: string, scope?: string): string | undefined {
  if (setsFountCookie(value)) return undefined;
  const semicolon = value.indexOf(";");
  const pair = semicolon === -1 ? value : value.slice(0, semicolon);
  const eq = pair.indexOf("=");
  if (eq === -1 || pair.slice(0, eq).trim() === "") return undefined;
  // The common case, left as written: nothing to drop or rewrite.
  if (scope === undefined && !/domain/i.test(value.slice(eq))) return value;
  const kept = [pair];
  let path = "";
  for (const attribute of semicolon === -1 ? [] : value.slice(semicolon + 1).split(";")) {
    const attrEq = attribute.indexOf("=");
    const attrName = (attrEq === -1 ? attribute : attribute.slice(0, attrEq)).trim().toLowerCase();
    if (attrName === "domain" || attribute.trim() === "") continue;
    if (scope !== undefined && attrName === "path") {
      // A browser keeps the last Path; one that does not start with `/` stands for the default.
      const given = attrEq === -1 ? "" : attribute.slice(attrEq + 1).trim();
      path = given.startsWith("/") && given !== "/" ? given : "";
      continue;
    }
    kept.push(attribute.trim());
  }
  // A browser ignores a Path over 1024 bytes (and takes the request's directory): kept short, it holds.
  if (scope !== undefined) kept.push(`Path=${scope}${scope.length + path.length > 1024 ? "" : path}`);
  return kept.join("; ");
}

/** The `Set-Cookie` values of a component's answer as they may leave (`componentCookie`), refused ones left out. */
export function componentCookies(values: string | string[], scope?: string): string[] {
  const kept: string[] = [];
  for (const value of Array.isArray(values) ? values : [values]) {
    const cookie = componentCookie(value, scope);
    if (cookie !== undefined) kept.push(cookie);
  }
  return kept;
}
