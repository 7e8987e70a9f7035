// Runs before `npm start` and `npm test` (prestart, pretest) and fails early, with what to do, when the
// Node running npm scripts is older than the server needs (node:sqlite, --permission and type stripping).
// Plain JavaScript, so that it gets to say so on any Node.
import { atLeast, bundledNode, minimumServerNode } from "../bin/node-runtime.mjs";

if (!atLeast(process.version)) {
  const bundled = bundledNode();
  const platform = `${process.platform}-${process.arch}`;
  const hint =
    bundled === undefined
      ? `Fount brings no Node for ${platform} (it does for Linux and macOS on x64 and arm64); install Node.js ${minimumServerNode} or newer and put it first on the PATH.`
      : bundled.path === undefined
        ? `Run \`npm ci\` in the Fount checkout: it installs Node from the npm package ${bundled.packageName}, which npm scripts then use.`
        : `Run it through npm (npm start, npm test), which uses the Node of ${bundled.packageName} (${bundled.path}).`;
  console.error(
    `Fount needs Node.js ${minimumServerNode} or newer; this is ${process.version} (${process.execPath}).\n${hint}`,
  );
  process.exit(1);
}
