// Fails early when npm scripts run on a Node older than the pinned 24 LTS:
// node:sqlite, --permission and type stripping all need it.
const major = Number(process.versions.node.split(".")[0]);
if (major < 24) {
  console.error(
    `Fount needs Node.js 24 or newer; this is ${process.version} (${process.execPath}).\n` +
      "Run it through npm (npm start, npm test), which uses the Node pinned in package.json, after npm ci.",
  );
  process.exit(1);
}
