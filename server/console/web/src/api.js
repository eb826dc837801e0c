// The console's only way to the data: the public HTTP API under /api/v1, found relative
// to the page so that it also works behind a proxy serving the service under a prefix.
// A bearer token, when the operator has one, is read from sessionStorage and sent in the
// Authorization header only: never in a URL (logs, history, Referer) nor in a cookie
// (sent by the browser on requests the page did not make).

import { h } from './dom.js';
import { noteServerClock } from './format.js';

export const TOKEN_KEY = 'rendezvous.token';
const TIMEOUT_MS = 8000; // an answer slower than this counts as the API being unreachable

const base = new URL('../api/v1/', document.baseURI);

// url builds an API URL from a path relative to /api/v1/ and query parameters; empty
// values are left out.
export function url(path, params) {
  const u = new URL(path, base);
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== '') u.searchParams.set(k, String(v));
  }
  return u;
}

// tokenStore keeps the token in sessionStorage: this tab only, gone when it closes.
// With storage disabled there is no token to keep, and the API answers 401.
export const tokenStore = {
  get() {
    try {
      return sessionStorage.getItem(TOKEN_KEY) || '';
    } catch {
      return '';
    }
  },
  set(t) {
    try {
      sessionStorage.setItem(TOKEN_KEY, t);
    } catch {
      // storage disabled: nothing is kept
    }
  },
  clear() {
    try {
      sessionStorage.removeItem(TOKEN_KEY);
    } catch {
      // nothing was kept
    }
  },
};

// Answer is what a request came back with: ok, status, and body (the parsed JSON, a
// problem for errors). Status 0 means no answer (network, timeout).
export class Answer {
  constructor(ok, status, body, message) {
    this.ok = ok;
    this.status = status;
    this.body = body;
    this.message = message;
  }

  // problem is the RFC 7807 body of a refusal, or one made up for a failure without one.
  get problem() {
    if (this.ok) return null;
    if (this.body && typeof this.body === 'object' && (this.body.title || this.body.detail)) return this.body;
    return { title: this.status ? `HTTP ${this.status}` : 'API unreachable', status: this.status || undefined, detail: this.message };
  }
}

// request sends one request and never throws: every outcome is an Answer.
export async function request(method, path, { params, body } = {}) {
  const headers = { Accept: 'application/json, application/problem+json' };
  const t = tokenStore.get();
  if (t) headers.Authorization = `Bearer ${t}`;
  const init = { method, headers, cache: 'no-store', credentials: 'omit' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
  }
  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(), TIMEOUT_MS);
  init.signal = ctrl.signal;
  try {
    const resp = await fetch(url(path, params), init);
    noteServerClock(resp);
    const text = await resp.text();
    let parsed = null;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      parsed = null;
    }
    return new Answer(resp.ok, resp.status, parsed, resp.ok ? '' : resp.statusText || 'error');
  } catch (err) {
    const msg = err && err.name === 'AbortError' ? `no answer within ${TIMEOUT_MS / 1000} s` : (err && err.message) || String(err);
    return new Answer(false, 0, null, msg);
  } finally {
    clearTimeout(timer);
  }
}

export const get = (path, params) => request('GET', path, { params });
export const post = (path, body) => request('POST', path, { body });

// Known members of a problem, shown by name; others are listed after them.
const PROBLEM_MEMBERS = ['type', 'title', 'status', 'detail', 'instance'];

// renderProblem shows a problem as people read it: the title and status, the detail,
// then every extension member (the invalid parameter, each error of a definition, the
// execution's status), each as text.
export function renderProblem(p) {
  const box = h('div', { class: 'problem', role: 'alert', 'data-problem-status': p.status || 0, 'data-problem-type': p.type || '' },
    h('p', { class: 'problem-title' }, p.title || 'Error', p.status ? ` (${p.status})` : ''));
  if (p.detail) box.appendChild(h('p', { class: 'problem-detail' }, p.detail));
  const extra = Object.keys(p).filter((k) => !PROBLEM_MEMBERS.includes(k));
  if (extra.length) {
    const dl = h('dl', { class: 'problem-extra' });
    for (const k of extra) {
      const v = p[k];
      let shown;
      if (Array.isArray(v)) {
        shown = h('ul', {}, v.map((it) => h('li', {}, it && typeof it === 'object' && 'message' in it
          ? `${it.path ? it.path + ': ' : ''}${it.message}` : typeof it === 'object' ? JSON.stringify(it) : String(it))));
      } else {
        shown = typeof v === 'object' ? JSON.stringify(v) : String(v);
      }
      dl.append(h('dt', {}, k.replace(/_/g, ' ')), h('dd', {}, shown));
    }
    box.appendChild(dl);
  }
  if (p.type) box.appendChild(h('p', { class: 'problem-type muted' }, p.type));
  return box;
}
