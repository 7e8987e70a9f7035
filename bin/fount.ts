/** The former entry, kept so that `node bin/fount.ts` still works; the CLI starts in fount.mjs. */
import "./fount.mjs";
