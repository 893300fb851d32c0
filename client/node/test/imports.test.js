// SPDX-License-Identifier: Apache-2.0
// imports.test.js — the package's modules (index.js and src/*.js) import
// each other without a cycle (issue 21; Python's cache.py and
// connection.py had one). The graph is read from the sources' relative
// specifiers: `import ... from './x.js'`, `export ... from './x.js'`,
// `import './x.js'` and dynamic `import('./x.js')`. The checker is shown
// to find a cycle in a synthetic package.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.join(path.dirname(fileURLToPath(import.meta.url)), '..');

// The relative specifiers a module's source names.
const SPECIFIERS = [
  /^\s*(?:import|export)\b[^;'"]*?\bfrom\s*['"](\.{1,2}\/[^'"]+)['"]/gm,
  /^\s*import\s*['"](\.{1,2}\/[^'"]+)['"]/gm,
  /\bimport\s*\(\s*['"](\.{1,2}\/[^'"]+)['"]\s*\)/g,
];

// { 'src/x.js': Set of package files it imports } for files (relative to dir).
function importGraph(dir, files) {
  const graph = new Map();
  for (const file of files) {
    const text = fs.readFileSync(path.join(dir, file), 'utf8');
    const edges = new Set();
    for (const re of SPECIFIERS) {
      for (const m of text.matchAll(re)) {
        const target = path.posix.normalize(path.posix.join(path.posix.dirname(file), m[1]));
        if (files.includes(target) && target !== file) edges.add(target);
      }
    }
    graph.set(file, edges);
  }
  return graph;
}

// One cycle as [a, b, ..., a], or null (depth-first search).
function findCycle(graph) {
  const state = new Map(); // undefined: unseen, 1: on the path, 2: done
  const stack = [];
  const visit = (m) => {
    state.set(m, 1);
    stack.push(m);
    for (const n of [...(graph.get(m) ?? [])].sort()) {
      if (state.get(n) === 1) return [...stack.slice(stack.indexOf(n)), n];
      if (state.get(n) === undefined) {
        const found = visit(n);
        if (found) return found;
      }
    }
    stack.pop();
    state.set(m, 2);
    return null;
  };
  for (const m of [...graph.keys()].sort()) {
    if (state.get(m) === undefined) {
      const found = visit(m);
      if (found) return found;
    }
  }
  return null;
}

function packageFiles() {
  const src = fs.readdirSync(path.join(root, 'src')).filter((f) => f.endsWith('.js'));
  return ['index.js', ...src.map((f) => `src/${f}`)];
}

test('cbdclient\'s modules import each other without a cycle', () => {
  const graph = importGraph(root, packageFiles());
  // The graph was read: index.js re-exports the modules, the breaker uses them.
  assert.ok(graph.get('index.js').has('src/connection.js'));
  assert.ok(graph.get('src/breaker.js').has('src/cache.js'));
  const cycle = findCycle(graph);
  assert.equal(cycle, null, `import cycle: ${cycle?.join(' -> ')}`);
});

test('the checker finds a cycle, a lazy import() included', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cbd-imports-'));
  try {
    fs.mkdirSync(path.join(dir, 'src'));
    fs.writeFileSync(path.join(dir, 'index.js'), "export { a } from './src/a.js';\n");
    fs.writeFileSync(path.join(dir, 'src/a.js'), "import { b } from './b.js';\nimport net from 'node:net';\nexport const a = 1;\n");
    fs.writeFileSync(path.join(dir, 'src/b.js'), "export const b = 2;\nexport async function f() { return (await import('./a.js')).a; }\n");
    const files = ['index.js', 'src/a.js', 'src/b.js'];
    const graph = importGraph(dir, files);
    assert.deepEqual(graph.get('index.js'), new Set(['src/a.js']));
    assert.deepEqual(graph.get('src/a.js'), new Set(['src/b.js']));
    assert.deepEqual(graph.get('src/b.js'), new Set(['src/a.js']));
    assert.deepEqual(findCycle(graph), ['src/a.js', 'src/b.js', 'src/a.js']);
    fs.writeFileSync(path.join(dir, 'src/b.js'), 'export const b = 2;\n');
    assert.equal(findCycle(importGraph(dir, files)), null);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('findCycle on small graphs', () => {
  const g = (o) => new Map(Object.entries(o).map(([k, v]) => [k, new Set(v)]));
  assert.deepEqual(findCycle(g({ x: ['y'], y: ['z'], z: ['x'] })), ['x', 'y', 'z', 'x']);
  assert.equal(findCycle(g({ x: ['y', 'z'], y: ['z'], z: [] })), null);
});
