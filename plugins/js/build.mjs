#!/usr/bin/env node
// Builds a JavaScript or TypeScript plugin into a wasm32-wasip2 component:
//
//   node plugins/js/build.mjs WORLD ENTRY OUT.wasm     (in this repository)
//   npx wasmlet-plugin-build WORLD ENTRY OUT.wasm        (the SDK installed as a package)
//
// WORLD is admission-policy, probe-handler or pod-source; ENTRY the plugin's module
// (app.js or app.ts), which exports the world's interface (`admission`, `probe` or
// `source`). The module and what it imports (this SDK as `wasmlet-plugin/...`) are
// bundled by esbuild, a TypeScript entry is first checked by tsc against types generated
// from the WIT (jco guest-types), and componentize-js makes the component. The
// toolchain is the package's dependencies: this directory's node_modules in the
// repository (`npm ci` here), the project's when the SDK is installed (`npm install`).
// Installed, the package carries the WIT and the reproducibility preload (`wit/`,
// `reproducible/`); in the repository they are the checkout's.
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const sdk = dirname(fileURLToPath(import.meta.url));
const beside = (dir, fallback) => (existsSync(join(sdk, dir)) ? join(sdk, dir) : resolve(sdk, fallback));
const wit = beside('wit', '../../wit');
const reproducible = beside('reproducible', '../reproducible');
// The tools' commands: in the SDK's own node_modules, or the project's it is installed in.
const binDirs = [join(sdk, 'node_modules/.bin'), resolve(sdk, '../.bin'), resolve(sdk, '../../.bin')];
const bin = (tool) => join(binDirs.find((d) => existsSync(join(d, tool))) ?? binDirs[0], tool);

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
if (!existsSync(bin('componentize-js'))) fail(`the toolchain is not installed: npm install (or npm ci --prefix ${sdk})`);

// The lock this build holds (see `reproducibly`).
let held;
const work = reproducibly();
try {
  if (entry.endsWith('.ts')) typecheck(world, resolve(entry), work);
  const bundle = join(work, 'plugin.js');
  execFileSync(bin('esbuild'), [
    resolve(entry), '--bundle', '--format=esm', '--platform=neutral', '--log-level=warning',
    '--external:wasmlet:*', `--alias:wasmlet-plugin=${join(sdk, 'src')}`, `--outfile=${bundle}`,
    '--sourcemap=external', '--sources-content=false',
  ], { stdio: 'inherit' });
  const { componentize } = await import('@bytecodealliance/componentize-js');
  const { component } = await componentize({
    sourcePath: bundle,
    witPath: wit,
    worldName: world,
    disableFeatures: DISABLED[world],
    env: deterministic(),
  });
  writeFileSync(out, withSourceMap(component, sourceMap(`${bundle}.map`, resolve(entry))));
  console.error(`${out}: ${component.length} bytes (${world}, from ${basename(entry)})`);
} catch (e) {
  fail(e?.message ?? String(e));
} finally {
  rmSync(work, { recursive: true, force: true });
  release();
}

// The same source and SDK give the same component: componentize-js names its work
// directory with Math.random() under the system's temporary directory, and that path
// (the initializer's, the bundle's) is in the snapshot it takes of the engine. So each
// build runs in one fixed directory, one build at a time (a lock beside it), with
// Math.random seeded alike every time.
function reproducibly() {
  const base = join(tmpdir(), 'wasmlet-js-build');
  lock(`${base}.lock`);
  rmSync(base, { recursive: true, force: true });
  mkdirSync(base, { recursive: true });
  process.env.TMPDIR = base;
  let seed = 0x5eed;
  Math.random = () => {
    // mulberry32
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const work = join(base, 'bundle');
  mkdirSync(work);
  return work;
}

// The environment of the engine's snapshot (wizer): the tool itself with
// plugins/reproducible/deterministic.so preloaded — the same random bytes, clocks and
// file times on every build — at a path inside the build directory, so that the same
// string reaches the guest's environment everywhere. Without a C compiler to build it,
// the build goes on and says it will not be reproducible.
function deterministic() {
  const script = join(reproducible, 'preload.sh');
  let so;
  try {
    so = execFileSync('sh', [script], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }).trim();
  } catch {
    console.error('build.mjs: warning: building without deterministic.so (reproducible/preload.sh)');
    return {};
  }
  const local = join(dirname(work), 'deterministic.so');
  copyFileSync(so, local);
  return { LD_PRELOAD: local };
}

// Takes the lock directory `path`, waiting for a build that holds it; one whose process
// is gone is taken over.
function lock(path) {
  const deadline = Date.now() + 10 * 60_000;
  for (;;) {
    try {
      mkdirSync(path);
      writeFileSync(join(path, 'pid'), String(process.pid));
      held = path;
      return;
    } catch (e) {
      if (e.code !== 'EEXIST') throw e;
    }
    if (!alive(path)) {
      rmSync(path, { recursive: true, force: true });
      continue;
    }
    if (Date.now() > deadline) fail(`${path}: another build has held it for 10 minutes`);
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 100);
  }
}

// Whether the build that holds lock `path` is still running (a lock being made counts).
function alive(path) {
  let pid;
  try {
    pid = Number(readFileSync(join(path, 'pid'), 'utf8'));
  } catch {
    return true;
  }
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return e.code === 'EPERM';
  }
}

function release() {
  if (held) rmSync(held, { recursive: true, force: true });
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

// The bundle's source map with its sources named as the author knows them: relative to
// the entry's folder for the author's files, `wasmlet-plugin/…` for the SDK's.
function sourceMap(path, entry) {
  const map = JSON.parse(readFileSync(path, 'utf8'));
  const from = dirname(path);
  const sdkSrc = join(sdk, 'src');
  map.sources = map.sources.map((s) => {
    const file = resolve(from, s);
    if (file.startsWith(sdkSrc + '/')) return `wasmlet-plugin/${relative(sdkSrc, file)}`;
    return relative(dirname(entry), file);
  });
  delete map.sourceRoot;
  return Buffer.from(JSON.stringify(map));
}

// `component` with a custom section `wasmlet-sourcemap` appended: the host maps the
// places in an exception's stack (`plugin.js:67:3`) back to the author's file and line.
// A custom section may come last in a component; nothing else reads this one.
function withSourceMap(component, map) {
  const name = Buffer.from('wasmlet-sourcemap');
  const body = Buffer.concat([leb128(name.length), name, map]);
  return Buffer.concat([Buffer.from(component), Buffer.from([0]), leb128(body.length), body]);
}

function leb128(n) {
  const bytes = [];
  do {
    let b = n & 0x7f;
    n = Math.floor(n / 128);
    if (n > 0) b |= 0x80;
    bytes.push(b);
  } while (n > 0);
  return Buffer.from(bytes);
}
