/** A hash router: `#/sources/dc_…` and so on, so that the server serves one page for every view. */
import { useEffect, useState } from "preact/hooks";
import { focusHeadingSoon } from "./focus.ts";

export function currentRoute(): string {
  return location.hash.replace(/^#/, "") || "/";
}

export function useRoute(): string {
  const [route, setRoute] = useState(currentRoute());
  useEffect(() => {
    const update = () => {
      // The new page's heading takes focus once it renders (after its data loads, for some pages).
      focusHeadingSoon();
      setRoute(currentRoute());
    };
    addEventListener("hashchange", update);
    return () => removeEventListener("hashchange", update);
  }, []);
  return route;
}

export function navigate(route: string): void {
  location.hash = route;
}
