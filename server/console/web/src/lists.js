// The list pages: executions (with the recently finished), waits (waiting and scheduled
// timers), unmatched events and dead letters. Each reads one page of its API list at a
// time (keyset pages, next_cursor) and rereads it at every poll.

import { h, replace } from './dom.js';
import { get, renderProblem } from './api.js';
import { sourceText, UUID_RE, pretty } from './format.js';
import { idText, IdKind, badge, deadline, when, since, table, Pager, empty, latest } from './widgets.js';
import { ACTIONS, canAct, runAction } from './actions.js';

const PAGE = 25;
// KEY_SEARCH_DEPTH is how many of the newest executions a search by business key reads.
const KEY_SEARCH_DEPTH = 500;

// pageSize is the page size a list's address asks for (?limit=, 1 to 500), else PAGE.
function pageSize(params) {
  const n = Number(params.get('limit'));
  return Number.isInteger(n) && n >= 1 && n <= 500 ? n : PAGE;
}
const FINISHED = ['completed', 'failed', 'cancelled'];
const EXECUTION_STATUSES = ['running', 'waiting', ...FINISHED];

export const execLink = (id) => `#/executions/${encodeURIComponent(id)}`;

// setQuery writes the page's filters into the address without a new history entry, so
// that a reload or a shared link shows the same list.
function setQuery(route, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v) q.set(k, v);
  const qs = q.toString();
  history.replaceState(null, '', `#/${route}${qs ? '?' + qs : ''}`);
}

function field(label, input, extra) {
  return h('label', { class: 'field' }, h('span', {}, label), input, extra);
}

function select(name, values, current, allLabel) {
  return h('select', { name, id: `filter-${name}` },
    h('option', { value: '' }, allLabel),
    values.map((v) => h('option', { value: v, selected: v === current }, v.replace(/_/g, ' '))));
}

// A datetime-local input holds local time without a zone; the API takes RFC 3339.
function toRFC3339(local) {
  if (!local) return '';
  const t = new Date(local);
  return Number.isNaN(t.getTime()) ? '' : t.toISOString();
}

// Shown when a list could not be read: the problem, under what was last shown.
function failure(answer) {
  return renderProblem(answer.problem);
}

// show fills a list's place with what was read, and remembers that it holds data.
function show(el, ...children) {
  replace(el, ...children);
  el.dataset.filled = 'true';
}

// fail shows a list's problem in its place, except when the API is out of reach and the
// place holds what was read before: that stays, dimmed by the page's frame, which says
// when it was read.
function fail(el, answer) {
  if (answer.status === 0 && el.dataset.filled === 'true') return;
  replace(el, failure(answer));
  delete el.dataset.filled;
}

// workflowNames suggests the stored workflows' names to a workflow filter (which takes
// an exact name).
function workflowNames(input) {
  const list = h('datalist', { id: `${input.id}-names` });
  input.setAttribute('list', list.id);
  get('workflows', { limit: 500 }).then((a) => {
    if (a.ok && a.body) list.replaceChildren(...(a.body.items || []).map((w) => h('option', { value: w.name })));
  });
  return list;
}

// ---- executions ---------------------------------------------------------------------

export function executionsView(params) {
  const f = {
    q: params.get('q') || '', workflow: params.get('workflow') || '', status: params.get('status') || '',
    from: params.get('from') || '', to: params.get('to') || '', limit: params.has('limit') ? String(pageSize(params)) : '',
  };
  const pager = new Pager(() => refresh());
  const out = h('div', { id: 'executions-result' });
  const finished = h('div', { id: 'finished-result' });

  const q = h('input', { id: 'filter-q', name: 'q', type: 'search', value: f.q, placeholder: 'execution id, correlation id or key', spellcheck: 'false', autocomplete: 'off', class: 'mono wide' });
  const wf = h('input', { id: 'filter-workflow', name: 'workflow', type: 'search', value: f.workflow, placeholder: 'exact name (suggested)', spellcheck: 'false', autocomplete: 'off' });
  const st = select('status', EXECUTION_STATUSES, f.status, 'any');
  const from = h('input', { id: 'filter-from', name: 'from', type: 'datetime-local', step: '1', value: f.from });
  const to = h('input', { id: 'filter-to', name: 'to', type: 'datetime-local', step: '1', value: f.to });
  const form = h('form', { class: 'filters', role: 'search', 'aria-label': 'Find executions' },
    field('Search', q), field('Workflow', wf, workflowNames(wf)), field('Status', st), field('Created from', from), field('to', to),
    h('button', { type: 'submit' }, 'Apply'));
  const apply = (ev) => {
    if (ev) ev.preventDefault();
    Object.assign(f, { q: q.value.trim(), workflow: wf.value.trim(), status: st.value, from: from.value, to: to.value });
    setQuery('executions', f);
    pager.reset();
    refresh();
  };
  form.addEventListener('submit', apply);
  st.addEventListener('change', apply);

  const columns = [
    { title: 'Execution', cell: (e) => idText(e.id, execLink(e.id), IdKind.EXECUTION) },
    { title: 'Key', cell: (e) => (e.summary ? h('span', { class: 'summary' }, e.summary) : '') },
    { title: 'Workflow', cell: (e) => h('span', {}, h('span', { class: 'workflow' }, e.workflow), h('span', { class: 'muted' }, ` v${e.workflow_version}`)) },
    { title: 'Status', cell: (e) => badge(e.status) },
    { title: 'Started', cell: (e) => h('span', {}, when(e.created_at), ' ', since(e.created_at)) },
    { title: 'Finished', cell: (e) => when(e.finished_at) },
    { title: 'Error', cell: (e) => (e.error ? h('span', { class: 'detail-error' }, e.error) : '') },
  ];
  const rowAttrs = (e) => ({ 'data-execution-id': e.id, 'data-status': e.status });

  async function search() {
    // Text that is not an id is looked for in the business keys of the newest
    // executions the other filters select.
    if (!UUID_RE.test(f.q)) {
      const a = await get('executions', {
        workflow: f.workflow, status: f.status, created_from: toRFC3339(f.from), created_to: toRFC3339(f.to), limit: KEY_SEARCH_DEPTH,
      });
      if (!a.ok) return { answer: a };
      const needle = f.q.toLowerCase();
      return { items: a.body.items.filter((e) => (e.summary || '').toLowerCase().includes(needle)), byKey: true, more: Boolean(a.body.next_cursor) };
    }
    // An id is either an execution's or a wait's correlation id: ask for both.
    const [byID, byCorr] = await Promise.all([
      get(`executions/${encodeURIComponent(f.q)}`),
      get('executions', { correlation_id: f.q }),
    ]);
    if (!byCorr.ok) return { answer: byCorr };
    if (!byID.ok && byID.status !== 404) return { answer: byID };
    const items = byCorr.body.items.slice();
    if (byID.ok && !items.some((e) => e.id === byID.body.id)) items.unshift(byID.body);
    return { items };
  }

  const begin = latest();
  async function refresh() {
    const newest = begin();
    let items, next = '', note = '';
    if (f.q) {
      const r = await search();
      if (!newest()) return true;
      if (r.problem) { replace(out, renderProblem(r.problem)); return true; }
      if (r.answer) { fail(out, r.answer); return r.answer.status !== 0; }
      items = r.items;
      note = r.byKey ? `Executions whose key contains “${f.q}”, among the newest ${KEY_SEARCH_DEPTH}${r.more ? ' (older ones are not searched: narrow by workflow, status or time)' : ''}.` : '';
    } else {
      const a = await get('executions', {
        workflow: f.workflow, status: f.status, created_from: toRFC3339(f.from), created_to: toRFC3339(f.to),
        limit: f.limit || PAGE, cursor: pager.cursor,
      });
      if (!newest()) return true;
      if (!a.ok) { fail(out, a); return a.status !== 0; }
      items = a.body.items;
      next = a.body.next_cursor || '';
    }
    pager.next = next;
    show(out, note ? h('p', { class: 'hint', id: 'search-note' }, note) : null,
      items.length ? table('executions', columns, items, rowAttrs) : empty('No execution matches.'),
      f.q ? null : pager.view('executions'));
    await refreshFinished(newest);
    return true;
  }

  // The recently finished come from the API, so they survive a reload: the newest
  // finished executions of each final status, merged by when they finished.
  async function refreshFinished(newest) {
    const answers = await Promise.all(FINISHED.map((s) => get('executions', { status: s, workflow: f.workflow, limit: 10 })));
    if (!newest()) return;
    const bad = answers.find((a) => !a.ok);
    if (bad) { fail(finished, bad); return; }
    const items = answers.flatMap((a) => a.body.items)
      .sort((a, b) => Date.parse(b.finished_at || b.updated_at) - Date.parse(a.finished_at || a.updated_at))
      .slice(0, 10);
    show(finished, items.length ? table('finished', columns, items, rowAttrs) : empty('Nothing has finished yet.'));
  }

  const root = h('div', {},
    h('h2', {}, 'Executions'), form, out,
    h('section', { 'aria-labelledby': 'finished-title' },
      h('h2', { id: 'finished-title' }, 'Recently finished'),
      h('p', { class: 'hint' }, 'The newest completed, failed and cancelled executions (of the workflow filtered by, if any), latest finish first.'),
      finished));
  return { title: 'Executions', root, refresh };
}

// ---- waits ----------------------------------------------------------------------------

// eventStates is each enabled event of a wait: arrived (with when and from where),
// timed_out, or missing.
export function eventStates(w) {
  const received = new Map((w.received_events || []).map((r) => [r.name, r]));
  const timedOut = new Set(w.timed_out_events || []);
  const required = new Set(w.required_events || []);
  return (w.enabled_events || []).map((name) => {
    const r = received.get(name);
    const state = r ? 'arrived' : timedOut.has(name) ? 'timed_out' : 'missing';
    return { name, state, received: r, required: required.has(name) };
  });
}

export function eventChips(w) {
  return h('ul', { class: 'events' }, eventStates(w).map((e) => h('li', { class: 'chip', 'data-event-name': e.name, 'data-event-state': e.state },
    h('span', { class: 'chip-name' }, e.name),
    h('span', { class: 'chip-state' }, e.state.replace('_', ' ')),
    e.required ? h('span', { class: 'chip-required' }, 'required') : null,
    e.received ? h('span', { class: 'chip-detail' }, sourceText(e.received.source)) : null)));
}

export function waitsView(params) {
  const limit = pageSize(params);
  const f = { workflow: params.get('workflow') || '' };
  const sections = {
    waiting: { pager: new Pager(() => refresh()), out: h('div', { id: 'waiting-result' }) },
    scheduled: { pager: new Pager(() => refresh()), out: h('div', { id: 'scheduled-result' }) },
  };
  const wf = h('input', { id: 'filter-workflow', name: 'workflow', type: 'search', value: f.workflow, placeholder: 'exact name', spellcheck: 'false' });
  const form = h('form', { class: 'filters', role: 'search', 'aria-label': 'Filter waits' }, field('Workflow', wf, workflowNames(wf)), h('button', { type: 'submit' }, 'Apply'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    f.workflow = wf.value.trim();
    setQuery('waits', f);
    for (const s of Object.values(sections)) s.pager.reset();
    refresh();
  });

  const common = [
    { title: 'Execution', cell: (w) => idText(w.execution_id, execLink(w.execution_id), IdKind.EXECUTION) },
    { title: 'Key', cell: (w) => (w.summary ? h('span', { class: 'summary' }, w.summary) : '') },
    { title: 'Workflow', cell: (w) => h('span', { class: 'workflow' }, w.workflow) },
    { title: 'Node', cell: (w) => h('code', {}, w.node_id) },
  ];
  const columns = {
    waiting: [...common,
      { title: 'Strategy', cell: (w) => w.aggregation_strategy || '' },
      { title: 'Events', cell: (w) => eventChips(w) },
      { title: 'Next deadline', cell: (w) => deadline(w.next_deadline_at) },
      { title: 'Waiting since', cell: (w) => since(w.created_at) }],
    scheduled: [...common,
      { title: 'Timer', cell: (w) => h('code', {}, JSON.stringify(w.timer || {})) },
      { title: 'Fires', cell: (w) => h('span', {}, deadline(w.next_deadline_at), ' ', h('span', { class: 'muted' }, `(${when(w.next_deadline_at).textContent})`)) },
      { title: 'Since', cell: (w) => since(w.created_at) }],
  };
  const rowAttrs = (w) => ({ 'data-wait-id': w.id, 'data-wait-status': w.status, 'data-execution-id': w.execution_id, 'data-node-id': w.node_id });

  const begin = latest();
  async function refresh() {
    const newest = begin();
    const answers = await Promise.all(Object.entries(sections).map(([status, s]) =>
      get('wait-states', { status, workflow: f.workflow, limit, cursor: s.pager.cursor })));
    if (!newest()) return true;
    let reached = true;
    Object.entries(sections).forEach(([status, s], i) => {
      const a = answers[i];
      if (!a.ok) { fail(s.out, a); reached = reached && a.status !== 0; return; }
      s.pager.next = a.body.next_cursor || '';
      show(s.out, a.body.items.length ? table(status, columns[status], a.body.items, rowAttrs)
        : empty(status === 'waiting' ? 'No execution is waiting for events.' : 'No timer is scheduled.'), s.pager.view(status));
    });
    return reached;
  }

  const root = h('div', {}, h('h2', {}, 'Waits'), form,
    h('section', {}, h('h3', {}, 'Waiting for events'), h('p', { class: 'hint' }, 'Longest waiting first.'), sections.waiting.out),
    h('section', {}, h('h3', {}, 'Timers (scheduled)'), sections.scheduled.out));
  return { title: 'Waits', root, refresh };
}

// ---- unmatched events and dead letters ---------------------------------------------

// resolutionColumn shows what became of a row: replayed or dismissed, with the detail.
export const resolutionColumn = {
  title: 'Resolution',
  cell: (x) => (x.resolution ? h('span', { class: 'resolution', 'data-resolution': x.resolution, title: x.resolved_at || '' },
    badge(x.resolution), x.resolution_detail ? ` ${x.resolution_detail}` : '') : ''),
};

// rowActions is the column of a row's actions (scope 'dead-letter' or 'unmatched'); each
// answer goes to out, and the list is read again. The buttons are rebuilt with the rows
// at every poll; an open confirmation is not part of the table, so a poll does not close it.
export function rowActions(scope, out, refresh) {
  const actions = ACTIONS.filter((a) => a.scope === scope);
  return {
    title: 'Actions',
    class: 'actions',
    cell: (item) => {
      const ctx = { item };
      const shown = actions.filter((a) => canAct(a) && a.applies(ctx));
      if (!shown.length) return '';
      return h('span', { class: 'row-actions' }, shown.map((a) => {
        const btn = h('button', { type: 'button', 'data-action': a.id }, a.label);
        btn.addEventListener('click', async () => {
          btn.disabled = true;
          try {
            if (await runAction(a, ctx, a.input ? a.input(ctx) : null, out, { inDialog: true })) await refresh();
          } finally {
            btn.disabled = false;
          }
        });
        return btn;
      }));
    },
  };
}

const UNMATCHED_REASONS = ['no_execution', 'execution_finished', 'buffered', 'match_value_differs', 'filter_failed',
  'id_mismatch', 'duplicate', 'no_wait', 'late', 'not_expected', 'already_recorded'];

export const unmatchedColumns = [
  { title: 'When', cell: (u) => when(u.created_at) },
  { title: 'Reason', cell: (u) => h('span', { class: 'reason', 'data-reason': u.reason }, u.reason.replace(/_/g, ' ')) },
  { title: 'Event', cell: (u) => h('code', {}, u.event_name || u.event_type || '') },
  { title: 'Source', cell: (u) => sourceText(u.source) },
  { title: 'Why', cell: (u) => u.detail },
  { title: 'Payload (excerpt)', cell: (u) => h('code', { class: 'excerpt' }, u.payload_excerpt) },
];

export function unmatchedView(params) {
  const limit = pageSize(params);
  const f = { reason: params.get('reason') || '', execution: params.get('execution') || '' };
  const pager = new Pager(() => refresh());
  const out = h('div', { id: 'unmatched-result' });
  const answerOut = h('div', { id: 'action-result', 'aria-live': 'polite' });
  const reason = select('reason', UNMATCHED_REASONS, f.reason, 'any');
  const exec = h('input', { id: 'filter-execution', name: 'execution', type: 'search', value: f.execution, class: 'mono wide', placeholder: 'execution id', spellcheck: 'false' });
  const form = h('form', { class: 'filters', role: 'search', 'aria-label': 'Filter unmatched events' },
    field('Reason', reason), field('Execution', exec), h('button', { type: 'submit' }, 'Apply'));
  const apply = (ev) => {
    if (ev) ev.preventDefault();
    Object.assign(f, { reason: reason.value, execution: exec.value.trim() });
    setQuery('unmatched', f);
    pager.reset();
    refresh();
  };
  form.addEventListener('submit', apply);
  reason.addEventListener('change', apply);
  const columns = [...unmatchedColumns.slice(0, 3),
    { title: 'Execution', cell: (u) => (u.execution_id ? idText(u.execution_id, execLink(u.execution_id), IdKind.EXECUTION) : '') },
    { title: 'Correlation', cell: (u) => (u.correlation_id ? idText(u.correlation_id, null, IdKind.CORRELATION) : '') },
    ...unmatchedColumns.slice(3), resolutionColumn, rowActions('unmatched', answerOut, () => refresh())];

  const begin = latest();
  async function refresh() {
    const newest = begin();
    const a = await get('events/unmatched', { reason: f.reason, execution: f.execution, limit, cursor: pager.cursor });
    if (!newest()) return true;
    if (!a.ok) { fail(out, a); return a.status !== 0; }
    pager.next = a.body.next_cursor || '';
    show(out, a.body.items.length ? table('unmatched', columns, a.body.items, (u) => ({ 'data-unmatched-id': u.id, 'data-resolution': u.resolution || '' }))
      : empty('No unmatched event.'), pager.view('unmatched events'));
    return true;
  }
  const root = h('div', {}, h('h2', {}, 'Unmatched events'),
    h('p', { class: 'hint' }, 'Recent events that reached no wait, and why; the newest are kept. An operator may replay one through the path of a live event, or dismiss it with a reason.'), form, answerOut, out);
  return { title: 'Unmatched events', root, refresh };
}

export function deadLettersView(params) {
  const limit = pageSize(params);
  const f = { execution: params.get('execution') || '' };
  const pager = new Pager(() => refresh());
  const out = h('div', { id: 'dead-letters-result' });
  const answerOut = h('div', { id: 'action-result', 'aria-live': 'polite' });
  const exec = h('input', { id: 'filter-execution', name: 'execution', type: 'search', value: f.execution, class: 'mono wide', placeholder: 'execution id', spellcheck: 'false' });
  const form = h('form', { class: 'filters', role: 'search', 'aria-label': 'Filter dead letters' }, field('Execution', exec), h('button', { type: 'submit' }, 'Apply'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    f.execution = exec.value.trim();
    setQuery('dead-letters', f);
    pager.reset();
    refresh();
  });
  const columns = [
    { title: 'Dead-lettered', cell: (d) => when(d.created_at) },
    { title: 'Reason', cell: (d) => h('span', { class: 'reason', 'data-reason': d.reason }, d.reason.replace(/_/g, ' ')) },
    { title: 'Type', cell: (d) => h('code', {}, d.event_type) },
    { title: 'Event id', cell: (d) => (d.event_id ? h('code', {}, d.event_id) : '') },
    { title: 'Execution', cell: (d) => idText(d.execution_id, execLink(d.execution_id), IdKind.EXECUTION) },
    { title: 'Source', cell: (d) => sourceText(d.source) },
    { title: 'Buffered', cell: (d) => when(d.buffered_at) },
    { title: 'Payload', cell: (d) => h('pre', { class: 'json', tabindex: '0' }, pretty(d.payload)) },
    resolutionColumn, rowActions('dead-letter', answerOut, () => refresh()),
  ];
  const begin = latest();
  async function refresh() {
    const newest = begin();
    const a = await get('events/dead-letters', { execution: f.execution, limit, cursor: pager.cursor });
    if (!newest()) return true;
    if (!a.ok) { fail(out, a); return a.status !== 0; }
    pager.next = a.body.next_cursor || '';
    show(out, a.body.items.length ? table('dead-letters', columns, a.body.items, (d) => ({ 'data-dead-letter-id': d.id, 'data-resolution': d.resolution || '' }))
      : empty('No dead letter.'), pager.view('dead letters'));
    return true;
  }
  const root = h('div', {}, h('h2', {}, 'Dead letters'),
    h('p', { class: 'hint' }, 'Events sent by type that no wait took before they expired, were superseded, or their execution ended. An operator may replay one, to its execution, or dismiss it with a reason.'), form, answerOut, out);
  return { title: 'Dead letters', root, refresh };
}
