// The Record page: the audit chain's state (GET /v1/audit/status: verified up to record N,
// the last signed checkpoint), the records' export, and the lineage of an artifact or an
// execution (GET /v1/lineage/...) drawn as a layered graph in SVG, each node a link.
import { api, h, say } from './console.js';

const $ = (id) => document.getElementById(id);
const SVG = 'http://www.w3.org/2000/svg';
/** Most nodes drawn: a larger lineage is cut, and the caption says so. */
export const MAX_NODES = 150;
/** Most records one export downloads. */
const MAX_EXPORT = 100_000;

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) el.setAttribute(k, String(v));
  for (const c of children.flat()) if (c !== null && c !== undefined) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

async function loadChain() {
  try {
    const s = await api('GET', '/v1/audit/status');
    $('chain-note').hidden = true;
    $('chain').hidden = false;
    $('chain-state').textContent = s.enabled ? s.state : `${s.state} (recording off)`;
    $('chain-records').textContent = String(s.records);
    $('chain-verified').textContent = s.verified
      ? `verified up to record ${s.verified_to}${s.verified_from > 1 ? ` (from ${s.verified_from})` : ''}`
      : `verification FAILED after record ${s.verified_to}: ${JSON.stringify(s.failure)}`;
    $('chain-verified').className = s.verified ? 'ok' : 'bad';
    $('chain-checkpoint').textContent = s.checkpoint
      ? `record ${s.checkpoint.seq}${s.checkpoint.at ? ` at ${s.checkpoint.at}` : ''}, signed by key ${s.checkpoint.key_id}`
      : 'none signed yet';
    $('chain-at').textContent = `${s.verified_at} (${(s.verify_seconds * 1000).toFixed(1)} ms)`;
    $('chain-key').textContent = s.verifier_key;
  } catch (e) {
    $('chain').hidden = true;
    $('chain-note').hidden = false;
    $('chain-note').textContent = e.status === 403
      ? 'The audit chain is the operator\'s to read: sign in with the operator key.'
      : `Could not read the audit chain: ${e.message}`;
  }
}

async function exportRecords() {
  say('Exporting the audit records…');
  const records = [];
  let after = 0;
  try {
    for (;;) {
      const page = await api('GET', `/v1/audit?limit=1000&after=${after}`);
      records.push(...page.records);
      if (page.next === null || page.next === undefined || records.length >= MAX_EXPORT) break;
      after = page.next;
    }
  } catch (e) {
    say(`Export failed: ${e.message}`, true);
    return;
  }
  const blob = new Blob([records.map((r) => JSON.stringify(r)).join('\n') + '\n'], { type: 'application/x-ndjson' });
  const url = URL.createObjectURL(blob);
  const a = h('a', { href: url, download: 'sandlot-audit.jsonl' }, 'download');
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
  say(`Exported ${records.length} records${records.length >= MAX_EXPORT ? ' (the first ones only)' : ''}.`);
}

// ---------------------------------------------------------------------------------------------
// Lineage as a graph: nodes keyed by kind and id, edges from what something came from to it.

class Graph {
  constructor() {
    this.nodes = new Map();
    this.edges = [];
    this.cut = false;
  }

  node(kind, id, label, href) {
    const key = `${kind}:${id}`;
    if (!this.nodes.has(key)) {
      if (this.nodes.size >= MAX_NODES) {
        this.cut = true;
        return null;
      }
      this.nodes.set(key, { key, kind, id, label, href });
    }
    return key;
  }

  edge(from, to) {
    if (from && to && from !== to && !this.edges.some((e) => e.from === from && e.to === to)) this.edges.push({ from, to });
  }
}

const short = (s, n = 12) => (s && s.length > n ? `${s.slice(0, n)}…` : s || '');
const sandboxHref = (id) => `/console/sandboxes/${encodeURIComponent(id)}`;
const executionHref = (id) => `/console/record?execution=${encodeURIComponent(id)}`;
const artifactHref = (sha) => `/console/record?artifact=${encodeURIComponent(sha)}`;

function addSandbox(g, sb, parents) {
  const s = g.node('sandbox', sb.id || sb.sandbox_id, `sandbox ${sb.id || sb.sandbox_id}`, sandboxHref(sb.id || sb.sandbox_id));
  if (sb.template) g.edge(g.node('template', `${sb.template}@${sb.template_version || ''}`, `template ${sb.template} ${short(sb.template_version, 8)}`), s);
  let child = s;
  for (const p of parents || []) {
    const id = p.sandbox_id || p.snapshot_id;
    if (!id) break;
    const label = p.relation === 'from_snapshot' ? `snapshot of ${p.sandbox_id || '?'}` : `sandbox ${id}`;
    const parent = g.node('sandbox', id, label, p.sandbox_id ? sandboxHref(p.sandbox_id) : undefined);
    g.edge(parent, child);
    child = parent;
  }
  return s;
}

function fromExecution(g, l) {
  const x = l.execution;
  const ex = g.node('execution', x.id, `execution ${x.id} (${x.end_state || 'running'})`, executionHref(x.id));
  g.edge(addSandbox(g, l.sandbox, l.parents), ex);
  if (l.policy && l.policy.version) g.edge(g.node('policy', l.policy.version, `policy ${short(l.policy.version, 8)}`), ex);
  for (const i of l.inputs || []) g.edge(g.node('artifact', i.sha256, `input ${i.path}`, artifactHref(i.sha256)), ex);
  for (const o of l.outputs || []) {
    if (o.sha256) g.edge(ex, g.node('artifact', o.sha256, `${o.path} (${short(o.sha256, 8)})`, artifactHref(o.sha256)));
  }
  for (const f of (l.guardrails && l.guardrails.findings) || []) g.edge(ex, g.node('finding', `${f.rule}:${f.at}`, `finding ${f.rule} (${f.outcome})`));
}

function fromArtifact(g, sha, l) {
  const art = g.node('artifact', sha, `artifact ${short(sha, 12)}`, artifactHref(sha));
  for (const p of l.produced_by || []) {
    const ex = g.node('execution', p.execution_id, `execution ${p.execution_id} → ${p.path}`, executionHref(p.execution_id));
    g.edge(ex, art);
    const sb = addSandbox(g, { id: p.sandbox_id, template: p.template, template_version: p.template_version }, p.parents);
    g.edge(sb, ex);
    if (p.policy_version) g.edge(g.node('policy', p.policy_version, `policy ${short(p.policy_version, 8)}`), ex);
  }
  for (const u of l.uploaded_as || []) {
    const up = g.node('upload', `${u.sandbox_id}:${u.path}:${u.at}`, `upload ${u.path}`);
    g.edge(up, art);
    g.edge(addSandbox(g, { id: u.sandbox_id }, []), up);
  }
}

/** Layers by longest path from the sources (cycles, which lineage has not, are cut). */
export function layers(g) {
  const layer = new Map();
  const incoming = new Map([...g.nodes.keys()].map((k) => [k, []]));
  for (const e of g.edges) incoming.get(e.to)?.push(e.from);
  const visiting = new Set();
  const depth = (k) => {
    if (layer.has(k)) return layer.get(k);
    if (visiting.has(k)) return 0;
    visiting.add(k);
    const d = Math.max(-1, ...incoming.get(k).map(depth)) + 1;
    visiting.delete(k);
    layer.set(k, d);
    return d;
  };
  for (const k of g.nodes.keys()) depth(k);
  return layer;
}

function draw(g, caption) {
  const layer = layers(g);
  const columns = [];
  for (const [k, d] of layer) (columns[d] ||= []).push(k);
  const W = 230;
  const H = 34;
  const GAP_X = 60;
  const GAP_Y = 14;
  const pos = new Map();
  columns.forEach((keys, c) => keys.forEach((k, r) => pos.set(k, { x: 10 + c * (W + GAP_X), y: 10 + r * (H + GAP_Y) })));
  const width = 20 + columns.length * (W + GAP_X) - GAP_X;
  const height = 20 + Math.max(...columns.map((k) => k.length)) * (H + GAP_Y) - GAP_Y;
  const edges = g.edges.map((e) => {
    const a = pos.get(e.from);
    const b = pos.get(e.to);
    return svg('path', { d: `M${a.x + W},${a.y + H / 2} C${a.x + W + GAP_X / 2},${a.y + H / 2} ${b.x - GAP_X / 2},${b.y + H / 2} ${b.x},${b.y + H / 2}`, class: 'edge', 'marker-end': 'url(#arrow)' });
  });
  const nodes = [...g.nodes.values()].map((n) => {
    const p = pos.get(n.key);
    const box = svg('g', { class: `node node-${n.kind}`, transform: `translate(${p.x},${p.y})` },
      svg('rect', { width: W, height: H, rx: 5 }),
      svg('text', { x: 8, y: H / 2 + 5 }, n.label.length > 34 ? `${n.label.slice(0, 33)}…` : n.label),
      svg('title', {}, `${n.kind} ${n.id}`));
    // The link's name is its visible text (no aria-label that could differ from it).
    return n.href ? svg('a', { href: n.href }, box) : box;
  });
  const figure = svg('svg', { viewBox: `0 0 ${width} ${height}`, width, height, role: 'group', 'aria-labelledby': 'lineage-caption' },
    svg('defs', {}, svg('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
      svg('path', { d: 'M0,0 L10,5 L0,10 z', class: 'arrow' }))),
    edges, nodes);
  $('lineage-graph').replaceChildren(figure);
  $('lineage-caption').textContent = `${caption}: ${g.nodes.size} nodes, ${g.edges.length} edges${g.cut ? ` (cut at ${MAX_NODES} nodes)` : ''}.`;
  $('lineage-figure').hidden = false;
}

async function drawLineage(kind, id) {
  const g = new Graph();
  say(`Drawing the lineage of ${kind} ${id}…`);
  try {
    const l = await api('GET', `/v1/lineage/${kind}/${encodeURIComponent(id)}`);
    if (kind === 'execution') fromExecution(g, l);
    else fromArtifact(g, id, l);
    draw(g, `Lineage of ${kind} ${id}`);
    say(`Lineage of ${kind} ${id} drawn.`);
  } catch (e) {
    $('lineage-figure').hidden = true;
    say(`No lineage for ${kind} ${id}: ${e.message}`, true);
  }
}

$('chain-refresh').addEventListener('click', loadChain);
$('export').addEventListener('click', exportRecords);
$('lineage-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const kind = $('lineage-kind').value;
  const id = $('lineage-id').value.trim();
  if (id) drawLineage(kind, id);
});

loadChain();
const params = new URLSearchParams(window.location.search);
for (const kind of ['execution', 'artifact']) {
  const id = params.get(kind);
  if (id) {
    $('lineage-kind').value = kind;
    $('lineage-id').value = id;
    drawLineage(kind, id);
    break;
  }
}
