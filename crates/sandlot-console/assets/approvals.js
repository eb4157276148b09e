// The Approvals page: the held actions (GET /v1/reviews, pending first), approved or denied
// with a reason (POST /v1/reviews/{id}/approve|deny). Live from /v1/events: a review event
// (or, from a server that sends none, any event) reloads the queue; nothing polls. The
// countdowns run on a local timer that fetches nothing.
import { api, h, say, age, word, readEvents } from './console.js';

const tbody = document.querySelector('#reviews tbody');
const empty = document.getElementById('empty');
const liveState = document.getElementById('live-state');

/** What is held, as text: the code of an execution, the host of an egress, else the JSON. */
function summary(r) {
  const q = r.request || {};
  if (typeof q.code === 'string') {
    return h('div', {},
      h('span', {}, `${q.language || 'code'} in ${q.sandbox || '?'}${q.code_truncated ? ' (truncated)' : ''}:`),
      h('pre', { class: 'code' }, q.code));
  }
  if (typeof q.host === 'string') return h('span', {}, `${q.host}:${q.port ?? ''} from ${q.sandbox || '?'}`);
  return h('pre', { class: 'code' }, JSON.stringify(q, null, 1));
}

function left(expiresAt) {
  const t = Date.parse(expiresAt);
  if (Number.isNaN(t)) return '';
  const s = Math.round((t - Date.now()) / 1000);
  if (s <= 0) return 'timing out';
  if (s < 120) return `${s} s`;
  return `${Math.floor(s / 60)} m`;
}

function decideCell(r) {
  if (r.state !== 'pending') {
    const by = r.decided_by ? `${r.state} by ${r.decided_by}` : r.state;
    return h('td', {}, by, r.decision_reason ? h('div', { class: 'muted' }, r.decision_reason) : null);
  }
  const inputId = `reason-${r.id}`;
  const reason = h('input', { id: inputId, name: 'reason', size: 18, placeholder: 'reason' });
  const go = async (verb) => {
    const why = reason.value.trim() || `${verb}d in the console`;
    say(`${verb === 'approve' ? 'Approving' : 'Denying'} ${r.id}…`);
    try {
      await api('POST', `/v1/reviews/${encodeURIComponent(r.id)}/${verb}`, { reason: why });
      say(`${r.id} ${verb === 'approve' ? 'approved' : 'denied'}.`);
    } catch (e) {
      say(`Could not ${verb} ${r.id}: ${e.message}`, true);
    }
    reload();
  };
  return h('td', { class: 'actions' },
    h('label', { for: inputId, class: 'visually-hidden' }, `Reason for ${r.id}`),
    reason,
    h('button', { type: 'button', 'data-verb': 'approve', onclick: () => go('approve') }, 'Approve'),
    h('button', { type: 'button', 'data-verb': 'deny', onclick: () => go('deny') }, 'Deny'));
}

function row(r) {
  return h('tr', { 'data-id': r.id, 'data-state': word(r.state) },
    h('td', {}, r.id),
    h('td', { class: `state-${word(r.state)}` }, r.state),
    h('td', {}, r.gate),
    h('td', {}, r.tenant),
    h('td', {}, r.key_id),
    h('td', {}, summary(r)),
    h('td', {}, r.reason),
    h('td', { 'data-created': r.created_at, title: r.created_at }, age(r.created_at)),
    h('td', { 'data-expires': r.state === 'pending' ? r.expires_at : undefined }, r.state === 'pending' ? left(r.expires_at) : ''),
    decideCell(r));
}

let loading = null;
async function reload() {
  if (loading) return loading;
  loading = (async () => {
    try {
      const [pending, recent] = await Promise.all([
        api('GET', '/v1/reviews?state=pending&limit=500'),
        api('GET', '/v1/reviews?limit=50'),
      ]);
      const seen = new Set(pending.reviews.map((r) => r.id));
      const rest = recent.reviews.filter((r) => !seen.has(r.id));
      // Pending first, oldest (closest to timing out) first; then the latest decided.
      const ordered = pending.reviews.slice().sort((a, b) => a.expires_at.localeCompare(b.expires_at)).concat(rest);
      // Keep what a person is typing: a pending row whose review is unchanged stays as is.
      const old = new Map([...tbody.querySelectorAll('tr[data-id]')].map((tr) => [tr.dataset.id, tr]));
      const rows = ordered.map((r) => {
        const tr = old.get(r.id);
        return tr && tr.dataset.state === r.state && r.state === 'pending' ? tr : row(r);
      });
      tbody.replaceChildren(...rows);
      empty.hidden = rows.length > 0;
    } catch (e) {
      say(`Could not list the held actions: ${e.message}`, true);
    } finally {
      loading = null;
    }
  })();
  return loading;
}

let pendingReload = null;
function soon() {
  if (pendingReload) return;
  pendingReload = setTimeout(() => {
    pendingReload = null;
    reload();
  }, 150);
}

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
      let reviewEvents = false;
      await readEvents(resp, (name) => {
        if (name.startsWith('review.')) {
          reviewEvents = true;
          soon();
        } else if (!reviewEvents) {
          // A server without review events: anything that happened may have held or
          // released an action.
          soon();
        }
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

document.getElementById('refresh').addEventListener('click', () => reload());

// Ages and countdowns move on by themselves: a local timer rewrites them, nothing is fetched.
setInterval(() => {
  for (const td of tbody.querySelectorAll('td[data-created]')) td.textContent = age(td.dataset.created);
  for (const td of tbody.querySelectorAll('td[data-expires]')) td.textContent = left(td.dataset.expires);
}, 1000);

live();
