#!/usr/bin/env node
// Builds a JavaScript or TypeScript plugin into a wasm32-wasip2 component:
//
//   node plugins/js/build.mjs WORLD ENTRY OUT.wasm
//
// WORLD is admission-policy, probe-handler or pod-source; ENTRY the plugin's module
// (app.js or app.ts), which exports the world's interface (`admission`, `probe` or
// `source`). The module and what it imports (this SDK as `wasmlet-plugin/...`) are
// bundled by esbuild, a TypeScript entry is first checked by tsc against types generated
// from the WIT (jco guest-types), and componentize-js makes the component. The
// toolchain is this directory's (`npm ci` here installs it).
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const sdk = dirname(fileURLToPath(import.meta.url));
const wit = resolve(sdk, '../../wit');
const bin = (tool) => join(sdk, 'node_modules/.bin', tool);

// What each world's host links beside the WIT: an admission policy and a probe handler
// get no wasi:http, a pod source may fetch the URLs it is granted.
const DISABLED = {
  'admission-policy': ['http', 'fetch-event'],
  'probe-handler': ['http', 'fetch-event'],
  'pod-source': ['fetch-event'],
};

function fail(message) {
  console.error(`build.mjs: ${message}`);
  process.exit(2);
}

const [world, entry, out] = process.argv.slice(2);
if (!world || !entry || !out) fail('usage: build.mjs admission-policy|probe-handler|pod-source ENTRY OUT.wasm');
if (!DISABLED[world]) fail(`unknown world ${world} (admission-policy, probe-handler or pod-source)`);
if (!existsSync(entry)) fail(`${entry}: no such file`);
if (!existsSync(bin('componentize-js'))) fail(`the toolchain is not installed: npm ci --prefix ${sdk}`);

const work = mkdtempSync(join(tmpdir(), 'wasmlet-js-'));
try {
  if (entry.endsWith('.ts')) typecheck(world, resolve(entry), work);
  const bundle = join(work, 'plugin.js');
  execFileSync(bin('esbuild'), [
    resolve(entry), '--bundle', '--format=esm', '--platform=neutral', '--log-level=warning',
    '--external:wasmlet:*', `--alias:wasmlet-plugin=${join(sdk, 'src')}`, `--outfile=${bundle}`,
  ], { stdio: 'inherit' });
  const { componentize } = await import('@bytecodealliance/componentize-js');
  const { component } = await componentize({
    sourcePath: bundle,
    witPath: wit,
    worldName: world,
    disableFeatures: DISABLED[world],
  });
  writeFileSync(out, component);
  console.error(`${out}: ${component.length} bytes (${world}, from ${basename(entry)})`);
} catch (e) {
  fail(e?.message ?? String(e));
} finally {
  rmSync(work, { recursive: true, force: true });
}

// Checks a TypeScript entry with the world's types, generated from the WIT.
function typecheck(world, entry, work) {
  execFileSync(bin('jco'), ['guest-types', wit, '-n', world, '-o', join(work, 'types'), '-q'], {
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const config = {
    compilerOptions: {
      target: 'es2022', module: 'es2022', moduleResolution: 'bundler', strict: true,
      noEmit: true, allowJs: true, checkJs: false, skipLibCheck: false,
      paths: { 'wasmlet-plugin/*': [join(sdk, 'src/*')] },
      types: [],
    },
    files: [entry],
    include: [join(work, 'types/**/*.d.ts')],
  };
  writeFileSync(join(work, 'tsconfig.json'), JSON.stringify(config));
  try {
    execFileSync(bin('tsc'), ['-p', join(work, 'tsconfig.json')], { stdio: 'inherit' });
  } catch {
    fail(`${entry}: does not type-check against the ${world} world (above)`);
  }
}
