'use strict';
// TypeScript's types taken out of a cell, leaving JavaScript (see ARCHITECTURE.md, "The
// JavaScript kernel"). The node on the host (Debian 12's is 18, this project's machines run 20)
// has no type stripping of its own, so this covers the subset cells use, on the tokens of
// node's own acorn: annotations on declarations, parameters, return types and class members
// (`x: T`, `x?: T`, `x!: T`), `interface` and `type` declarations, `declare` statements,
// `import type` and `type` specifiers, `as`/`satisfies` casts, non-null `!`, generic parameters
// on declarations and calls, access modifiers (and parameter properties, which are assigned),
// `implements` clauses and `abstract`. Not covered (the cell then fails to parse as
// JavaScript, with a SyntaxError): enums, namespaces, decorators' metadata, `<T>x` casts.
// Removed text is replaced by its line breaks, so line numbers in errors stay the cell's own.

const acorn = require('internal/deps/acorn/acorn/dist/acorn');

const tt = acorn.tokTypes;
const MODIFIERS = new Set(['public', 'private', 'protected', 'readonly', 'declare', 'abstract', 'override']);

function tokenize(code) {
  const tokens = [];
  for (const t of acorn.tokenizer(code, { ecmaVersion: 'latest', allowHashBang: true, allowAwaitOutsideFunction: true })) {
    tokens.push(t);
  }
  return tokens;
}

function stripTypes(code) {
  let tokens;
  try {
    tokens = tokenize(code);
  } catch (_) {
    return code; // not even tokens: the JavaScript parser reports it
  }
  const removed = []; // [start, end] of source text
  const text = (t) => (t ? code.slice(t.start, t.end) : '');
  const isName = (t, v) => t && t.type === tt.name && (v === undefined || t.value === v);
  const isPunct = (t, s) => t && text(t) === s && t.type !== tt.string && t.type !== tt.template;
  const remove = (from, to) => {
    if (from < to) removed.push([tokens[from].start, tokens[to - 1].end]);
  };
  const sameLine = (a, b) => !/[\n\r\u2028\u2029]/.test(code.slice(a.end, b.start));

  // Index after the bracket group opening at i ('(' '[' '{'), or after an angle group.
  const closeOf = { '(': ')', '[': ']', '{': '}' };
  const skipGroup = (i) => {
    let depth = 0;
    for (let j = i; j < tokens.length; j++) {
      const s = text(tokens[j]);
      if (tokens[j].type === tt.string || tokens[j].type === tt.template) continue;
      if (s === '(' || s === '[' || s === '{' || s === '${') depth++;
      else if (s === ')' || s === ']' || s === '}') {
        depth--;
        if (depth === 0) return j + 1;
      }
    }
    return tokens.length;
  };
  const skipAngle = (i) => {
    let depth = 0;
    for (let j = i; j < tokens.length; j++) {
      const s = text(tokens[j]);
      if (s === '(' || s === '[' || s === '{') { j = skipGroup(j) - 1; continue; }
      if (s === ';' || s === ')' || s === ']' || s === '}') return -1;
      for (const ch of s) {
        if (ch === '<') depth++;
        else if (ch === '>') depth--;
      }
      if (s === '=>') depth++; // not an angle
      if (depth === 0) return j + 1;
      if (depth < 0) return -1;
    }
    return -1;
  };

  // Index after a type starting at i. stopAtArrow: a `=>` ends it (an arrow's return type).
  const skipType = (i, stopAtArrow = false) => {
    const primary = (j) => {
      while (isPunct(tokens[j], '|') || isPunct(tokens[j], '&')) j++;
      while (isName(tokens[j], 'typeof') || isName(tokens[j], 'keyof') || isName(tokens[j], 'readonly') ||
             isName(tokens[j], 'unique') || isName(tokens[j], 'infer') || (tokens[j] && tokens[j].type === tt._new)) j++;
      const t = tokens[j];
      if (!t) return j;
      const s = text(t);
      if (s === '(') {
        j = skipGroup(j);
        if (isPunct(tokens[j], '=>')) j = skipType(j + 1, stopAtArrow);
        return j;
      }
      if (s === '{' || s === '[') return skipGroup(j);
      if (s === '<') { // a generic function type
        const k = skipAngle(j);
        return k < 0 ? j : primary(k);
      }
      if (s === '-') j++;
      if (t.type === tt.template || s === '`') {
        for (j++; j < tokens.length && !isPunct(tokens[j], '`'); j++);
        return j + 1;
      }
      j++;
      while (isPunct(tokens[j], '.') && tokens[j + 1]) j += 2;
      return j;
    };
    let j = primary(i);
    for (;;) {
      const t = tokens[j];
      const s = text(t);
      if (!t) return j;
      if (s === '<') {
        const k = skipAngle(j);
        if (k < 0) return j;
        j = k;
      } else if (s === '[' && sameLine(tokens[j - 1], t)) {
        j = skipGroup(j);
      } else if (s === '|' || s === '&') {
        j = primary(j + 1);
      } else if (s === '=>' && !stopAtArrow) {
        j = skipType(j + 1, stopAtArrow);
      } else if (isName(t, 'is') || (t.type === tt._extends && isPunct(tokens[skipType(j + 1, true)], '?'))) {
        j = skipType(j + 1, true);
        if (isPunct(tokens[j], '?')) {
          j = skipType(j + 1, stopAtArrow);
          if (isPunct(tokens[j], ':')) j = skipType(j + 1, stopAtArrow);
        }
      } else {
        return j;
      }
    }
  };

  // End of the statement starting at i: a ';' at depth 0, or a line break after which no
  // operator continues it.
  const statementEnd = (i) => {
    for (let j = i; j < tokens.length; j++) {
      const s = text(tokens[j]);
      if (s === '(' || s === '[' || s === '{') j = skipGroup(j) - 1;
      if (s === ';') return j + 1;
      const next = tokens[j + 1];
      const last = text(tokens[j]);
      if (next && !sameLine(tokens[j], next) && !/^[|&=,.<>:?]/.test(text(next)) && !/[|&=,<>:(]$/.test(last)) return j + 1;
    }
    return tokens.length;
  };

  // A parameter list opening at i: modifiers, `?` and annotations go; parameter properties
  // (`constructor(private x: T)`) are noted to be assigned. Returns the index after ')'.
  const params = (i, properties) => {
    const end = skipGroup(i) - 1;
    let j = i + 1;
    while (j < end) {
      while (MODIFIERS.has(tokens[j] && tokens[j].value) && isName(tokens[j + 1]) ) {
        remove(j, j + 1);
        if (properties) properties.push(tokens[j + 1].value);
        j++;
      }
      if (isPunct(tokens[j], '...')) j++;
      if (isName(tokens[j], 'this') || (tokens[j] && tokens[j].type === tt._this)) {
        // `this: T` parameter: removed whole
        const k = skipType(j + 2);
        remove(j, isPunct(tokens[k], ',') ? k + 1 : k);
        j = k + 1;
        continue;
      }
      j = isPunct(tokens[j], '{') || isPunct(tokens[j], '[') ? skipGroup(j) : j + 1;
      if (isPunct(tokens[j], '?')) { remove(j, j + 1); j++; }
      if (isPunct(tokens[j], ':')) {
        const k = skipType(j + 1);
        remove(j, k);
        j = k;
      }
      // a default value, up to the next ',' at this depth
      while (j < end && !isPunct(tokens[j], ',')) {
        const s = text(tokens[j]);
        if (s === '(' && isArrowParams(j)) { j = arrow(j); continue; }
        j = s === '(' || s === '[' || s === '{' ? skipGroup(j) : j + 1;
      }
      j++;
    }
    return end + 1;
  };

  // Whether the '(' at i opens an arrow function's parameters: `(...) =>` or `(...): T =>`.
  const isArrowParams = (i) => {
    const close = skipGroup(i);
    if (isPunct(tokens[close], '=>')) return true;
    if (isPunct(tokens[close], ':')) return isPunct(tokens[skipType(close + 1, true)], '=>');
    return false;
  };
  const arrow = (i) => {
    const close = params(i);
    if (isPunct(tokens[close], ':')) {
      const k = skipType(close + 1, true);
      remove(close, k);
      return k;
    }
    return close;
  };

  const insertions = []; // [position, text]
  const classBodies = []; // depth of '{' of each class body we are in
  let depth = 0;
  let statementStart = true;
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i];
    const s = text(t);
    const prev = tokens[i - 1];
    // After `;` or a brace, or on a new line (ASI): where a declaration may start.
    const atStatement = statementStart || (prev && !sameLine(prev, t) && !/[|&=,<>:(\[.?!+\-*/]$/.test(text(prev)));
    statementStart = false;
    if (t.type === tt.string || t.type === tt.template || t.type === tt.num || t.type === tt.regexp) {
      continue;
    }
    // Declarations that are types only.
    if (atStatement && (isName(t, 'interface') || isName(t, 'declare') || (isName(t, 'type') && isName(tokens[i + 1]) && (isPunct(tokens[i + 2], '=') || isPunct(tokens[i + 2], '<'))))) {
      const end = isName(t, 'interface') ? skipGroup(tokens.findIndex((x, k) => k > i && isPunct(x, '{'))) : statementEnd(i);
      remove(i, end);
      i = end - 1;
      statementStart = true;
      continue;
    }
    if (atStatement && (t.type === tt._import || t.type === tt._export) && isName(tokens[i + 1], 'type')) {
      const end = statementEnd(i);
      remove(i, end);
      i = end - 1;
      statementStart = true;
      continue;
    }
    if (atStatement && (t.type === tt._import || t.type === tt._export)) {
      // `import { type A, B }`: the type-only specifiers go; `as` is a rename here.
      const end = statementEnd(i);
      for (let k = i; k < end; k++) {
        if (isName(tokens[k], 'type') && isName(tokens[k + 1]) && (isPunct(tokens[k - 1], '{') || isPunct(tokens[k - 1], ','))) {
          let e = k + 2;
          if (isName(tokens[e], 'as')) e += 2;
          if (isPunct(tokens[e], ',')) e++;
          remove(k, e);
          k = e - 1;
        }
      }
      if (t.type === tt._export && isName(tokens[i + 1], 'abstract')) remove(i + 1, i + 2);
      if (t.type === tt._export && (isName(tokens[i + 1], 'interface') || (isName(tokens[i + 1], 'type') && isName(tokens[i + 2])))) {
        statementStart = true;
        remove(i, i + 1);
        continue;
      }
      if (t.type === tt._import) {
        i = end - 1;
        statementStart = true;
      }
      continue;
    }
    if (isName(t, 'abstract') && tokens[i + 1] && tokens[i + 1].type === tt._class) {
      remove(i, i + 1);
      continue;
    }
    if (s === '{' || s === '(' || s === '[' || s === '${') depth++;
    if (s === '}' || s === ')' || s === ']') {
      if (s === '}' && classBodies.length && classBodies.at(-1) === depth) classBodies.pop();
      depth--;
    }
    if (s === ';' || s === '{' || s === '}') statementStart = true;
    // class Name<T> extends B<T> implements I, J {
    if (t.type === tt._class) {
      let j = i + 1;
      if (isName(tokens[j]) && !isName(tokens[j], 'extends') && !isName(tokens[j], 'implements')) j++;
      if (isPunct(tokens[j], '<')) {
        const k = skipAngle(j);
        if (k > 0) { remove(j, k); j = k; }
      }
      while (j < tokens.length && !isPunct(tokens[j], '{')) {
        if (isName(tokens[j], 'implements')) {
          let k = j + 1;
          while (k < tokens.length && !isPunct(tokens[k], '{')) k = isPunct(tokens[k], '<') ? Math.max(skipAngle(k), k + 1) : k + 1;
          remove(j, k);
          j = k;
          break;
        }
        if (isPunct(tokens[j], '<')) {
          const k = skipAngle(j);
          if (k > 0) { remove(j, k); j = k; continue; }
        }
        j++;
      }
      classBodies.push(depth + 1);
      i = j - 1;
      continue;
    }
    // Class members: modifiers, `x?: T`, `x!: T`, methods' parameters and return types.
    if (classBodies.length && classBodies.at(-1) === depth && (isPunct(prev, '{') || isPunct(prev, ';') || isPunct(prev, '}') || !sameLine(prev, t)) && !isPunct(t, '}')) {
      let j = i;
      while (MODIFIERS.has(tokens[j] && tokens[j].value) && tokens[j + 1] && !isPunct(tokens[j + 1], '(') && !isPunct(tokens[j + 1], ':') && !isPunct(tokens[j + 1], '=') && sameLine(tokens[j], tokens[j + 1])) {
        remove(j, j + 1);
        j++;
      }
      if (isName(tokens[j], 'static') && tokens[j + 1] && !isPunct(tokens[j + 1], '(') && !isPunct(tokens[j + 1], '=')) j++;
      if (isName(tokens[j], 'async') || isPunct(tokens[j], '*') || isName(tokens[j], 'get') || isName(tokens[j], 'set')) {
        if (tokens[j + 1] && !isPunct(tokens[j + 1], '(')) j++;
      }
      if (isPunct(tokens[j], '*')) j++;
      if (isPunct(tokens[j], '[')) j = skipGroup(j); else j++;
      if (isPunct(tokens[j], '?') || isPunct(tokens[j], '!')) { remove(j, j + 1); j++; }
      if (isPunct(tokens[j], '<')) {
        const k = skipAngle(j);
        if (k > 0) { remove(j, k); j = k; }
      }
      if (isPunct(tokens[j], ':')) { // a field's type
        const k = skipType(j + 1);
        remove(j, k);
        // `x: T;` with no value: a declaration the class fields of JavaScript would set to
        // undefined, as TypeScript (without useDefineForClassFields) does not; kept.
        i = k - 1;
        continue;
      }
      if (isPunct(tokens[j], '(')) { // a method
        const props = [];
        const close = params(j, props);
        let k = close;
        if (isPunct(tokens[k], ':')) {
          k = skipType(k + 1);
          remove(close, k);
        }
        if (props.length && isPunct(tokens[k], '{')) {
          insertions.push([tokens[k].end, props.map((p) => ` this.${p} = ${p};`).join('')]);
        }
        i = k - 1;
        continue;
      }
      i = j - 1;
      continue;
    }
    // let/const/var name: T = ...
    if ((t.type === tt._var || t.type === tt._const || isName(t, 'let')) && tokens[i + 1]) {
      let j = i + 1;
      j = isPunct(tokens[j], '{') || isPunct(tokens[j], '[') ? skipGroup(j) : j + 1;
      if (isPunct(tokens[j], '!')) { remove(j, j + 1); j++; }
      if (isPunct(tokens[j], ':')) {
        const k = skipType(j + 1);
        remove(j, k);
        i = k - 1;
      }
      continue;
    }
    // function name<T>(params): R
    if (t.type === tt._function) {
      let j = i + 1;
      if (isPunct(tokens[j], '*')) j++;
      if (isName(tokens[j])) j++;
      if (isPunct(tokens[j], '<')) {
        const k = skipAngle(j);
        if (k > 0) { remove(j, k); j = k; }
      }
      if (isPunct(tokens[j], '(')) {
        const close = params(j);
        let k = close;
        if (isPunct(tokens[k], ':')) {
          k = skipType(k + 1);
          remove(close, k);
        }
        if (!isPunct(tokens[k], '{')) { // an overload's signature: no body
          const end = isPunct(tokens[k], ';') ? k + 1 : k;
          remove(i, end);
        }
        i = k - 1;
      }
      continue;
    }
    // Arrow functions' parameters and return types; generic arrows `<T>(x: T) => x`.
    if (s === '(' && isArrowParams(i)) {
      i = arrow(i) - 1;
      continue;
    }
    if (s === '<' && prev && !/[\w)\]]$/.test(text(prev))) {
      const k = skipAngle(i);
      if (k > 0 && isPunct(tokens[k], '(') && isArrowParams(k)) {
        remove(i, k);
        i = k - 1;
        continue;
      }
    }
    // Expression-level: casts, non-null assertions, explicit type arguments of a call.
    const endsExpression = prev && (prev.type === tt.name || prev.type === tt._this || /[)\]}]$/.test(text(prev)) || prev.type === tt.string || prev.type === tt.num);
    if ((isName(t, 'as') || isName(t, 'satisfies')) && endsExpression && sameLine(prev, t)) {
      const k = isName(tokens[i + 1], 'const') ? i + 2 : skipType(i + 1);
      remove(i, k);
      i = k - 1;
      continue;
    }
    if (s === '!' && endsExpression && t.start === prev.end) {
      remove(i, i + 1);
      continue;
    }
    if (s === '<' && prev && (prev.type === tt.name) && t.start === prev.end) {
      const k = skipAngle(i);
      if (k > 0 && (isPunct(tokens[k], '(') || isPunct(tokens[k], '`'))) {
        remove(i, k);
        i = k - 1;
        continue;
      }
    }
  }
  if (!removed.length && !insertions.length) return code;
  const edits = removed.map(([a, b]) => [a, b, code.slice(a, b).replace(/[^\n]/g, '')])
    .concat(insertions.map(([p, s]) => [p, p, s]))
    .sort((x, y) => x[0] - y[0] || x[1] - y[1]);
  let out = '';
  let at = 0;
  for (const [a, b, s] of edits) {
    if (a < at) { // overlapping removals: keep the union
      if (b > at) { out += code.slice(at, b).replace(/[^\n]/g, ''); at = b; }
      continue;
    }
    out += code.slice(at, a) + s;
    at = b;
  }
  return out + code.slice(at);
}

module.exports = { stripTypes };
