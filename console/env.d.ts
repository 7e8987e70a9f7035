/** esbuild bundles imported stylesheets into app.css; to the type checker they are plain modules. */
declare module "*.css";
