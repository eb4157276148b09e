// The Sandboxes page: the caller's sandboxes (GET /v1/sandboxes), kept live from the lifecycle
// events stream (GET /v1/events, read over fetch): no polling. Each event refetches the one
// sandbox it names; a stream that ends (or says it lagged) reloads the list and reconnects.
import { api, h, say, age, word, readEvents } from './console.js';

const tbody = document.querySelector('#sandboxes tbody');
const empty = document.getElementById('empty');
const liveState = document.getElementById('live-state');
const rows = new Map();
// The operator sees every tenant's sandboxes (GET /v1/sandboxes?tenant=*), narrowed by the
// tenant filter; another tenant's row is shown, not acted on (its page and actions are that
// tenant's keys').
let me = null;
const isOperator = () => me && me.role === 'admin' && me.tenant === 'default';
const tenantInput = document.getElementById('tenant');

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
  const own = !me || sb.tenant === me.tenant;
  const link = own ? h('a', { href: `/console/sandboxes/${encodeURIComponent(sb.id)}` }, sb.id) : sb.id;
  return h('tr', { 'data-id': sb.id },
    h('td', {}, link),
    h('td', { class: `state-${word(sb.state)}` }, sb.state),
    h('td', {}, sb.template),
    h('td', {}, sb.tenant || ''),
    h('td', { 'data-created': sb.created_at, title: sb.created_at }, age(sb.created_at)),
    h('td', {}, String(sb.restart_count ?? 0)),
    h('td', { class: 'actions' }, own ? actions(sb) : h('span', { class: 'muted' }, `${sb.tenant}'s`)));
}

function upsert(sb) {
  const only = tenantInput.value.trim();
  if (isOperator() && only && sb.tenant !== only) {
    drop(sb.id);
    return;
  }
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

async function reload() {
  let path = '/v1/sandboxes';
  if (isOperator()) path += `?tenant=${encodeURIComponent(tenantInput.value.trim() || '*')}`;
  const list = await api('GET', path);
  const seen = new Set();
  const sorted = list.sandboxes.slice().sort((a, b) => a.created_at.localeCompare(b.created_at));
  for (const sb of sorted) {
    seen.add(sb.id);
    upsert(sb);
  }
  for (const id of [...rows.keys()]) if (!seen.has(id)) drop(id);
  empty.hidden = rows.size > 0;
}

const ENDED = new Set(['killed', 'expired']);

async function live() {
  let delay = 1000;
  for (;;) {
    try {
      const resp = await api('GET', '/v1/events', undefined, {
        raw: true,
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
    liveState.textContent = 'reconnecting…';
    await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(delay * 2, 30000);
  }
}

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

document.getElementById('tenant-filter').addEventListener('submit', (ev) => {
  ev.preventDefault();
  reload().catch((e) => say(`Could not list the sandboxes: ${e.message}`, true));
});

(async () => {
  try {
    me = await api('GET', '/v1/whoami');
    document.getElementById('tenant-filter').hidden = !isOperator();
  } catch (_) {
    // Signed out: the list says so.
  }
  live();
})();
