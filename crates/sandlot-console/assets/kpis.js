// The KPIs page: GET /v1/kpis?window=1h|1d drawn as numbers and small SVG sparklines, kept live
// from the lifecycle events stream (GET /v1/events?tenant=*, read over fetch): every event asks
// for the KPIs again (at most one request in flight, one more queued a quarter second after
// it). No polling: nothing is fetched unless an event came. The KPIs
// are server-wide, so only the operator sees them; any other key is told so.
import { api, h, say, readEvents } from './console.js';

const SVG = 'http://www.w3.org/2000/svg';
const root = document.getElementById('kpis');
const note = document.getElementById('kpi-note');
const liveState = document.getElementById('live-state');
const updated = document.getElementById('updated');
let windowName = '1h';

/** A number for people: `12.3 ms`, `1.24 s`, `4.2 %`, or an em dash when there is none. */
function fmtMs(v) {
  if (v === null || v === undefined) return '—';
  if (v >= 1000) return `${(v / 1000).toFixed(2)} s`;
  if (v >= 10) return `${v.toFixed(0)} ms`;
  return `${v.toFixed(2)} ms`;
}

function fmtRatio(v) {
  if (v === null || v === undefined) return '—';
  return `${(v * 100).toFixed(v < 0.1 ? 2 : 1)} %`;
}

function fmtCount(v) {
  return v === null || v === undefined ? '—' : String(v);
}

/** An SVG sparkline of `values` (nulls are gaps), scaled to its own maximum. */
function sparkline(label, ...seriesList) {
  const w = 240;
  const hgt = 40;
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('viewBox', `0 0 ${w} ${hgt}`);
  svg.setAttribute('width', String(w));
  svg.setAttribute('height', String(hgt));
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', label);
  svg.setAttribute('class', 'spark');
  const all = seriesList.flat().filter((v) => typeof v === 'number' && Number.isFinite(v));
  const max = Math.max(1e-9, ...all);
  seriesList.forEach((values, k) => {
    const n = values.length;
    let points = [];
    const flush = () => {
      // A lone value is drawn as a short dash, so it shows.
      if (points.length === 1) points.push([points[0][0] + 4, points[0][1]]);
      if (points.length > 1) {
        const line = document.createElementNS(SVG, 'polyline');
        line.setAttribute('points', points.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(' '));
        line.setAttribute('class', `spark-line spark-${k}`);
        svg.append(line);
      }
      points = [];
    };
    values.forEach((v, i) => {
      if (typeof v !== 'number' || !Number.isFinite(v)) {
        flush();
        return;
      }
      const x = n > 1 ? (i / (n - 1)) * (w - 4) + 1 : w / 2;
      const y = hgt - 2 - (v / max) * (hgt - 4);
      points.push([x, y]);
    });
    flush();
  });
  const base = document.createElementNS(SVG, 'line');
  base.setAttribute('x1', '0');
  base.setAttribute('x2', String(w));
  base.setAttribute('y1', String(hgt - 1));
  base.setAttribute('y2', String(hgt - 1));
  base.setAttribute('class', 'spark-base');
  svg.prepend(base);
  return svg;
}

/** One KPI: a title, its main figure (id `kpi-<id>`), what it is made of, a sparkline. */
function card(id, title, figure, detail, spark) {
  return h('section', { class: 'kpi', 'aria-labelledby': `kpi-${id}-title` },
    h('h2', { id: `kpi-${id}-title` }, title),
    h('p', { class: 'figure' }, h('output', { id: `kpi-${id}` }, figure)),
    h('p', { class: 'detail', id: `kpi-${id}-detail` }, detail),
    spark);
}

function draw(k) {
  const s = k.summary;
  const ser = k.series;
  const lat = (x) => `p50 ${fmtMs(x.p50)} · p99 ${fmtMs(x.p99)}`;
  const cards = [
    card('create', 'Create latency', lat(s.create_latency_ms),
      `${s.create_latency_ms.count} creations, ${s.create_latency_ms.errors} failed`,
      sparkline('create latency p50 and p99 per bucket', ser.create_p50_ms, ser.create_p99_ms)),
    card('execute', 'Execute latency', lat(s.execute_latency_ms),
      `${s.execute_latency_ms.count} execute requests, ${s.execute_latency_ms.errors} failed`,
      sparkline('execute latency p50 and p99 per bucket', ser.execute_p50_ms, ser.execute_p99_ms)),
    card('executions', 'Executions', fmtCount(s.error_rate.executions),
      `${s.error_rate.failed} ended in error, timeout, OOM or killed`,
      sparkline('executions per bucket', ser.executions, ser.executions_failed)),
    card('error-rate', 'Error rate', fmtRatio(s.error_rate.ratio),
      `HTTP 5xx: ${fmtRatio(s.error_rate.http_5xx_ratio)} of ${s.error_rate.http_requests} requests`,
      sparkline('failed executions per bucket', ser.error_ratio)),
    card('violations', 'Policy-violation rate', fmtRatio(s.policy_violation_rate.ratio),
      `${s.policy_violation_rate.denied} denied of ${s.policy_violation_rate.decisions} decisions · ${s.policy_violation_rate.findings} guardrail findings`,
      sparkline('denied decisions per bucket', ser.denied, ser.findings)),
    card('containment', 'Mean time to containment', fmtMs(s.containment.mean_ms),
      `${s.containment.count} contained · max ${fmtMs(s.containment.max_ms)}`,
      sparkline('mean time to containment per bucket', ser.containment_mean_ms)),
    card('recovery', 'Time to recover', fmtMs(s.recovery.mean_ms),
      `${s.recovery.count} restarts in place · max ${fmtMs(s.recovery.max_ms)}`,
      sparkline('mean time to recover per bucket', ser.recovery_mean_ms)),
    card('queues', 'Queue depths',
      `${k.queues.reviews_pending} · ${k.queues.jobs_queued} · ${k.queues.creates_waiting}`,
      'reviews pending · jobs queued · creations in flight (now)',
      sparkline('queue depths per bucket', ser.reviews_pending, ser.jobs_queued, ser.creates_waiting)),
  ];
  root.replaceChildren(...cards);
  updated.textContent = `· updated ${new Date().toLocaleTimeString()}`;
  root.dataset.loads = String(Number(root.dataset.loads || 0) + 1);
}

// One fetch at a time; events that arrive meanwhile ask for one more after it.
let inFlight = null;
let again = false;

async function load() {
  if (inFlight) {
    again = true;
    return inFlight;
  }
  inFlight = (async () => {
    do {
      again = false;
      const k = await api('GET', `/v1/kpis?window=${encodeURIComponent(windowName)}`);
      draw(k);
      // A burst of events is one more request, a quarter second on: not one per event.
      if (again) await new Promise((r) => setTimeout(r, 250));
    } while (again);
  })();
  try {
    await inFlight;
  } finally {
    inFlight = null;
  }
  return null;
}

async function live() {
  let delay = 1000;
  for (;;) {
    try {
      const resp = await api('GET', '/v1/events?tenant=*', undefined, {
        raw: true,
        headers: { Accept: 'text/event-stream' },
      });
      await load();
      liveState.textContent = 'live';
      delay = 1000;
      await readEvents(resp, () => {
        load().catch((e) => say(`Could not refresh the KPIs: ${e.message}`, true));
      });
    } catch (e) {
      if (e.name === 'AbortError') return;
      if (e.status === 401 || e.status === 403) {
        liveState.textContent = e.status === 401 ? 'signed out' : 'not live';
        return;
      }
    }
    liveState.textContent = 'reconnecting…';
    await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(delay * 2, 30000);
  }
}

const here = document.querySelector('nav a[href="/console/kpis"]');
if (here) here.setAttribute('aria-current', 'page');

for (const b of document.querySelectorAll('button[data-window]')) {
  b.addEventListener('click', () => {
    windowName = b.dataset.window === '1d' ? '1d' : '1h';
    for (const o of document.querySelectorAll('button[data-window]')) {
      o.setAttribute('aria-pressed', String(o === b));
    }
    load().catch((e) => say(`Could not load the KPIs: ${e.message}`, true));
  });
}

async function start() {
  try {
    await load();
  } catch (e) {
    if (e.status === 403) {
      note.textContent = 'The KPIs are server-wide: sign in with the operator key (an admin key of tenant default) to see them.';
      note.hidden = false;
      liveState.textContent = 'not live';
      return;
    }
    say(`Could not load the KPIs: ${e.message}`, true);
  }
  live();
}

start();
