// The Policy page: the set in force, its history with diffs between versions (the operator's:
// the history names every tenant), the decisions filtered by gate, outcome, tenant and policy,
// and the "what if" evaluator (POST /v1/policies/evaluate: decides without acting).
import { api, h, say } from './console.js';
import { lineDiff } from './diff.js';

const $ = (id) => document.getElementById(id);
let me = null;
let currentText = '';

const isOperator = () => me && me.role === 'admin' && me.tenant === 'default';

async function loadCurrent() {
  const info = await api('GET', '/v1/policies');
  $('current-version').textContent = info.version;
  $('current-count').textContent = String(info.policies.length);
  currentText = info.policies.map((p) => p.text).join('\n\n');
  $('current-text').textContent = currentText;
  $('current-by').textContent = '(the operator sees who set it)';
  $('current-at').textContent = '';
  return info;
}

async function loadHistory() {
  if (!isOperator()) {
    $('history-note').hidden = false;
    $('history-note').textContent = 'The history of every set names every tenant: only the operator sees it.';
    $('versions').hidden = true;
    return;
  }
  const list = await api('GET', '/v1/policies/versions');
  const tbody = document.querySelector('#versions tbody');
  tbody.replaceChildren();
  const versions = list.versions;
  const current = versions.find((v) => v.version === list.current);
  if (current) {
    const full = await api('GET', `/v1/policies/versions/${encodeURIComponent(current.seq)}`);
    currentText = full.text;
    $('current-text').textContent = full.text;
    $('current-by').textContent = full.set_by;
    $('current-at').textContent = full.at;
  }
  versions.forEach((v, i) => {
    const older = versions[i + 1];
    const compare = older
      ? h('button', { type: 'button', onclick: () => showDiff(older, v) }, `Diff with #${older.seq}`)
      : h('span', {}, 'first');
    tbody.append(h('tr', { 'data-seq': v.seq },
      h('td', {}, String(v.seq)),
      h('td', {}, v.version, v.version === list.current ? h('strong', {}, ' (in force)') : null),
      h('td', {}, v.set_by),
      h('td', {}, v.at),
      h('td', {}, compare)));
  });
}

async function showDiff(older, newer) {
  try {
    const [a, b] = await Promise.all([
      api('GET', `/v1/policies/versions/${encodeURIComponent(older.seq)}`),
      api('GET', `/v1/policies/versions/${encodeURIComponent(newer.seq)}`),
    ]);
    const pre = $('diff-text');
    pre.replaceChildren(...lineDiff(a.text, b.text).map((d) => h('span', {
      class: d.op === '+' ? 'add' : d.op === '-' ? 'del' : 'same',
    }, `${d.op} ${d.line}\n`)));
    $('diff-title').textContent = `Diff: #${older.seq} (${older.version}) → #${newer.seq} (${newer.version})`;
    $('diff').hidden = false;
    pre.focus();
  } catch (e) {
    say(`Could not diff: ${e.message}`, true);
  }
}

async function loadDecisions() {
  const params = new URLSearchParams();
  for (const [name, id] of [['gate', 'df-gate'], ['outcome', 'df-outcome'], ['tenant', 'df-tenant'], ['policy', 'df-policy']]) {
    const v = $(id).value.trim();
    if (v) params.set(name, v);
  }
  params.set('limit', '200');
  const tbody = document.querySelector('#decisions tbody');
  try {
    const list = await api('GET', `/v1/decisions?${params}`);
    tbody.replaceChildren(...list.decisions.map((d) => h('tr', {},
      h('td', {}, d.at),
      h('td', {}, d.gate),
      h('td', {}, d.tenant || ''),
      h('td', {}, d.resource),
      h('td', { class: d.allowed ? 'ok' : 'bad' }, d.allowed ? 'allowed' : 'denied'),
      h('td', {}, d.policies.join(', ')),
      h('td', {}, d.reason))));
    $('decisions-empty').hidden = list.decisions.length > 0;
  } catch (e) {
    say(`Could not list decisions: ${e.message}`, true);
  }
}

async function evaluate(ev) {
  ev.preventDefault();
  let fields = {};
  const raw = $('wi-fields').value.trim();
  if (raw) {
    try {
      fields = JSON.parse(raw);
    } catch (e) {
      say(`The request fields are not JSON: ${e.message}`, true);
      $('wi-fields').focus();
      return;
    }
    if (!fields || typeof fields !== 'object' || Array.isArray(fields)) {
      say('The request fields must be a JSON object.', true);
      return;
    }
  }
  const request = { ...fields, gate: $('wi-gate').value };
  const tenant = $('wi-tenant').value.trim();
  if (tenant) request.principal = { ...(request.principal || {}), tenant };
  const body = { request };
  const draft = $('wi-draft').value;
  if (draft.trim()) body.policies = draft;
  say('Evaluating…');
  try {
    const a = await api('POST', '/v1/policies/evaluate', body);
    $('wi-decision').textContent = a.decision;
    $('wi-decision').className = a.decision === 'allow' ? 'ok' : 'bad';
    $('wi-policies').textContent = a.policies.length ? a.policies.join(', ') : '(none: the default deny)';
    $('wi-reasons').textContent = a.reasons.join('; ');
    $('wi-errors').textContent = a.errors.length ? a.errors.join('; ') : 'none';
    $('wi-version').textContent = `${a.draft ? 'the draft' : 'the set in force'} (version ${a.version}); nothing was run or recorded`;
    $('whatif-answer').hidden = false;
    say(`What if: ${a.decision}.`);
  } catch (e) {
    $('whatif-answer').hidden = true;
    say(`What if failed: ${e.message}`, true);
  }
}

$('whatif').addEventListener('submit', evaluate);
$('wi-copy').addEventListener('click', () => {
  $('wi-draft').value = currentText;
  $('wi-draft').focus();
});
$('decision-filter').addEventListener('submit', (ev) => {
  ev.preventDefault();
  loadDecisions();
});

(async () => {
  try {
    me = await api('GET', '/v1/whoami');
    if (!isOperator()) $('df-tenant').closest('form').querySelector('[for="df-tenant"]').textContent = 'Tenant (yours only)';
    await loadCurrent();
    await loadHistory();
    await loadDecisions();
  } catch (e) {
    say(`Could not load the policy: ${e.message}`, true);
  }
})();
