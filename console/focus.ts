/**
 * Where keyboard focus goes when the page changes under it. A route change, or a step that replaces the
 * form the user was in (choosing a component, deploying), hands focus to the new page heading once it is
 * rendered, which may be after the page's data has loaded. And whenever the element that had focus is
 * removed (a row deleted, a button replaced), focus goes to the heading instead of dropping to the body,
 * where a keyboard or screen reader user would start over from the top.
 */
import type { RefObject } from "preact";
import { useLayoutEffect } from "preact/hooks";

/** Whether the next page heading that renders takes focus. The first one after loading the page does. */
let pending = true;

/** The next page heading to render takes focus (a route change, or a new step of a page). */
export function focusHeadingSoon(): void {
  pending = true;
}

/** For a page heading (tabindex -1): takes focus when a change asked for it. */
export function useHeadingFocus(ref: RefObject<HTMLElement | null>): void {
  // A layout effect: it runs before the removal watcher below looks, and before the next paint.
  useLayoutEffect(() => {
    if (!pending || !ref.current) return;
    pending = false;
    ref.current.focus();
  });
}

/** The heading that takes focus: the page's `h1`, or the sign-in form's heading. */
function heading(): HTMLElement | null {
  return document.querySelector<HTMLElement>("#main [data-page-heading]");
}

let watching = false;

/**
 * Watches for the focused element leaving the document (browsers then focus the body and send no
 * event): focus goes to the heading, or to the next one that renders when the page is still loading.
 */
export function watchFocusLoss(): void {
  if (watching) return;
  watching = true;
  let last: Element | null = null;
  document.addEventListener("focusin", (e) => {
    last = e.target as Element;
  });
  new MutationObserver(() => {
    if (!last || last.isConnected) return;
    const active = document.activeElement;
    if (active && active !== document.body) return;
    last = null;
    const target = heading();
    if (target) target.focus();
    else pending = true;
  }).observe(document.body, { childList: true, subtree: true });
}

/**
 * For a region that appears after an action (a secret shown once): it takes focus each time `shown`
 * changes to something, so that a screen reader reads it and the keyboard is next to its Copy button.
 */
export function useFocusOnShow(ref: RefObject<HTMLElement | null>, shown: unknown): void {
  useLayoutEffect(() => {
    if (shown) ref.current?.focus();
  }, [shown]);
}
