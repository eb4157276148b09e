'use strict';
// sandlot's JavaScript kernel: one per code context, started by the driver (js_session.py) on
// the context's first JavaScript or TypeScript cell. See ARCHITECTURE.md, "The JavaScript
// kernel".
//
// Protocol: one JSON object per line. The driver writes cells into the fd named by argv[2]:
// {"id": exec_id, "code": ..., "ts": bool}. The kernel writes into the fd named by argv[3]
// (synchronously: a cell printing in a loop can never grow node's memory) its output
// {"t": "out", "s": 1|2, "d": text, "c": exec_id}, a cell's value {"t": "result", "c", "data"},
// its error {"t": "error", "c", "name", "value", "traceback"} and its end
// {"t": "done", "c", "status": "ok"|"error"|"interrupted"}.
//
// A restored context's log of cells comes first, as one {"id", "replay": [[code, ts, status],
// ...]}: each cell runs again in order with its output muted, and the kernel answers
// {"t": "replayed", "c": id, "failed": null | {"index", "name", "value"}} (a cell that ended
// "ok" when it first ran and throws now stops the replay; one that threw then may throw again).
//
// Cells run in the process's own global context (vm.runInThisContext), each rewritten first
// (rewrite()) so that what it declares at top level outlives it: var/let/const, functions,
// classes and `import` bindings become globals, the cell's body runs inside an async function
// (top-level await), and the value of its last expression statement is returned. `import`
// statements and `import()` expressions load through sandlotImport, which resolves bare names
// from the working directory's node_modules (where `npm install` in a Bash cell puts them).
//
// Needs --expose-internals: the parser is the acorn that node itself ships (the REPL's own),
// so no package has to be provisioned for it.

const fs = require('fs');
const net = require('net');
const path = require('path');
const util = require('util');
const vm = require('vm');
const Module = require('module');
const { pathToFileURL } = require('url');
const acorn = require('internal/deps/acorn/acorn/dist/acorn');

const IN_FD = Number(process.argv[2]);
const OUT_FD = Number(process.argv[3]);
const KERNEL_FILE = __filename;

let current = null; // the running cell's execution id
let last = null; // the last cell's: output written between cells is its background output
let cells = 0;
let interruptCurrent = null;
let muted = false; // a replay runs: the cells' output was seen when they first ran

function send(message) {
  let text = JSON.stringify(message);
  if (typeof text.toWellFormed === 'function') text = text.toWellFormed();
  const data = Buffer.from(text + '\n', 'utf8');
  let offset = 0;
  while (offset < data.length) {
    try {
      offset += fs.writeSync(OUT_FD, data, offset);
    } catch (e) {
      if (e.code === 'EAGAIN') continue;
      process.exit(0); // the driver is gone: nobody is left to report to
    }
  }
}

// JavaScript-level writes (console.*, process.stdout.write) go through the protocol, tagged
// with the cell that is running, so they keep their order with the cell's result and error.
for (const [stream, index] of [[process.stdout, 1], [process.stderr, 2]]) {
  stream.write = function write(chunk, encoding, callback) {
    if (typeof encoding === 'function') {
      callback = encoding;
      encoding = undefined;
    }
    if (muted) {
      if (typeof callback === 'function') process.nextTick(callback);
      return true;
    }
    const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
    if (text.length > 0) send({ t: 'out', s: index, d: text, c: current ?? last });
    if (typeof callback === 'function') process.nextTick(callback);
    return true;
  };
}

// -- module loading ------------------------------------------------------------------------

function userRequire() {
  // Resolved from the working directory each time: a cell may `cd` (process.chdir) or
  // install packages between two requires.
  return Module.createRequire(path.join(process.cwd(), '<cell>'));
}

function require_(id) {
  return userRequire()(id);
}
require_.resolve = (id, options) => userRequire().resolve(id, options);
require_.cache = Module._cache;

// A package's ESM entry point, for packages whose "exports" offer no entry to require().
function esmEntry(spec) {
  const parts = spec.split('/');
  const nameLen = spec.startsWith('@') ? 2 : 1;
  const name = parts.slice(0, nameLen).join('/');
  const sub = parts.length > nameLen ? './' + parts.slice(nameLen).join('/') : '.';
  for (let dir = process.cwd(); ; dir = path.dirname(dir)) {
    const root = path.join(dir, 'node_modules', name);
    let pkg = null;
    try {
      pkg = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));
    } catch (_) {
      pkg = null;
    }
    if (pkg) {
      let target = pkg.exports;
      if (target && typeof target === 'object' && !Array.isArray(target)) {
        const keys = Object.keys(target);
        if (keys.length && keys[0].startsWith('.')) target = target[sub];
        else if (sub !== '.') target = undefined;
      } else if (sub !== '.') {
        target = sub;
      }
      const pick = (t) => {
        if (typeof t === 'string') return t;
        if (Array.isArray(t)) return t.map(pick).find(Boolean);
        if (t && typeof t === 'object') {
          for (const c of ['import', 'node', 'default']) if (c in t) return pick(t[c]);
        }
        return undefined;
      };
      const entry = pick(target) || (sub === '.' ? pkg.module || pkg.main || 'index.js' : null);
      if (entry) return path.join(root, entry);
    }
    if (path.dirname(dir) === dir) return null;
  }
}

async function sandlotImport(spec) {
  spec = String(spec);
  if (Module.isBuiltin(spec) || /^(file|data|node):/.test(spec)) return import(spec);
  if (spec.startsWith('.') || spec.startsWith('/')) {
    return import(pathToFileURL(path.resolve(process.cwd(), spec)).href);
  }
  let file;
  try {
    file = userRequire().resolve(spec);
  } catch (e) {
    file = esmEntry(spec);
    if (!file) throw e;
  }
  return import(pathToFileURL(file).href);
}

// fetch() goes through the sandbox's egress proxy (HTTP_PROXY/HTTPS_PROXY, NO_PROXY), as pip,
// requests, curl and npm do; node's fetch ignores those variables by itself. (The http and
// https modules do not use a proxy: a sandbox with egress can reach nothing else with them.)
if (process.env.HTTPS_PROXY || process.env.HTTP_PROXY || process.env.https_proxy || process.env.http_proxy) {
  try {
    const undici = require('internal/deps/undici/undici');
    if (typeof undici.EnvHttpProxyAgent === 'function') {
      const emitWarning = process.emitWarning;
      process.emitWarning = () => {}; // "experimental": not the user's to see
      try {
        undici.setGlobalDispatcher(new undici.EnvHttpProxyAgent());
      } finally {
        process.emitWarning = emitWarning;
      }
    }
  } catch (_) {
    // a node without the agent (18): fetch stays direct, and fails without egress
  }
}

Object.defineProperty(globalThis, '__sandlot', {
  value: Object.freeze({ import: sandlotImport }),
  enumerable: false,
});
globalThis.require = require_;

// -- rewriting a cell ----------------------------------------------------------------------

const PARSE_OPTIONS = {
  ecmaVersion: 'latest',
  sourceType: 'script',
  allowAwaitOutsideFunction: true,
  allowImportExportEverywhere: true,
  allowHashBang: true,
};

function bindingNames(pattern, out) {
  if (!pattern) return out;
  switch (pattern.type) {
    case 'Identifier': out.push(pattern.name); break;
    case 'ObjectPattern':
      for (const p of pattern.properties) bindingNames(p.type === 'RestElement' ? p.argument : p.value, out);
      break;
    case 'ArrayPattern': for (const e of pattern.elements) bindingNames(e, out); break;
    case 'RestElement': bindingNames(pattern.argument, out); break;
    case 'AssignmentPattern': bindingNames(pattern.left, out); break;
    default: break;
  }
  return out;
}

// Every node below `node`, depth first, with its parent; `enter` returning false skips a
// node's children.
function walk(node, parent, enter) {
  if (!node || typeof node.type !== 'string') return;
  if (enter(node, parent) === false) return;
  for (const key of Object.keys(node)) {
    const child = node[key];
    if (Array.isArray(child)) {
      for (const c of child) if (c && typeof c.type === 'string') walk(c, node, enter);
    } else if (child && typeof child.type === 'string' && key !== 'loc') {
      walk(child, node, enter);
    }
  }
}

const FUNCTION_TYPES = new Set(['FunctionDeclaration', 'FunctionExpression', 'ArrowFunctionExpression']);

/** The cell as a script: hoisted globals, then an async arrow running the cell's body. */
function rewrite(code) {
  const ast = acorn.parse(code, PARSE_OPTIONS);
  const edits = []; // [start, end, text]
  const names = new Set();
  const functions = [];

  // A declaration as an assignment to globals: `const {a} = o, b = 1` -> `void ({a} = o, b = 1)`.
  const declarationToAssignment = (decl, resetMissing) => {
    edits.push([decl.start, decl.start + decl.kind.length, 'void (']);
    for (const d of decl.declarations) {
      bindingNames(d.id, []).forEach((n) => names.add(n));
      if (!d.init && resetMissing) edits.push([d.id.end, d.id.end, ' = undefined']);
      else if (d.init && d.id.type === 'ObjectPattern') {
        // `void ({a} = o)` is fine; nothing more to do
      }
    }
    edits.push([decl.declarations.at(-1).end, decl.declarations.at(-1).end, ')']);
  };

  // `var` anywhere outside a function is the cell's, hence a global.
  const hoistVars = (root) => {
    walk(root, null, (node, parent) => {
      if (FUNCTION_TYPES.has(node.type) || node.type === 'ClassBody') return false;
      if (node.type === 'ImportExpression') edits.push([node.start, node.start + 6, '__sandlot.import']);
      if (node.type === 'VariableDeclaration' && node.kind === 'var') {
        const inLoopHead = parent && (parent.type === 'ForInStatement' || parent.type === 'ForOfStatement') && parent.left === node;
        if (inLoopHead) {
          bindingNames(node.declarations[0].id, []).forEach((n) => names.add(n));
          edits.push([node.start, node.start + 3, '']);
        } else {
          declarationToAssignment(node, false);
        }
        for (const d of node.declarations) if (d.init) hoistVars(d.init);
        return false;
      }
      return true;
    });
    // Dynamic imports inside functions too.
    walk(root, null, (node) => {
      if (FUNCTION_TYPES.has(node.type) || node.type === 'ClassBody') {
        walk(node, null, (inner) => {
          if (inner.type === 'ImportExpression') edits.push([inner.start, inner.start + 6, '__sandlot.import']);
          return true;
        });
        return false;
      }
      return true;
    });
  };

  let importCount = 0;
  const body = ast.body;
  for (let i = 0; i < body.length; i++) {
    let st = body[i];
    if (st.type === 'ExportNamedDeclaration' || st.type === 'ExportDefaultDeclaration') {
      if (!st.declaration) {
        edits.push([st.start, st.end, '']);
        continue;
      }
      edits.push([st.start, st.declaration.start, '']);
      st = st.declaration;
    }
    switch (st.type) {
      case 'ImportDeclaration': {
        const source = code.slice(st.source.start, st.source.end);
        const load = `await __sandlot.import(${source})`;
        if (st.specifiers.length === 0) {
          edits.push([st.start, st.end, `${load};`]);
          break;
        }
        const temp = `__sandlot_m${importCount++}`;
        names.add(temp);
        const parts = [`${temp} = ${load}`];
        for (const s of st.specifiers) {
          names.add(s.local.name);
          if (s.type === 'ImportNamespaceSpecifier') parts.push(`${s.local.name} = ${temp}`);
          else if (s.type === 'ImportDefaultSpecifier') parts.push(`${s.local.name} = ${temp}.default`);
          else {
            const imported = s.imported.type === 'Literal' ? JSON.stringify(s.imported.value) : JSON.stringify(s.imported.name);
            // A CommonJS module's names that node's lexer could not find are its exports'.
            parts.push(`${s.local.name} = ${imported} in ${temp} ? ${temp}[${imported}] : ${temp}.default?.[${imported}]`);
          }
        }
        edits.push([st.start, st.end, `void (${parts.join(', ')});`]);
        break;
      }
      case 'VariableDeclaration':
        if (st.kind === 'var') {
          hoistVars(st);
        } else {
          declarationToAssignment(st, true);
          for (const d of st.declarations) if (d.init) hoistVars(d.init);
        }
        break;
      case 'FunctionDeclaration':
        if (st.id) {
          names.add(st.id.name);
          functions.push(st.id.name);
        }
        hoistVars(st);
        break;
      case 'ClassDeclaration':
        if (st.id) {
          names.add(st.id.name);
          edits.push([st.start, st.start, `${st.id.name} = `]);
          edits.push([st.end, st.end, ';']);
        }
        hoistVars(st);
        break;
      default:
        hoistVars(st);
    }
  }
  // The value of the last expression statement is the cell's result.
  let lastIndex = body.length - 1;
  while (lastIndex >= 0 && body[lastIndex].type === 'EmptyStatement') lastIndex--;
  const lastStatement = body[lastIndex];
  if (lastStatement && lastStatement.type === 'ExpressionStatement') {
    edits.push([lastStatement.expression.start, lastStatement.expression.start, 'return (']);
    edits.push([lastStatement.expression.end, lastStatement.expression.end, ')']);
  }
  edits.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let out = '';
  let at = 0;
  for (const [start, end, text] of edits) {
    out += code.slice(at, start) + text;
    at = Math.max(at, end);
  }
  out += code.slice(at);
  const declared = names.size ? `var ${[...names].join(', ')}; ` : '';
  const publish = functions.map((n) => `globalThis[${JSON.stringify(n)}] = ${n}; `).join('');
  // One line of prelude: line numbers in stack traces are the cell's own.
  return `${declared}(async () => { ${publish}${out}\n})()`;
}

// -- TypeScript ----------------------------------------------------------------------------

const { stripTypes } = require('./ts_strip.js');

// -- running a cell ------------------------------------------------------------------------

function cleanStack(stack) {
  const lines = String(stack).split('\n');
  const kept = [];
  for (const line of lines) {
    const frame = line.trim().startsWith('at ');
    if (frame && (line.includes(KERNEL_FILE) || line.includes('node:internal') || line.includes('node:vm'))) continue;
    kept.push(line);
  }
  return kept;
}

function errorEvent(error) {
  if (error instanceof Error || (error && typeof error === 'object' && typeof error.stack === 'string')) {
    let name = 'Error';
    let value = '';
    try {
      name = String(error.name || 'Error');
      value = String(error.message ?? '');
    } catch (_) {
      // a hostile getter: keep the defaults
    }
    return { name, value, traceback: cleanStack(error.stack) };
  }
  return { name: 'Error', value: `Uncaught ${util.inspect(error)}`, traceback: [] };
}

function syntaxErrorEvent(error, code, filename) {
  const lines = [];
  if (error.loc) {
    const source = code.split('\n')[error.loc.line - 1] ?? '';
    lines.push(`${filename}:${error.loc.line}`, source, ' '.repeat(error.loc.column) + '^', '');
  }
  const message = String(error.message).replace(/ \(\d+:\d+\)$/, '');
  lines.push(`SyntaxError: ${message}`);
  return { name: 'SyntaxError', value: message, traceback: lines };
}

class Interrupted extends Error {}

// Runs a restored context's cells again (see the protocol above), then answers once.
async function replay(message) {
  const cellsToReplay = Array.isArray(message.replay) ? message.replay : [];
  let failed = null;
  muted = true;
  try {
    for (let index = 0; index < cellsToReplay.length; index++) {
      const [code, ts, status] = cellsToReplay[index];
      cells += 1;
      try {
        const source = rewrite(ts ? stripTypes(String(code)) : String(code));
        await new vm.Script(source, { filename: `<cell ${cells}>` }).runInThisContext({ displayErrors: false });
      } catch (e) {
        if (status === 'ok') {
          const ev = errorEvent(e);
          failed = { index: index + 1, name: ev.name, value: ev.value };
          break;
        }
      }
    }
  } finally {
    muted = false;
    last = null;
  }
  send({ t: 'replayed', c: message.id ?? null, failed });
}

async function runCell(message) {
  if (message.replay !== undefined) return replay(message);
  current = message.id ?? null;
  last = current;
  cells += 1;
  const filename = `<cell ${cells}>`;
  let status = 'ok';
  const reply = (m) => send({ ...m, c: current });
  try {
    let code = String(message.code ?? '');
    if (message.ts) code = stripTypes(code);
    let source;
    try {
      source = rewrite(code);
    } catch (e) {
      if (e instanceof SyntaxError && e.loc) {
        reply({ t: 'error', ...syntaxErrorEvent(e, code, filename) });
        status = 'error';
        return;
      }
      throw e;
    }
    const interrupted = new Promise((_, reject) => {
      interruptCurrent = () => reject(new Interrupted('interrupted'));
    });
    interrupted.catch(() => {});
    const script = new vm.Script(source, { filename });
    // No breakOnSigint: it starts and joins a watchdog thread around every run, which costs
    // more than the rest of a `1+1` cell in the jail (and a new thread makes the driver replace
    // the execution's pipes). A cell stuck in synchronous code ignores SIGINT instead, and the
    // driver kills this process after its grace (see js_session.py).
    const promise = script.runInThisContext({ displayErrors: false });
    const value = await Promise.race([promise, interrupted]);
    if (value !== undefined) {
      let text;
      try {
        text = util.inspect(value, { depth: 4, maxArrayLength: 200, maxStringLength: 100000 });
      } catch (e) {
        text = `<value that could not be shown: ${e && e.message}>`;
      }
      reply({ t: 'result', data: { 'text/plain': text } });
    }
  } catch (e) {
    if (e instanceof Interrupted || (e && e.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED')) {
      status = 'interrupted';
      reply({ t: 'error', name: 'KeyboardInterrupt', value: 'the cell was interrupted', traceback: [] });
    } else {
      status = 'error';
      reply({ t: 'error', ...errorEvent(e) });
    }
  } finally {
    interruptCurrent = null;
    reply({ t: 'done', status });
    current = null;
  }
}

// An interrupt abandons a cell waiting on a promise (its state is kept). A cell running
// synchronous code never lets this handler run: the driver kills the process. Between cells
// SIGINT does nothing (the default would end the kernel).
process.on('SIGINT', () => {
  if (interruptCurrent) interruptCurrent();
});
// What a timer or a forgotten promise throws after its cell ended is reported, not fatal.
process.on('uncaughtException', (e) => {
  const ev = errorEvent(e);
  process.stderr.write(`Uncaught ${ev.traceback.length ? ev.traceback.join('\n') : `${ev.name}: ${ev.value}`}\n`);
});
process.on('unhandledRejection', (e) => {
  const ev = errorEvent(e);
  process.stderr.write(`Unhandled promise rejection: ${ev.traceback.length ? ev.traceback.join('\n') : `${ev.name}: ${ev.value}`}\n`);
});

const queue = [];
let running = false;
async function pump() {
  if (running) return;
  running = true;
  while (queue.length) await runCell(queue.shift());
  running = false;
}

const input = new net.Socket({ fd: IN_FD, readable: true, writable: false });
input.setEncoding('utf8');
let pending = '';
input.on('data', (chunk) => {
  pending += chunk;
  let newline;
  while ((newline = pending.indexOf('\n')) >= 0) {
    const line = pending.slice(0, newline);
    pending = pending.slice(newline + 1);
    if (!line.trim()) continue;
    try {
      queue.push(JSON.parse(line));
    } catch (_) {
      // a malformed line: the driver never writes one; skip it
    }
  }
  pump();
});
input.on('end', () => process.exit(0));
input.on('error', () => process.exit(0));
