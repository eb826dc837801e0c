// Builds the console into a directory (default ../static, which the binary embeds):
// app.js bundled from src/main.js with its npm dependencies, as an ES module whose
// builder (src/builder, React and its libraries) is a chunk loaded only when the
// builder's page opens, so the other pages load what they did before it; style.css
// bundled from src/style.css; index.html copied. The directory is emptied first, so no
// chunk of an earlier build stays. `make ui` runs it; `make verify` runs it into a
// temporary directory and fails when the result differs from what is committed.
import { build } from 'esbuild';
import { copyFileSync, mkdirSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const out = resolve(process.argv[2] || join(here, '..', 'static'));
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });

const common = { bundle: true, minify: true, legalComments: 'none', logLevel: 'warning', charset: 'utf8' };
// The builder is React (JSX, automatic runtime) in production mode.
await build({
  ...common, entryPoints: { app: join(here, 'src', 'main.js') }, outdir: out, format: 'esm', splitting: true,
  chunkNames: 'chunk-[hash]', target: 'es2020', jsx: 'automatic', define: { 'process.env.NODE_ENV': '"production"' },
});
await build({ ...common, entryPoints: [join(here, 'src', 'style.css')], outfile: join(out, 'style.css') });
copyFileSync(join(here, 'src', 'index.html'), join(out, 'index.html'));
