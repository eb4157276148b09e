// Shared by every console page: calls to the API with the session's CSRF token, Server-Sent
// Events read over fetch (EventSource cannot send that header), a DOM builder that only ever
// sets text (never HTML), and the sign-out button.
//
// Everything a sandbox produced is attacker-controlled: it reaches the page as text nodes,
// attribute values we build ourselves, data: images, or a sandboxed frame (render.js).

const meta = document.querySelector('meta[name="sandlot-csrf"]');
export const csrf = meta ? meta.content : '';

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// Every request of the page, ended at once when the person signs out (so none reaches the
// server after the session has gone).
const pageRequests = new AbortController();
/** Aborted when the person signs out: a page's own controllers follow it (AbortSignal.any). */
export const pageSignal = pageRequests.signal;

/** Calls the API as the signed-in session. `body`: a JS value (sent as JSON) or a Blob/File. */
export async function api(method, path, body, options = {}) {
  const headers = { 'X-Sandlot-CSRF': csrf, ...(options.headers || {}) };
  const signal = options.signal || pageRequests.signal;
  const init = { method, headers, credentials: 'same-origin', signal };
  if (body instanceof Blob) {
    init.body = body;
    headers['Content-Type'] = 'application/octet-stream';
  } else if (body !== undefined) {
    init.body = JSON.stringify(body);
    headers['Content-Type'] = 'application/json';
  }
  const resp = await fetch(path, init);
  if (!resp.ok) {
    let error = {};
    try {
      error = (await resp.json()).error || {};
    } catch (_) {
      // Not a JSON error body: the status says enough.
    }
    if (resp.status === 401) {
      say('Your session ended: sign in again.', true);
    }
    throw new ApiError(resp.status, error.code || 'error', error.message || resp.statusText);
  }
  if (options.raw) return resp;
  if (resp.status === 204) return null;
  return resp.json();
}

/**
 * Reads a text/event-stream response, calling `onEvent(name, data)` for each event (data
 * parsed as JSON when it is). Resolves when the stream ends.
 */
export async function readEvents(resp, onEvent) {
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, '\n');
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let name = 'message';
      const data = [];
      for (const line of block.split('\n')) {
        if (line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        let val = colon < 0 ? '' : line.slice(colon + 1);
        if (val.startsWith(' ')) val = val.slice(1);
        if (field === 'event') name = val;
        else if (field === 'data') data.push(val);
      }
      if (data.length === 0) continue;
      const text = data.join('\n');
      let parsed = text;
      try {
        parsed = JSON.parse(text);
      } catch (_) {
        // Plain text data.
      }
      onEvent(name, parsed);
    }
  }
}

/** Builds an element. Children are nodes or text (never parsed as HTML). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** Shows a message in the page's status line (announced to screen readers). */
export function say(text, bad = false) {
  const status = document.getElementById('status');
  if (!status) return;
  status.textContent = text;
  status.classList.toggle('bad', bad);
}

/** "3 m", "2 h" since an RFC 3339 time. */
export function age(rfc3339) {
  const t = Date.parse(rfc3339);
  if (Number.isNaN(t)) return '';
  const s = Math.max(0, Math.round((Date.now() - t) / 1000));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} m`;
  if (s < 86400) return `${Math.floor(s / 3600)} h`;
  return `${Math.floor(s / 86400)} d`;
}

/** A workspace path as URL path segments, each percent-encoded. */
export function encodePath(path) {
  return path.split('/').filter((p) => p !== '' && p !== '.').map(encodeURIComponent).join('/');
}

/** A class-name-safe word of a server value (a state), or "other". */
export function word(s) {
  return /^[a-z_]{1,32}$/.test(String(s)) ? s : 'other';
}

const signOut = document.getElementById('sign-out');
if (signOut) {
  signOut.addEventListener('click', async () => {
    pageRequests.abort();
    try {
      await api('DELETE', '/console/session', undefined, { signal: new AbortController().signal });
    } catch (_) {
      // Signed out already, or the server is gone: the sign-in page says which.
    }
    window.location.assign('/console');
  });
}
