// A sandbox's page: its facts, its executions as a notebook (a new cell's output streamed as
// it is produced), and its workspace files (browse, download, upload).
import { api, h, say, age, readEvents, encodePath, ApiError } from './console.js';
import { output } from './render.js';
import { panels } from './sandbox-panels.js';

const id = document.body.dataset.sandbox;
const base = `/v1/sandboxes/${encodeURIComponent(id)}`;
document.getElementById('sandbox-id').textContent = id;
const cells = document.getElementById('cells');

async function facts() {
  const sb = await api('GET', base);
  const dl = document.getElementById('facts');
  dl.replaceChildren();
  const items = [
    ['State', sb.state],
    ['Template', sb.template],
    ['Tenant', sb.tenant || ''],
    ['Created', `${sb.created_at} (${age(sb.created_at)} ago)`],
    ['Restarts', String(sb.restart_count ?? 0)],
  ];
  if (sb.forked_from) items.push(['Forked from', sb.forked_from]);
  if (sb.contained) items.push(['Contained', sb.contained]);
  for (const [k, v] of items) dl.append(h('dt', {}, k), h('dd', {}, v));
}

function head(language, startedAt, result) {
  const parts = [language, startedAt || ''];
  if (result) {
    parts.push(result.end_state, `${Math.round(result.duration_ms)} ms`);
    if (result.exit_code !== undefined && result.exit_code !== null) parts.push(`exit ${result.exit_code}`);
  }
  return h('div', { class: 'cell-head' }, parts.filter(Boolean).map((p) => h('span', {}, p)));
}

function artifacts(result) {
  if (!result || !result.artifacts || result.artifacts.length === 0) return null;
  return h('ul', { class: 'artifacts', 'aria-label': 'Files this cell wrote' },
    result.artifacts.map((a) => h('li', {}, downloadButton(a.path), ` ${a.size ?? ''} bytes`)));
}

function cell(record) {
  const result = record.result;
  const outs = h('div', { class: 'outputs' });
  for (const ev of (result && result.outputs) || []) {
    const el = output(ev);
    if (el) outs.append(el);
  }
  return h('li', { class: 'cell', 'data-execution': record.id },
    head(record.language, record.started_at, result),
    h('pre', { class: 'code' }, record.code),
    outs,
    artifacts(result));
}

async function notebook() {
  const list = await api('GET', `${base}/executions`);
  cells.replaceChildren(...list.executions.map(cell));
}

// When each piece of streamed output reached the page, as a User Timing mark carrying its text
// (sandlot-bench's console benchmark reads them to time a line from the sandbox to the page).
// Bounded, so a cell that prints for hours does not grow the page's timeline without end.
const MAX_OUTPUT_MARKS = 10000;
let outputMarks = 0;

function markOutput(text) {
  if (outputMarks >= MAX_OUTPUT_MARKS || typeof text !== 'string') return;
  outputMarks += 1;
  performance.mark('sandlot:output', { detail: text.slice(0, 256) });
}

async function run(code, language) {
  const outs = h('div', { class: 'outputs', 'aria-live': 'polite' });
  const headSlot = head(language, new Date().toISOString(), null);
  const li = h('li', { class: 'cell' }, headSlot, h('pre', { class: 'code' }, code), outs);
  cells.append(li);
  say('Running…');
  // Consecutive stdout (or stderr) chunks extend one block, as a terminal would show them.
  let last = null;
  try {
    const resp = await api('POST', `${base}/execute`, { code, language, stream: true }, {
      raw: true,
      headers: { Accept: 'text/event-stream' },
    });
    await readEvents(resp, (name, ev) => {
      if (name === 'done') {
        headSlot.replaceWith(head(language, ev.started_at, ev));
        const a = artifacts(ev);
        if (a) li.append(a);
        say(`Finished: ${ev.end_state}.`);
        return;
      }
      if (name === 'api_error') {
        outs.append(h('pre', { class: 'error' }, (ev.error && ev.error.message) || 'the execution failed'));
        say('The execution failed.', true);
        return;
      }
      if ((name === 'stdout' || name === 'stderr') && last && last.dataset.type === name) {
        last.append(document.createTextNode(ev.text));
        markOutput(ev.text);
        return;
      }
      const el = output(ev);
      if (!el) return;
      el.dataset.type = name;
      last = el;
      outs.append(el);
      if (name === 'stdout' || name === 'stderr') markOutput(ev.text);
    });
  } catch (e) {
    outs.append(h('pre', { class: 'error' }, e instanceof ApiError ? `${e.code}: ${e.message}` : String(e)));
    say(`Could not run the cell: ${e.message}`, true);
  }
  facts().catch(() => {});
  files().catch(() => {});
  record.refresh();
}

const form = document.getElementById('run');
const codeBox = document.getElementById('code');
form.addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const code = codeBox.value;
  if (!code.trim()) return;
  const button = document.getElementById('run-button');
  button.disabled = true;
  try {
    await run(code, document.getElementById('language').value);
  } finally {
    button.disabled = false;
  }
});
codeBox.addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) {
    ev.preventDefault();
    form.requestSubmit();
  }
});
document.getElementById('interrupt').addEventListener('click', async () => {
  try {
    const r = await api('POST', `${base}/interrupt`);
    say(r.interrupted ? 'Interrupted.' : 'Nothing was running.');
  } catch (e) {
    say(`Interrupt failed: ${e.message}`, true);
  }
});

// Files.
let folder = '';

function downloadButton(path) {
  return h('button', {
    type: 'button',
    onclick: async () => {
      try {
        const resp = await api('GET', `${base}/files/${encodePath(path)}`, undefined, { raw: true });
        const url = URL.createObjectURL(await resp.blob());
        const a = h('a', { href: url, download: path.split('/').pop() || 'download' });
        document.body.append(a);
        a.click();
        a.remove();
        setTimeout(() => URL.revokeObjectURL(url), 10000);
      } catch (e) {
        say(`Download failed: ${e.message}`, true);
      }
    },
  }, `Download ${path}`);
}

async function files() {
  const q = folder ? `?path=${encodeURIComponent(folder)}` : '';
  const list = await api('GET', `${base}/files${q}`);
  document.getElementById('folder').textContent = folder || '.';
  const tbody = document.querySelector('#files tbody');
  tbody.replaceChildren(...list.entries.map((e) => {
    const name = e.kind === 'dir'
      ? h('button', { type: 'button', onclick: () => { folder = e.path; files(); } }, `${e.name}/`)
      : e.name;
    return h('tr', {},
      h('td', {}, name),
      h('td', {}, e.kind),
      h('td', {}, e.kind === 'file' ? String(e.size) : ''),
      h('td', {}, e.kind === 'file' ? downloadButton(e.path) : ''));
  }));
}

document.getElementById('up').addEventListener('click', () => {
  folder = folder.split('/').slice(0, -1).join('/');
  files().catch((e) => say(e.message, true));
});
document.getElementById('refresh').addEventListener('click', () => files().catch((e) => say(e.message, true)));
document.getElementById('upload').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const input = document.getElementById('upload-file');
  const file = input.files[0];
  if (!file) return;
  const path = folder ? `${folder}/${file.name}` : file.name;
  try {
    await api('PUT', `${base}/files/${encodePath(path)}`, file);
    say(`Uploaded ${path}.`);
    input.value = '';
    await files();
  } catch (e) {
    say(`Upload failed: ${e.message}`, true);
  }
});

Promise.all([facts(), notebook(), files()]).catch((e) => say(e.message, true));
// Family, egress attempts and findings, live from this sandbox's events (state changes
// refresh the facts too).
const record = panels(id, (name) => {
  if (name !== 'executed') facts().catch(() => {});
});
