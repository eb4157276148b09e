// The sandbox page's governance panels: its fork/snapshot family (parents from
// GET /v1/lineage/sandbox/{id}, snapshots from GET /v1/snapshots, children from the tenant's
// sandbox list), its egress attempts (GET /v1/sandboxes/{id}/egress: allowed, denied, or held
// for review) and its guardrail findings (GET /v1/sandboxes/{id}/findings; a contained
// sandbox says which rule contained it). Kept live from GET /v1/events: this sandbox's
// lifecycle events, and review events (an approval changes what its egress attempts become),
// refresh them, at most once per burst; no timer polls. Server data only ever goes in as text.
import { api, h, say, readEvents, pageSignal } from './console.js';

const MAX_EGRESS_ROWS = 200;

export function panels(id, onSandboxEvent) {
  const base = `/v1/sandboxes/${encodeURIComponent(id)}`;
  const link = (sid) => h('a', { href: `/console/sandboxes/${encodeURIComponent(sid)}` }, sid);

  async function family() {
    const [lineage, snaps, list] = await Promise.all([
      api('GET', `/v1/lineage/sandbox/${encodeURIComponent(id)}`).catch(() => ({ parents: [] })),
      api('GET', '/v1/snapshots').catch(() => ({ snapshots: [] })),
      api('GET', '/v1/sandboxes').catch(() => ({ sandboxes: [] })),
    ]);
    const mine = (snaps.snapshots || []).filter((s) => s.sandbox_id === id);
    const mineIds = new Set(mine.map((s) => s.id));
    const items = [];
    for (const p of (lineage.parents || []).slice().reverse()) {
      const what = p.relation === 'forked_from' ? 'forked from' : 'restored from snapshot';
      items.push(h('li', { class: 'parent' }, `Parent (${what}${p.snapshot_id ? ` ${p.snapshot_id}` : ''}): `,
        p.sandbox_id ? link(p.sandbox_id) : 'gone',
        p.state ? ` (${p.state})` : ''));
    }
    items.push(h('li', { class: 'self' }, h('strong', {}, `This sandbox: ${id}`)));
    for (const s of mine) {
      items.push(h('li', { class: 'snapshot' }, `Snapshot ${s.id}`, s.created_at ? ` taken ${s.created_at}` : ''));
    }
    for (const c of list.sandboxes || []) {
      if (c.id === id) continue;
      if (c.forked_from === id) items.push(h('li', { class: 'child' }, 'Child (fork): ', link(c.id), ` (${c.state})`));
      else if (c.from_snapshot && mineIds.has(c.from_snapshot)) {
        items.push(h('li', { class: 'child' }, `Child (from snapshot ${c.from_snapshot}): `, link(c.id), ` (${c.state})`));
      }
    }
    document.getElementById('family').replaceChildren(...items);
  }

  function outcome(e) {
    if (e.allowed) return 'allowed';
    // The proxy's refusal of a held host reads "denied by policy: review pending: rev_… (why)".
    return /\breview pending\b/.test(e.reason || '') ? 'held' : 'denied';
  }

  async function egress() {
    const list = await api('GET', `${base}/egress`);
    const rows = (list.egress || []).slice(-MAX_EGRESS_ROWS).reverse();
    document.querySelector('#egress tbody').replaceChildren(...rows.map((e) => {
      const o = outcome(e);
      return h('tr', { 'data-outcome': o, 'data-host': e.host },
        h('td', {}, e.at),
        h('td', {}, e.host),
        h('td', {}, String(e.port)),
        h('td', { class: `egress-${o}` }, o),
        h('td', {}, e.reason || ''));
    }));
    document.getElementById('egress-empty').hidden = rows.length > 0;
  }

  async function findings() {
    const [list, sb] = await Promise.all([api('GET', `${base}/findings`), api('GET', base)]);
    const rows = (list.findings || []).slice().reverse();
    document.querySelector('#findings tbody').replaceChildren(...rows.map((f) => h('tr', {},
      h('td', {}, f.at || ''),
      h('td', {}, f.rule || ''),
      h('td', {}, f.kind || ''),
      h('td', {}, f.stream || ''),
      h('td', {}, f.outcome || ''),
      h('td', {}, f.execution_id || ''))));
    document.getElementById('findings-empty').hidden = rows.length > 0;
    const why = document.getElementById('contained-why');
    // Containment is the sandbox's `contained` (why, set by the guardrail that contained it);
    // the finding that did it is the one whose outcome is `contain`.
    if (sb.contained || sb.state === 'contained') {
      const finding = rows.find((f) => f.outcome === 'contain');
      const rule = finding ? `, finding ${finding.rule} in ${finding.stream || 'output'}` : '';
      why.textContent = `Contained: ${sb.contained || 'a guardrail finding'}${rule}.`;
      why.hidden = false;
    } else {
      why.hidden = true;
    }
  }

  const all = () => Promise.all([family(), egress(), findings()])
    .catch((e) => say(`Could not read the sandbox's record: ${e.message}`, true));

  // Refreshes at most once per burst of events.
  let pending = null;
  function soon() {
    if (pending) return;
    pending = setTimeout(() => {
      pending = null;
      all();
    }, 150);
  }

  // Closed while the page sits in the back/forward cache (as the Sandboxes list's): a hidden
  // page's stream would hold one of the browser's six connections and a tenant stream slot.
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
        delay = 1000;
        await readEvents(resp, (name, ev) => {
          if (name === 'lagged' || name === 'review.created' || name === 'review.decided') {
            soon();
            return;
          }
          if (ev && ev.sandbox_id === id) {
            soon();
            if (onSandboxEvent) onSandboxEvent(name, ev);
          } else if (ev && name === 'created') {
            // A child of this one (fork or restore) appears in the family.
            soon();
          }
        });
      } catch (e) {
        if (e.name === 'AbortError' || e.status === 401) return;
      }
      if (signal.aborted) return;
      await new Promise((r) => setTimeout(r, delay));
      if (signal.aborted) return;
      delay = Math.min(delay * 2, 30000);
    }
  }

  window.addEventListener('pagehide', (ev) => {
    if (ev.persisted && liveStop) {
      liveStop.abort();
      liveStop = null;
    }
  });
  window.addEventListener('pageshow', (ev) => {
    if (ev.persisted && !liveStop) {
      all();
      live();
    }
  });

  all();
  live();
  return { refresh: all };
}
