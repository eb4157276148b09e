// The Sandboxes page: the caller's sandboxes (GET /v1/sandboxes), kept live from the lifecycle
// events stream (GET /v1/events, read over fetch): no polling. Each event refetches the one
// sandbox it names; a stream that ends (or says it lagged) reloads the list and reconnects.
//
// The list is drawn in one go (one request, the rows built off-document in a fragment and put
// in with one replaceChildren: one style and layout pass, not one per row), and rows out of view
// are not rendered until scrolled to (console.css: the table's rows are grid rows with
// `content-visibility: auto`; the explicit ARIA roles keep it a table to assistive technology
// whatever its CSS display), so a thousand sandboxes paint in one frame. Even a stream that
// cannot be opened (the tenant's event-stream slots all taken, say) does not hold the list back:
// it is drawn, marked not live, and the stream retried. The first draw leaves User Timing marks for sandlot-bench's
// console benchmark: `sandlot:list-fetched` (the list arrived), `sandlot:list-built` (its rows
// are in the document) and `sandlot:list-rendered` (the frame that draws them has been made).
import { api, h, say, age, word, readEvents, pageSignal } from './console.js';

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

function button(label, action) {
  return h('button', { type: 'button', 'data-action': action }, label);
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
  const out = [];
  if (sb.state === 'running') out.push(button('Pause', 'pause'));
  if (sb.state === 'paused') out.push(button('Resume', 'resume'));
  out.push(button('Fork', 'fork'), button('Snapshot', 'snapshot'), button('Delete', 'delete'));
  return out;
}

// One listener for every row's buttons, not one per button: a thousand rows build faster.
tbody.addEventListener('click', async (ev) => {
  const b = ev.target instanceof Element ? ev.target.closest('button[data-action]') : null;
  const tr = b ? b.closest('tr[data-id]') : null;
  if (!tr || !tbody.contains(tr)) return;
  const id = tr.dataset.id;
  const base = `/v1/sandboxes/${encodeURIComponent(id)}`;
  switch (b.dataset.action) {
    case 'pause':
      act(`Pause ${id}`, 'POST', `${base}/pause`);
      break;
    case 'resume':
      act(`Resume ${id}`, 'POST', `${base}/resume`);
      break;
    case 'fork':
      act(`Fork ${id}`, 'POST', `${base}/fork`, {});
      break;
    case 'snapshot': {
      const snap = await act(`Snapshot ${id}`, 'POST', `${base}/snapshots`, {});
      if (snap && snap.id) say(`Snapshot ${snap.id} of ${id} saved.`);
      break;
    }
    case 'delete':
      if (window.confirm(`Delete sandbox ${id}?`)) act(`Delete ${id}`, 'DELETE', base);
      break;
    default:
  }
});

function row(sb) {
  const own = !me || sb.tenant === me.tenant;
  const link = own ? h('a', { href: `/console/sandboxes/${encodeURIComponent(sb.id)}` }, sb.id) : sb.id;
  return h('tr', { role: 'row', 'data-id': sb.id },
    h('td', { role: 'cell' }, link),
    h('td', { role: 'cell', class: `state-${word(sb.state)}` }, sb.state),
    h('td', { role: 'cell' }, sb.template),
    h('td', { role: 'cell' }, sb.tenant || ''),
    h('td', { role: 'cell', 'data-created': sb.created_at, title: sb.created_at }, age(sb.created_at)),
    h('td', { role: 'cell' }, String(sb.restart_count ?? 0)),
    h('td', { role: 'cell', class: 'usage' }),
    h('td', { role: 'cell', class: 'actions' },
      own ? actions(sb) : h('span', { class: 'muted' }, `${sb.tenant}'s`)));
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
  usage.watch(tr);
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
let reloadPending = false;

function reloadSoon() {
  if (reloadPending) return;
  reloadPending = true;
  setTimeout(() => {
    reloadPending = false;
    reload().catch((e) => say(`Could not list the sandboxes: ${e.message}`, true));
  }, 250);
}

async function reload() {
  let path = '/v1/sandboxes';
  if (isOperator()) path += `?tenant=${encodeURIComponent(tenantInput.value.trim() || '*')}`;
  const list = await api('GET', path);
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
    requestAnimationFrame(() => setTimeout(() => {
      performance.mark('sandlot:list-rendered');
      usage.watchAll();
    }, 0));
  } else {
    usage.watchAll();
  }
}

// CPU/memory sparklines, fetched lazily: nothing at first paint. After the first frame an
// IntersectionObserver watches the rows; the ids of rows scrolled into view are batched into
// one GET /v1/metrics/sandboxes?ids=… (at most 200 a request), and a row is read again when an
// `executed` event names it (no timer polls). Each answer carries the server's last readings
// of the sandbox, drawn as two SVG polylines built with createElementNS: CPU use (the slope of
// its CPU time) and memory against its limit.
const SVG = 'http://www.w3.org/2000/svg';
const BATCH = 200;
const usage = (() => {
  const seen = new Set();
  const queue = new Set();
  let timer = null;
  let observer = null;

  function flush() {
    timer = null;
    const ids = [...queue].slice(0, BATCH);
    for (const id of ids) queue.delete(id);
    if (queue.size > 0) timer = setTimeout(flush, 0);
    if (ids.length === 0) return;
    api('GET', `/v1/metrics/sandboxes?ids=${ids.map(encodeURIComponent).join(',')}`)
      .then((out) => { for (const u of out.sandboxes || []) draw(u); })
      .catch(() => {
        // Usage is decoration: a failed read leaves the sparkline as it was.
      });
  }

  function ask(id) {
    queue.add(id);
    if (!timer) timer = setTimeout(flush, 50);
  }

  function line(cls, values, max) {
    const n = values.length;
    const pts = values.map((v, i) => {
      const x = n === 1 ? 24 : (i * 48) / (n - 1);
      const y = 15 - (max > 0 ? Math.min(1, v / max) : 0) * 14;
      return `${x.toFixed(1)},${y.toFixed(1)}`;
    });
    if (n === 1) pts.unshift(`0,${pts[0].split(',')[1]}`);
    const el = document.createElementNS(SVG, 'polyline');
    el.setAttribute('class', cls);
    el.setAttribute('points', pts.join(' '));
    return el;
  }

  function draw(u) {
    const tr = rows.get(u.sandbox_id);
    const td = tr && tr.querySelector('td.usage');
    if (!td) return;
    const hist = Array.isArray(u.history) && u.history.length ? u.history : [u];
    // CPU: milliseconds of CPU per second between readings (1000 = one core busy).
    const cpu = hist.length < 2 ? [0] : hist.slice(1).map((p, i) => {
      const dt = Date.parse(p.at) - Date.parse(hist[i].at);
      return dt > 0 ? Math.max(0, ((p.cpu_time_ms - hist[i].cpu_time_ms) * 1000) / dt) : 0;
    });
    const mem = hist.map((p) => Number(p.memory_bytes) || 0);
    const limit = Number(u.memory_limit_bytes) || Math.max(...mem, 1);
    const svg = document.createElementNS(SVG, 'svg');
    svg.setAttribute('viewBox', '0 0 48 16');
    svg.setAttribute('role', 'img');
    const mb = Math.round((Number(u.memory_bytes) || 0) / 1048576);
    const now = cpu[cpu.length - 1];
    svg.setAttribute('aria-label', `CPU ${Math.round(now / 10)} %, memory ${mb} MB`);
    svg.append(line('cpu', cpu, Math.max(1000, ...cpu)), line('mem', mem, limit));
    td.replaceChildren(svg);
    td.title = `CPU ${Math.round(now / 10)} % of a core, memory ${mb} MB`;
  }

  function onView(entries) {
    for (const e of entries) {
      if (!e.isIntersecting) continue;
      const id = e.target.dataset.id;
      observer.unobserve(e.target);
      if (!id || seen.has(id)) continue;
      seen.add(id);
      ask(id);
    }
  }

  return {
    watch(tr) {
      if (typeof IntersectionObserver !== 'function') return;
      if (!observer) observer = new IntersectionObserver(onView, { rootMargin: '200px 0px' });
      const id = tr.dataset.id;
      // A redrawn row of a sandbox already read: read it again (its cell is new and empty).
      if (seen.has(id)) ask(id);
      else observer.observe(tr);
    },
    watchAll() {
      for (const tr of rows.values()) this.watch(tr);
    },
    again(id) {
      if (seen.has(id) && rows.has(id)) ask(id);
    },
  };
})();

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
      // The operator's list shows every tenant's sandboxes, so it follows every tenant's events.
      const resp = await api('GET', isOperator() ? '/v1/events?tenant=*' : '/v1/events', undefined, {
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
        // Another tenant's sandbox cannot be fetched one by one (its /v1 reads are that
        // tenant's): the list is read again, at most once per burst.
        else if (me && ev.tenant && ev.tenant !== me.tenant) {
          if (name !== 'executed') reloadSoon();
          else usage.again(ev.sandbox_id);
        }
        else if (name !== 'executed') refresh(ev.sandbox_id);
        // An execution moved its CPU and memory: a new reading, if its row has been seen.
        else usage.again(ev.sandbox_id);
      });
    } catch (e) {
      if (e.name === 'AbortError') return;
      if (e.status === 401) {
        liveState.textContent = 'signed out';
        return;
      }
      if (firstDraw) await reload().catch((err) => say(`Could not list the sandboxes: ${err.message}`, true));
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
