// The Sandboxes page: the caller's sandboxes (GET /v1/sandboxes), kept live from the lifecycle
// events stream (GET /v1/events, read over fetch): no polling. Each event refetches the one
// sandbox it names; a stream that ends (or says it lagged) reloads the list and reconnects.
//
// The list is drawn in one go (one request, the rows built off-document in a fragment and put
// in with one replaceChildren: one style and layout pass, not one per row), so a thousand
// sandboxes paint in one frame. The first draw leaves User Timing marks for sandlot-bench's
// console benchmark: `sandlot:list-fetched` (the list arrived), `sandlot:list-built` (its rows
// are in the document) and `sandlot:list-rendered` (the frame that draws them has been made).
import { api, h, say, age, word, readEvents, pageSignal } from './console.js';

const tbody = document.querySelector('#sandboxes tbody');
const empty = document.getElementById('empty');
const liveState = document.getElementById('live-state');
const rows = new Map();

function button(label, onclick) {
  return h('button', { type: 'button', onclick }, label);
}

async function act(label, method, path, body) {
  say(`${label}…`);
  try {
    const out = await api(method, path, body);
    say(`${label}: done.`);
    return out;
  } catch (e) {
    say(`${label} failed: ${e.message}`, true);
    return null;
  }
}

function actions(sb) {
  const base = `/v1/sandboxes/${encodeURIComponent(sb.id)}`;
  const out = [];
  if (sb.state === 'running') out.push(button('Pause', () => act(`Pause ${sb.id}`, 'POST', `${base}/pause`)));
  if (sb.state === 'paused') out.push(button('Resume', () => act(`Resume ${sb.id}`, 'POST', `${base}/resume`)));
  out.push(button('Fork', () => act(`Fork ${sb.id}`, 'POST', `${base}/fork`, {})));
  out.push(button('Snapshot', async () => {
    const snap = await act(`Snapshot ${sb.id}`, 'POST', `${base}/snapshots`, {});
    if (snap && snap.id) say(`Snapshot ${snap.id} of ${sb.id} saved.`);
  }));
  out.push(button('Delete', () => {
    if (window.confirm(`Delete sandbox ${sb.id}?`)) act(`Delete ${sb.id}`, 'DELETE', base);
  }));
  return out;
}

function row(sb) {
  const link = h('a', { href: `/console/sandboxes/${encodeURIComponent(sb.id)}` }, sb.id);
  return h('tr', { 'data-id': sb.id },
    h('td', {}, link),
    h('td', { class: `state-${word(sb.state)}` }, sb.state),
    h('td', {}, sb.template),
    h('td', {}, sb.tenant || ''),
    h('td', { 'data-created': sb.created_at, title: sb.created_at }, age(sb.created_at)),
    h('td', {}, String(sb.restart_count ?? 0)),
    h('td', { class: 'actions' }, actions(sb)));
}

function upsert(sb) {
  const tr = row(sb);
  const old = rows.get(sb.id);
  if (old) old.replaceWith(tr);
  else tbody.prepend(tr);
  rows.set(sb.id, tr);
  empty.hidden = rows.size > 0;
}

function drop(id) {
  const tr = rows.get(id);
  if (tr) tr.remove();
  rows.delete(id);
  empty.hidden = rows.size > 0;
}

async function refresh(id) {
  try {
    const sb = await api('GET', `/v1/sandboxes/${encodeURIComponent(id)}`);
    if (['running', 'paused', 'stopped', 'failed', 'contained'].includes(sb.state)) upsert(sb);
    else drop(id);
  } catch (e) {
    if (e.status === 404 || e.status === 410) drop(id);
    else say(`Could not refresh ${id}: ${e.message}`, true);
  }
}

let firstDraw = true;

async function reload() {
  const list = await api('GET', '/v1/sandboxes');
  if (firstDraw) performance.mark('sandlot:list-fetched');
  // Newest first, as upsert() puts a new one on top. RFC 3339 UTC times of one format sort
  // as strings (plain comparison: localeCompare is far slower over a thousand).
  const sorted = list.sandboxes.slice().sort((a, b) => {
    if (a.created_at === b.created_at) return 0;
    return a.created_at < b.created_at ? 1 : -1;
  });
  const fragment = document.createDocumentFragment();
  rows.clear();
  for (const sb of sorted) {
    const tr = row(sb);
    rows.set(sb.id, tr);
    fragment.append(tr);
  }
  tbody.replaceChildren(fragment);
  empty.hidden = rows.size > 0;
  if (firstDraw) {
    firstDraw = false;
    performance.mark('sandlot:list-built');
    // requestAnimationFrame runs just before the frame's style, layout and paint; a task
    // queued from it runs after them.
    requestAnimationFrame(() => setTimeout(() => performance.mark('sandlot:list-rendered'), 0));
  }
}

const ENDED = new Set(['killed', 'expired']);

// The stream is closed while the page is hidden in the browser's back/forward cache: kept
// open, it would hold one of the browser's six connections to this server (a later page's
// requests would queue behind it) and one of the tenant's event-stream slots. Shown again, the
// page reopens it and reloads the list.
let liveStop = null;

async function live() {
  const stop = new AbortController();
  liveStop = stop;
  const signal = AbortSignal.any([pageSignal, stop.signal]);
  let delay = 1000;
  for (;;) {
    try {
      const resp = await api('GET', '/v1/events', undefined, {
        raw: true,
        signal,
        headers: { Accept: 'text/event-stream' },
      });
      await reload();
      liveState.textContent = 'live';
      delay = 1000;
      await readEvents(resp, (name, ev) => {
        if (name === 'lagged') {
          reload().catch(() => {});
          return;
        }
        if (!ev || typeof ev.sandbox_id !== 'string') return;
        if (ENDED.has(name)) drop(ev.sandbox_id);
        else if (name !== 'executed') refresh(ev.sandbox_id);
      });
    } catch (e) {
      if (e.name === 'AbortError') return;
      if (e.status === 401) {
        liveState.textContent = 'signed out';
        return;
      }
    }
    if (signal.aborted) return;
    liveState.textContent = 'reconnecting…';
    await new Promise((r) => setTimeout(r, delay));
    if (signal.aborted) return;
    delay = Math.min(delay * 2, 30000);
  }
}

window.addEventListener('pagehide', (ev) => {
  if (ev.persisted && liveStop) {
    liveStop.abort();
    liveStop = null;
    liveState.textContent = 'paused';
  }
});
window.addEventListener('pageshow', (ev) => {
  if (ev.persisted && !liveStop) live();
});

document.getElementById('create').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const template = document.getElementById('template').value.trim();
  const sb = await act('Create a sandbox', 'POST', '/v1/sandboxes', template ? { template } : {});
  if (sb) upsert(sb);
});

// Ages move on by themselves: a local timer rewrites them, nothing is fetched.
setInterval(() => {
  for (const td of tbody.querySelectorAll('td[data-created]')) td.textContent = age(td.dataset.created);
}, 15000);

live();
