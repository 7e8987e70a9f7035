/** `npm run build:console` (and `prepare`, so `npm ci` runs it): bundles the web console into dist/console. */
import { buildConsole, consoleOutDir } from "../src/http/console-assets.ts";

await buildConsole();
console.log(`console built into ${consoleOutDir}`);
