// rendezvous web view. It polls the operator API and shows the waits that are waiting:
// each expected event arrived or missing, a live countdown to the next deadline, and the
// nodes of the execution. Plain script with no framework and no build step (package
// internal/ui says why). Data from the API reaches the page only through textContent
// and setAttribute, never as markup, so no text from an event can become HTML.
'use strict';

(function () {
  const POLL_MS = 2000;            // how often the list of waiting waits is read
  const REQUEST_TIMEOUT_MS = 8000; // a request slower than this counts as the API being unreachable
  const PAGE_LIMIT = 200;          // waits per list page
  const MAX_PAGES = 5;             // at most PAGE_LIMIT × MAX_PAGES waits are listed, the longest-waiting
  const DETAIL_CONCURRENCY = 4;    // execution reads in flight at once, so a long list cannot flood the API
  const DETAIL_PER_CYCLE = 40;     // execution reads per poll; the rest are read at the next polls
  const DETAIL_MAX_AGE_MS = 10000; // nodes change without their wait changing, so an unchanged execution is reread this often
  const FINISHED_KEEP_MS = 60000;  // how long a wait that stopped waiting stays under "Recently finished"
  const SKEW_MIN_MS = 2000;        // clock differences below the Date header's one-second resolution are noise

  const TERMINAL = new Set(['completed', 'failed', 'cancelled']);
  const OPEN = new Set(['waiting', 'scheduled']);

  // The API is found relative to the page, so the view also works behind a proxy that
  // serves the service under a path prefix.
  const API = new URL('../api/v1/', document.baseURI);

  // The token lives in sessionStorage: this tab only, gone when it closes, never in a
  // URL or a cookie (a cookie would ride along on requests other origins make).
  const TOKEN_KEY = 'rendezvous.token';
  const tokenStore = {
    get: () => { try { return sessionStorage.getItem(TOKEN_KEY) || ''; } catch (_) { return ''; } },
    set: (t) => { try { sessionStorage.setItem(TOKEN_KEY, t); } catch (_) { /* storage off: this page only */ } },
    clear: () => { try { sessionStorage.removeItem(TOKEN_KEY); } catch (_) { /* nothing kept */ } },
  };

  const state = {
    auth: 'unknown',      // unknown, ok, needed (401) or forbidden (403)
    principal: null,      // who the token is (GET whoami), when known
    waits: [],            // the waiting waits of the last successful poll, in the API's order
    truncated: false,     // more waits are waiting than were listed
    listedAt: null,       // when the list was last read
    error: '',            // why the last poll failed; empty while the API answers
    details: new Map(),   // execution id → {view, key, fetchedAt, error}
    finished: new Map(),  // wait id → {wait, since}: waits seen waiting that no longer are
    skewMs: 0,            // server clock minus this browser's clock
    filter: '',
  };

  const $ = (sel) => document.querySelector(sel);
  const dom = {
    status: $('#api-status'),
    updated: $('#updated'),
    summary: $('#summary'),
    filter: $('#filter-workflow'),
    waiting: $('#waiting tbody'),
    waitingEmpty: $('#waiting-empty'),
    finished: $('#finished tbody'),
    finishedSection: $('#finished-section'),
    principal: $('#principal'),
    forget: $('#forget-token'),
    tokenForm: $('#token-form'),
    tokenWhy: $('#token-why'),
    tokenInput: $('#token-input'),
  };

  // ---- HTTP ------------------------------------------------------------------------

  class APIError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  // getJSON reads one API resource. Problems (RFC 7807) become their title and detail;
  // network failures and timeouts become status 0.
  async function getJSON(url, onResponse) {
    const ctrl = new AbortController();
    const timer = setTimeout(() => ctrl.abort(), REQUEST_TIMEOUT_MS);
    try {
      const headers = { Accept: 'application/json' };
      const token = tokenStore.get();
      if (token) headers.Authorization = `Bearer ${token}`;
      const resp = await fetch(url, { headers, cache: 'no-store', signal: ctrl.signal });
      if (onResponse) onResponse(resp);
      const body = await resp.json().catch(() => null);
      if (!resp.ok) {
        const what = body && (body.detail || body.title);
        throw new APIError(resp.status, `${resp.status} ${what || resp.statusText || 'error'}`);
      }
      return body;
    } catch (err) {
      if (err instanceof APIError) throw err;
      if (err && err.name === 'AbortError') throw new APIError(0, `no answer within ${REQUEST_TIMEOUT_MS / 1000} s`);
      throw new APIError(0, (err && err.message) || String(err));
    } finally {
      clearTimeout(timer);
    }
  }

  // noteServerClock keeps the countdowns on the server's clock: deadlines are the
  // server's, and an operator's laptop may be minutes off.
  function noteServerClock(resp) {
    const date = Date.parse(resp.headers.get('Date') || '');
    if (Number.isNaN(date)) return;
    const skew = date + 500 - Date.now(); // the header is truncated to the second
    state.skewMs = Math.abs(skew) >= SKEW_MIN_MS ? skew : 0;
  }

  const now = () => Date.now() + state.skewMs;

  // listWaits follows next_cursor up to MAX_PAGES pages.
  async function listWaits() {
    const out = [];
    const seen = new Set();
    let cursor = '';
    for (let page = 0; page < MAX_PAGES; page++) {
      const url = new URL('wait-states', API);
      url.searchParams.set('status', 'waiting');
      url.searchParams.set('limit', String(PAGE_LIMIT));
      if (cursor) url.searchParams.set('cursor', cursor);
      const body = await getJSON(url, page === 0 ? noteServerClock : null);
      for (const w of (body && Array.isArray(body.items)) ? body.items : []) {
        if (w && w.id && !seen.has(w.id)) {
          seen.add(w.id);
          out.push(w);
        }
      }
      cursor = body && body.next_cursor;
      if (!cursor) return { waits: out, truncated: false };
    }
    return { waits: out, truncated: true };
  }

  // ---- polling ---------------------------------------------------------------------

  // whoami asks who the token is, so the page says which role it reads with.
  async function whoami() {
    try {
      state.principal = await getJSON(new URL('whoami', API));
    } catch (_) {
      state.principal = null;
    }
  }

  async function refresh() {
    if (state.auth === 'needed') return; // nothing to ask until a token is given
    let listed;
    try {
      listed = await listWaits();
      if (state.auth !== 'ok') {
        state.auth = 'ok';
        await whoami();
        renderAuth();
      }
    } catch (err) {
      if (err.status === 401 || err.status === 403) {
        state.auth = err.status === 401 ? 'needed' : 'forbidden';
        if (err.status === 403) await whoami();
        state.error = err.status === 401 ? `Sign in: ${err.message}` :
          `This token may not read waits (${err.message}); use a viewer, operator or admin token`;
        renderAuth();
        render();
        return;
      }
      state.error = err.status ? `API error: ${err.message}` : `API unreachable: ${err.message}`;
      render();
      return;
    }
    const t = Date.now();
    const ids = new Set(listed.waits.map((w) => w.id));
    // A wait listed before and gone now has stopped waiting (completed, timed out,
    // failed or cancelled); its final state comes from its execution.
    for (const w of state.waits) {
      if (!ids.has(w.id) && !state.finished.has(w.id)) state.finished.set(w.id, { wait: w, since: t });
    }
    for (const [id, f] of state.finished) {
      if (ids.has(id) || t - f.since > FINISHED_KEEP_MS) state.finished.delete(id);
    }
    state.waits = listed.waits;
    state.truncated = listed.truncated;
    state.listedAt = new Date();
    state.error = '';
    render();
    await loadDetails();
    render();
  }

  // settled: an execution that will not change any more needs no rereading.
  function settled(view) {
    return TERMINAL.has(view.status) && !(view.wait_states || []).some((w) => OPEN.has(w.status));
  }

  // loadDetails reads the executions on screen whose waits changed, that were never
  // read, that finished and may still move, or whose read is old — in that order, at
  // most DETAIL_PER_CYCLE of them, DETAIL_CONCURRENCY at a time.
  async function loadDetails() {
    const t = Date.now();
    const byExecution = new Map();
    for (const w of state.waits) {
      if (!byExecution.has(w.execution_id)) byExecution.set(w.execution_id, []);
      byExecution.get(w.execution_id).push(w);
    }
    const wanted = [];
    for (const [id, waits] of byExecution) {
      // A new event bumps the wait's version, so the key changes exactly when the
      // execution's waits do.
      const key = waits.map((w) => `${w.id}:${w.version}`).sort().join(',');
      const d = state.details.get(id);
      if (!d || !d.view) wanted.push({ id, key, rank: 0, age: 0 });
      else if (d.key !== key) wanted.push({ id, key, rank: 1, age: 0 });
      else if (t - d.fetchedAt > DETAIL_MAX_AGE_MS) wanted.push({ id, key, rank: 3, age: d.fetchedAt });
    }
    const finishedExecutions = new Set();
    for (const f of state.finished.values()) {
      const id = f.wait.execution_id;
      finishedExecutions.add(id);
      if (byExecution.has(id) || wanted.some((x) => x.id === id)) continue;
      const d = state.details.get(id);
      if (!d || !d.view || !settled(d.view)) wanted.push({ id, key: 'finished', rank: 2, age: 0 });
    }
    for (const id of state.details.keys()) {
      if (!byExecution.has(id) && !finishedExecutions.has(id)) state.details.delete(id);
    }
    wanted.sort((a, b) => a.rank - b.rank || a.age - b.age);
    await inParallel(wanted.slice(0, DETAIL_PER_CYCLE), DETAIL_CONCURRENCY, async ({ id, key }) => {
      const prev = state.details.get(id);
      try {
        const view = await getJSON(new URL('executions/' + encodeURIComponent(id), API));
        state.details.set(id, { view, key, fetchedAt: Date.now(), error: '' });
      } catch (err) {
        // Keep what was shown, and the old key so that the read is retried next poll.
        state.details.set(id, { view: prev && prev.view, key: prev ? prev.key : '', fetchedAt: Date.now(), error: err.message });
      }
    });
  }

  async function inParallel(items, limit, fn) {
    let next = 0;
    const worker = async () => {
      while (next < items.length) await fn(items[next++]);
    };
    await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  }

  async function loop() {
    try {
      await refresh();
    } catch (err) {
      // A bug in this page, not an API failure: say so rather than freeze silently.
      console.error(err);
      state.error = 'Page error: ' + ((err && err.message) || String(err));
      try { renderStatus(); } catch (_) { /* nothing more to show */ }
    }
    setTimeout(loop, POLL_MS);
  }

  // ---- rendering -------------------------------------------------------------------

  // h builds an element. Attributes go through setAttribute and children through
  // text nodes: API data is never parsed as HTML.
  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      node.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children.flat(Infinity)) {
      if (c === undefined || c === null || c === false) continue;
      node.append(c instanceof Node ? c : String(c));
    }
    return node;
  }

  const pad = (n) => String(n).padStart(2, '0');

  function fmtDuration(ms) {
    let s = Math.floor(ms / 1000);
    const d = Math.floor(s / 86400); s -= d * 86400;
    const hr = Math.floor(s / 3600); s -= hr * 3600;
    const m = Math.floor(s / 60); s -= m * 60;
    if (d) return `${d}d ${hr}h`;
    if (hr) return `${hr}h ${pad(m)}m`;
    if (m) return `${m}m ${pad(s)}s`;
    return `${s}s`;
  }

  function fmtTime(iso) {
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return String(iso);
    const time = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
    return d.toDateString() === new Date().toDateString() ? time : `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${time}`;
  }

  const timeEl = (iso, attrs) => h('time', Object.assign({ datetime: iso, title: iso }, attrs), fmtTime(iso));

  function sourceText(src) {
    if (!src || !src.kind) return '';
    if (src.kind === 'kafka') {
      let s = 'kafka ' + (src.topic || '');
      if (src.partition !== undefined && src.partition !== null) s += `[${src.partition}]`;
      if (src.offset !== undefined && src.offset !== null) s += `@${src.offset}`;
      return s;
    }
    return src.service ? `${src.kind} ${src.service}` : src.kind;
  }

  // eventStates says, for each enabled event of a wait, whether it arrived, timed out
  // or is still missing.
  function eventStates(w) {
    const received = new Map((w.received_events || []).map((r) => [r.name, r]));
    const timedOut = new Set(w.timed_out_events || []);
    const required = new Set(w.required_events || []);
    return (w.enabled_events || []).map((name) => ({
      name,
      required: required.has(name),
      state: received.has(name) ? 'arrived' : timedOut.has(name) ? 'timed_out' : 'missing',
      arrival: received.get(name) || null,
    }));
  }

  function eventChips(w) {
    if (w.wait_type === 'timer') return h('span', { class: 'muted' }, 'timer');
    const open = OPEN.has(w.status);
    const chips = eventStates(w).map((ev) => {
      let detail = null;
      const label = ev.state === 'arrived' ? 'arrived' : ev.state === 'timed_out' ? 'timed out' : open ? 'missing' : 'did not arrive';
      if (ev.arrival) {
        const src = sourceText(ev.arrival.source);
        detail = h('span', { class: 'chip-detail' }, timeEl(ev.arrival.received_at), src ? ` · ${src}` : '');
      }
      return h('li', {
        class: 'chip', 'data-event-name': ev.name, 'data-event-state': ev.state, 'data-required': ev.required ? 'true' : 'false',
      },
      h('span', { class: 'chip-name' }, ev.name),
      h('span', { class: 'chip-state' }, label),
      ev.required ? h('span', { class: 'chip-required', title: 'required by the strategy' }, 'required') : null,
      detail);
    });
    if (!chips.length) return h('span', { class: 'muted' }, 'no events');
    return h('ul', { class: 'events', 'aria-label': 'Expected events' }, chips);
  }

  function executionCell(executionId, view) {
    const short = String(executionId).slice(0, 8);
    const href = '../api/v1/executions/' + encodeURIComponent(executionId);
    return [
      h('a', { href, title: executionId, class: 'exec-id' }, h('code', null, short)),
      view ? h('span', { class: 'badge', 'data-execution-status': view.status }, view.status) : null,
    ];
  }

  function nodesCell(detail) {
    if (!detail || (!detail.view && !detail.error)) return h('span', { class: 'muted' }, 'loading…');
    const parts = [];
    if (detail.error) parts.push(h('span', { class: 'detail-error', role: 'note' }, 'could not read the execution: ' + detail.error));
    if (detail.view) {
      parts.push(h('ol', { class: 'nodes', 'aria-label': 'Nodes of the execution' },
        (detail.view.nodes || []).map((n) => h('li', { 'data-node-id': n.id, 'data-node-status': n.status },
          h('code', null, n.id), ' ', h('span', { class: 'badge', 'data-status': n.status }, n.status),
          n.warning ? [' ', h('span', { class: 'badge', 'data-warning': '', title: n.warning, role: 'note' }, 'warning: ' + n.warning)] : null))));
    }
    return parts;
  }

  function waitRow(w, view, detail, finished) {
    const deadline = w.next_deadline_at;
    let timing;
    if (!finished) {
      timing = deadline
        ? h('time', { class: 'countdown', datetime: deadline, title: 'deadline ' + deadline, 'data-countdown': 'running' }, '')
        : h('span', { class: 'muted' }, 'none');
    } else {
      timing = [
        h('span', { class: 'badge', 'data-status': w.status }, w.status),
        w.resumed_at ? [' ', h('span', { class: 'muted' }, 'resumed '), timeEl(w.resumed_at)] : null,
        w.error ? h('div', { class: 'detail-error' }, w.error) : null,
      ];
    }
    return h('tr', {
      'data-wait-id': w.id, 'data-execution-id': w.execution_id, 'data-node-id': w.node_id,
      'data-wait-status': w.status, 'data-workflow': w.workflow, 'data-version': w.version,
    },
    h('td', null, h('span', { class: 'workflow' }, w.workflow), ' ', h('span', { class: 'muted' }, 'v' + w.workflow_version)),
    h('td', null, executionCell(w.execution_id, view)),
    h('td', null, h('code', null, w.node_id)),
    h('td', null, w.wait_type === 'timer' ? 'timer' : (w.aggregation_strategy || '')),
    h('td', null, eventChips(w)),
    h('td', null, timing),
    h('td', { class: 'num' }, String(w.version)),
    h('td', null, nodesCell(detail)));
  }

  // finishedWait merges what the list last showed with the execution's current view of
  // the wait, which has its final status.
  function finishedWait(listed, view) {
    const current = view && (view.wait_states || []).find((x) => x.id === listed.id);
    if (!current) return listed;
    return Object.assign({}, listed, current, { execution_id: listed.execution_id, workflow: listed.workflow, workflow_version: listed.workflow_version });
  }

  // renderRows keeps one element per key and rebuilds a row only when what it shows
  // changed, so that a poll does not reset a selection or a focused link in rows that
  // did not.
  const rowCache = new WeakMap();

  // rowSig is everything a row shows, so that equal signatures mean equal rows.
  function rowSig(w, detail) {
    const view = detail && detail.view;
    return JSON.stringify([w, view && view.status, view && (view.nodes || []).map((n) => [n.id, n.status, n.warning]), detail && detail.error, !detail]);
  }

  function renderRows(tbody, models) {
    let cache = rowCache.get(tbody);
    if (!cache) rowCache.set(tbody, (cache = new Map()));
    const next = new Map();
    const els = models.map((m) => {
      const hit = cache.get(m.key);
      const el = hit && hit.sig === m.sig ? hit.el : m.build();
      next.set(m.key, { sig: m.sig, el });
      return el;
    });
    rowCache.set(tbody, next);
    const current = Array.from(tbody.children);
    if (current.length !== els.length || current.some((el, i) => el !== els[i])) tbody.replaceChildren(...els);
  }

  function matches(w) {
    const f = state.filter.trim().toLowerCase();
    return !f || String(w.workflow || '').toLowerCase().includes(f);
  }

  function render() {
    renderStatus();
    const waiting = state.waits.filter(matches);
    renderRows(dom.waiting, waiting.map((w) => {
      const detail = state.details.get(w.execution_id);
      const view = detail && detail.view;
      return { key: w.id, sig: rowSig(w, detail), build: () => waitRow(w, view, detail, false) };
    }));
    dom.waitingEmpty.hidden = waiting.length > 0 || !state.listedAt;

    const finished = [];
    for (const f of state.finished.values()) {
      const detail = state.details.get(f.wait.execution_id);
      const view = detail && detail.view;
      const w = finishedWait(f.wait, view);
      // Open means the execution was not read since the wait left the list, or the wait
      // only fell outside the listed window (see MAX_PAGES): nothing final to show yet.
      if (OPEN.has(w.status)) continue;
      if (!matches(w)) continue;
      finished.push({ w, since: f.since, detail, view });
    }
    finished.sort((a, b) => b.since - a.since);
    renderRows(dom.finished, finished.map(({ w, detail, view }) => (
      { key: w.id, sig: rowSig(w, detail), build: () => waitRow(w, view, detail, true) })));
    dom.finishedSection.hidden = finished.length === 0;

    renderSummary(waiting);
    tick();
  }

  // renderAuth shows the token form when the API wants one (or refuses the one given),
  // and who the page reads as otherwise.
  function renderAuth() {
    const ask = state.auth === 'needed' || state.auth === 'forbidden';
    dom.tokenForm.hidden = !ask;
    dom.forget.hidden = !tokenStore.get();
    const p = state.principal;
    dom.principal.textContent = p && p.kind !== 'insecure' ? `as ${p.kind}:${p.name} (${p.role})` : '';
    dom.principal.dataset.role = p ? p.role : '';
    if (state.auth === 'forbidden') {
      dom.tokenWhy.textContent = 'This token\'s role may not read executions and waits. Use a viewer, operator or admin token.';
    }
  }

  function renderStatus() {
    let text;
    let st;
    if (state.error) {
      st = 'error';
      text = `${state.error}. ` +
        (state.listedAt ? 'The lists below are from the last answer; ' : '') + `retrying every ${POLL_MS / 1000} s.`;
    } else if (state.listedAt) {
      st = 'ok';
      text = 'Live';
    } else {
      st = 'connecting';
      text = 'Connecting to the API…';
    }
    // The status is a live region: touch it only when it changes, or screen readers
    // would repeat it at every poll.
    if (dom.status.dataset.state !== st || dom.status.textContent !== text) {
      dom.status.dataset.state = st;
      dom.status.textContent = text;
    }
    dom.updated.textContent = state.listedAt ? `updated ${fmtTime(state.listedAt.toISOString())}` : '';
    document.body.classList.toggle('stale', !!state.error);
  }

  function renderSummary(shown) {
    const executions = new Set(shown.map((w) => w.execution_id)).size;
    const hidden = state.waits.length - shown.length;
    let text = `${shown.length} ${shown.length === 1 ? 'wait' : 'waits'} in ${executions} ${executions === 1 ? 'execution' : 'executions'}`;
    if (hidden > 0) text += `, ${hidden} hidden by the filter`;
    if (state.truncated) text += `. Only the ${state.waits.length} longest-waiting are listed.`;
    dom.summary.textContent = state.listedAt ? text : '';
    dom.summary.dataset.waits = String(shown.length);
    dom.summary.dataset.executions = String(executions);
    dom.summary.dataset.truncated = String(state.truncated);
  }

  // tick updates every countdown from the server-corrected clock, once a second.
  function tick() {
    const t = now();
    for (const el of document.querySelectorAll('[data-countdown]')) {
      const at = Date.parse(el.getAttribute('datetime'));
      if (Number.isNaN(at)) continue;
      const left = at - t;
      const overdue = left <= 0;
      const text = overdue ? (left <= -1000 ? `overdue by ${fmtDuration(-left)}` : 'overdue') : `in ${fmtDuration(left)}`;
      if (el.textContent !== text) el.textContent = text;
      el.dataset.countdown = overdue ? 'overdue' : 'running';
      el.dataset.secondsLeft = String(Math.floor(left / 1000));
    }
  }

  // ---- start -----------------------------------------------------------------------

  const params = new URLSearchParams(location.search);
  state.filter = params.get('workflow') || '';
  dom.filter.value = state.filter;
  dom.filter.addEventListener('input', () => {
    state.filter = dom.filter.value;
    // Keep the filter in the address so that a filtered view can be shared or reloaded.
    const url = new URL(location.href);
    if (state.filter) url.searchParams.set('workflow', state.filter); else url.searchParams.delete('workflow');
    history.replaceState(null, '', url);
    render();
  });

  dom.tokenForm.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const t = dom.tokenInput.value.trim();
    if (!t) return;
    tokenStore.set(t);
    dom.tokenInput.value = '';
    state.auth = 'unknown';
    state.error = '';
    state.principal = null;
    renderAuth();
    refresh().then(renderAuth);
  });
  dom.forget.addEventListener('click', () => {
    tokenStore.clear();
    state.auth = 'unknown';
    state.principal = null;
    state.waits = [];
    state.details.clear();
    renderAuth();
    refresh().then(renderAuth);
  });

  renderAuth();
  setInterval(tick, 1000);
  loop();
})();
