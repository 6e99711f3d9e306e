// Bundles each app (assistant-ui, copilotkit) into OUT/<app>/ with esbuild: app.js, app.css
// (when the app imports CSS) and an index.html that loads them. No dev server: the tests
// serve OUT from a loopback port.
//   node build.mjs OUT
import { build } from "esbuild";
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";

const [out] = process.argv.slice(2);
if (!out) {
  console.error("usage: node build.mjs OUT");
  process.exit(2);
}
const here = new URL(".", import.meta.url).pathname;

const page = (title, css) => `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>${title}</title>
${css ? '<link rel="stylesheet" href="app.css">' : ""}
<style>
  body { font: 15px system-ui, sans-serif; margin: 0; }
  .thread { display: flex; flex-direction: column; height: 100vh; max-width: 50rem; margin: auto; }
  .messages { flex: 1; overflow-y: auto; padding: 1rem; }
  .message { margin: .5rem 0; padding: .5rem .75rem; border-radius: .5rem; }
  .message.user { background: #e8eefc; }
  .message.assistant { background: #f4f4f4; }
  .tool { font: 13px ui-monospace, monospace; border: 1px solid #ccc; padding: .25rem .5rem; }
  .composer { display: flex; gap: .5rem; padding: 1rem; }
  .composer textarea { flex: 1; }
</style>
</head>
<body>
<div id="root"></div>
<script src="app.js"></script>
</body>
</html>
`;

const apps = [
  { name: "assistant-ui", title: "assistant-ui + iobridge" },
  { name: "copilotkit", title: "CopilotKit + iobridge" },
];

await Promise.all(
  apps.map(async ({ name, title }) => {
    const dir = join(out, name);
    await mkdir(dir, { recursive: true });
    const result = await build({
      entryPoints: [join(here, name, "app.tsx")],
      bundle: true,
      outfile: join(dir, "app.js"),
      format: "iife",
      platform: "browser",
      target: "es2022",
      jsx: "automatic",
      minify: false,
      sourcemap: false,
      logLevel: "warning",
      define: { "process.env.NODE_ENV": '"production"' },
      loader: { ".woff": "empty", ".woff2": "empty", ".ttf": "empty", ".svg": "dataurl" },
      metafile: true,
    });
    const css = Object.keys(result.metafile.outputs).some((file) => file.endsWith(".css"));
    await writeFile(join(dir, "index.html"), page(title, css));
  }),
);
