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
 * it is refused too, as the name a lenient parser would read).
 */
export function setsFountCookie(value: string): boolean {
  const eq = value.indexOf("=");
  const semicolon = value.indexOf(";");
  const end = eq === -1 || (semicolon !== -1 && semicolon < eq) ? semicolon : eq;
  return isFountCookieName(end === -1 ? value : value.slice(0, end));
}
