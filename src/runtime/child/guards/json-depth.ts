/**
 * How deeply JSON nests, measured without recursion. Deep nesting is refused or kept as text before it
 * reaches code that recurses over it: `JSON.stringify` of an object nested a few thousand levels throws
 * RangeError (the stack runs out), so a body like that would fail at commit instead of being stored.
 * Lives in `child/` because the executor's code, bundled from this folder alone, uses it too.
 */

/** Request bodies (API and source endpoints) nested deeper than this are not parsed as JSON. */
export const maxBodyDepth = 128;

/**
 * Emits, db values and options a component returns may nest deeper than a body (an emit commonly wraps
 * the request it got), but stay far below the depth where serializing runs out of stack (~3,000).
 */
export const maxValueDepth = 512;

const OPEN_BRACE = 0x7b;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACE = 0x7d;
const CLOSE_BRACKET = 0x5d;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/** Whether JSON text nests objects/arrays deeper than `limit` (brackets inside strings do not count). */
export function jsonTextTooDeep(text: string, limit: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === BACKSLASH) i++;
      else if (c === QUOTE) inString = false;
    } else if (c === QUOTE) inString = true;
    else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
      if (++depth > limit) return true;
    } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) depth--;
  }
  return false;
}
