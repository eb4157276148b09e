// Renders what a sandbox produced. All of it is attacker-controlled:
// - text goes in as text nodes;
// - images only as data: URLs we build from base64 we checked (SVG too: an <img> runs no script);
// - DataFrames as a table built from their JSON data (application/vnd.sandlot.data+json);
// - other HTML only inside a sandboxed frame with no permissions (no script, no forms, an
//   opaque origin), under this page's CSP (nothing loads from elsewhere).
import { h } from './console.js';

const DATA_MIME = 'application/vnd.sandlot.data+json';
const MAX_ROWS = 500;
const BASE64 = /^[A-Za-z0-9+/=\s]*$/;

function image(mime, data, alt) {
  if (typeof data !== 'string' || !BASE64.test(data)) return null;
  return h('img', { src: `data:${mime};base64,${data.replace(/\s/g, '')}`, alt });
}

function table(data) {
  if (!data || typeof data !== 'object' || Array.isArray(data)) return null;
  const columns = Object.keys(data);
  if (!columns.every((c) => Array.isArray(data[c]))) return null;
  const rows = Math.min(MAX_ROWS, ...columns.map((c) => data[c].length));
  const body = [];
  for (let i = 0; i < rows; i++) {
    body.push(h('tr', {}, columns.map((c) => h('td', {}, cellText(data[c][i])))));
  }
  const total = Math.max(0, ...columns.map((c) => data[c].length));
  return h('div', {},
    h('table', {},
      h('thead', {}, h('tr', {}, columns.map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, body)),
    total > rows ? h('p', {}, `first ${rows} of ${total} rows`) : null);
}

function cellText(v) {
  if (v === null || v === undefined) return '';
  return typeof v === 'object' ? JSON.stringify(v) : String(v);
}

function sandboxedHtml(html) {
  // No allow-* token at all: scripts, forms, popups and same-origin access are all off.
  return h('iframe', { sandbox: '', srcdoc: html, title: 'HTML output (sandboxed)', loading: 'lazy' });
}

/** One MIME bundle (a display or a result) as an element. */
export function bundle(data) {
  const plain = typeof data['text/plain'] === 'string' ? data['text/plain'] : '';
  const alt = plain ? plain.slice(0, 200) : 'figure';
  for (const mime of ['image/png', 'image/jpeg', 'image/gif', 'image/webp']) {
    if (mime in data) {
      const img = image(mime, data[mime], alt);
      if (img) return img;
    }
  }
  if (typeof data['image/svg+xml'] === 'string') {
    return h('img', { src: `data:image/svg+xml;charset=utf-8,${encodeURIComponent(data['image/svg+xml'])}`, alt });
  }
  if (DATA_MIME in data) {
    const t = table(data[DATA_MIME]);
    if (t) return t;
  }
  if (typeof data['text/html'] === 'string') return sandboxedHtml(data['text/html']);
  if (plain) return h('pre', {}, plain);
  if ('application/json' in data) return h('pre', {}, JSON.stringify(data['application/json'], null, 2));
  return h('pre', {}, `(output of type ${Object.keys(data).join(', ')})`);
}

/** One output event (stdout, stderr, display_data, result, error) as an element. */
export function output(ev) {
  switch (ev.type) {
    case 'stdout':
      return h('pre', { class: 'stdout' }, ev.text);
    case 'stderr':
      return h('pre', { class: 'stderr' }, ev.text);
    case 'display_data':
    case 'result':
      return h('div', { class: ev.type }, bundle(ev.data || {}));
    case 'error':
      return h('pre', { class: 'traceback' },
        (ev.traceback && ev.traceback.length ? ev.traceback.join('\n') : `${ev.name}: ${ev.value}`));
    default:
      return null;
  }
}
