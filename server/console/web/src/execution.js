// One execution: its graph with each node's state, the selected node's output, attempts
// and wait (each expected event arrived, missing or timed out, from where, the countdown
// to each deadline, the strategy and what it still needs), the execution's timeline, the
// unmatched events that named it, and the actions the API offers on it.

import { h, replace } from './dom.js';
import { get, renderProblem } from './api.js';
import { sourceText, pretty, fmtTime } from './format.js';
import { idText, IdKind, badge, deadline, when, table, empty, latest } from './widgets.js';
import { eventStates, unmatchedColumns, resolutionColumn, rowActions } from './lists.js';
import { GraphView } from './graph.js';
import { ACTIONS, canAct, runAction } from './actions.js';

const OPEN_WAIT = new Set(['waiting', 'scheduled']);

// stillNeeds says what an open wait needs before it completes, by its strategy.
function stillNeeds(w) {
  if (!OPEN_WAIT.has(w.status)) return 'nothing: the wait has ended';
  if (w.wait_type === 'timer') return `its timer to fire (${fmtTime(w.next_deadline_at)})`;
  const missing = w.missing_events || [];
  const received = new Set((w.received_events || []).map((r) => r.name));
  switch (w.aggregation_strategy) {
    case 'any':
      return `any one of: ${missing.join(', ')}`;
    case 'required_only':
    case 'custom': {
      const need = (w.required_events || []).filter((n) => !received.has(n));
      return need.length ? `all of: ${need.join(', ')}` : 'nothing more';
    }
    default:
      return missing.length ? `all of: ${missing.join(', ')}` : 'nothing more';
  }
}

function timelineText(e) {
  const node = e.node_id ? `${e.node_id}: ` : '';
  switch (e.kind) {
    case 'execution_started': return 'Execution started';
    case 'node_started': return `${node}node started`;
    case 'node_finished': return `${node}node ${e.status}${e.detail ? ` — ${e.detail}` : ''}`;
    case 'wait_started': return `${node}began waiting (${e.status === 'timer' ? 'timer' : 'events'})`;
    case 'event_received': return `${node}event ${e.event} arrived from ${sourceText(e.source)}`;
    case 'wait_ended': return `${node}wait ended ${e.status}${e.timed_out_events && e.timed_out_events.length ? ` — timed out: ${e.timed_out_events.join(', ')}` : ''}${e.detail ? ` — ${e.detail}` : ''}`;
    case 'wait_resumed': return `${node}execution resumed${e.detail ? ` by ${e.detail}` : ''}`;
    case 'execution_finished': return `Execution ${e.status}${e.detail ? ` — ${e.detail}` : ''}`;
    case 'execution_redriven': return `Execution redriven (${e.detail})`;
    default: return `${node}${e.kind}`;
  }
}

// searchBox finds an execution by id or correlation id on the executions page.
function searchBox() {
  const q = h('input', { id: 'missing-q', name: 'q', type: 'search', placeholder: 'execution id or correlation id', spellcheck: 'false', autocomplete: 'off', class: 'mono wide' });
  const form = h('form', { class: 'filters', role: 'search', 'aria-label': 'Find an execution' },
    h('label', { class: 'field', for: 'missing-q' }, h('span', {}, 'Find an execution'), q), h('button', { type: 'submit' }, 'Search'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const v = q.value.trim();
    location.hash = v ? `#/executions?q=${encodeURIComponent(v)}` : '#/executions';
  });
  return form;
}

export function executionView(id, params) {
  let selected = params.get('node') || '';
  let exec = null;        // the last execution read
  let graph = null;       // GraphView of the execution's workflow version
  let graphKey = '';      // workflow@version the graph shows
  let waitActionsKey = ''; // node/wait the wait actions were built for

  const head = h('div', { id: 'execution-head', class: 'execution-head' });
  const actionBar = h('div', { id: 'actions', class: 'action-bar', 'aria-label': 'Actions' });
  const result = h('div', { id: 'action-result', 'aria-live': 'polite' });
  const graphWrap = h('div', { id: 'graph-wrap', class: 'graph-wrap' }, empty('Loading the graph…'));
  const nodeInfo = h('div', { id: 'node-info' });
  const waitActions = h('div', { id: 'wait-actions', class: 'action-bar' });
  const panel = h('aside', { id: 'node-panel', class: 'node-panel', 'aria-label': 'Selected node' }, nodeInfo, waitActions);
  const timeline = h('ol', { id: 'timeline', class: 'timeline' });
  const unmatched = h('div', { id: 'execution-unmatched' });
  const problem = h('div', { id: 'execution-problem' });

  let definition = null;  // the definition of the version the execution runs, once read
  const ctx = () => ({ execution: exec, wait: waitOf(selected), definition });

  function waitOf(node) {
    if (!exec || !node) return null;
    const ws = exec.wait_states.filter((w) => w.node_id === node);
    return ws.length ? ws.reduce((a, b) => (Date.parse(b.created_at) >= Date.parse(a.created_at) ? b : a)) : null;
  }

  function select(node) {
    selected = node;
    const q = new URLSearchParams({ node });
    history.replaceState(null, '', `#/executions/${encodeURIComponent(id)}?${q}`);
    render();
  }

  // actionBlock is one action's button and input, built once so that what the operator
  // types survives the polls; show() hides it when the action does not apply.
  function actionBlock(action) {
    const input = action.input ? action.input() : null;
    const btn = h('button', { type: 'button', class: 'action', 'data-action': action.id }, action.label);
    // Hidden until the execution is read: what applies depends on it.
    const block = h('div', { class: 'action-block', 'data-action-block': action.id, hidden: true }, input ? input.el : null, btn);
    btn.addEventListener('click', async () => {
      btn.disabled = true;
      try {
        if (await runAction(action, ctx(), input, result)) await refresh();
      } finally {
        btn.disabled = false;
      }
    });
    return {
      action, block,
      show: (c) => {
        block.hidden = !(canAct(action) && action.applies(c));
        // An input that depends on the execution (what its waits expect) follows it.
        if (!block.hidden && input && input.update) input.update(c);
      },
    };
  }

  const execBlocks = ACTIONS.filter((a) => a.scope === 'execution').map(actionBlock);
  actionBar.append(...execBlocks.map((b) => b.block));
  let waitBlocks = [];

  function renderHead() {
    replace(head,
      h('h2', {}, 'Execution ', idText(exec.id, null, IdKind.EXECUTION), ' ', h('span', { id: 'execution-status', 'data-execution-status': exec.status }, badge(exec.status))),
      h('dl', { class: 'facts' },
        exec.summary ? [h('dt', {}, 'Key'), h('dd', { id: 'execution-summary', class: 'summary' }, exec.summary)] : null,
        h('dt', {}, 'Workflow'), h('dd', {}, h('a', { href: `#/executions?workflow=${encodeURIComponent(exec.workflow)}` }, exec.workflow), ` version ${exec.workflow_version}`),
        h('dt', {}, 'Started'), h('dd', {}, when(exec.created_at)),
        h('dt', {}, 'Finished'), h('dd', {}, when(exec.finished_at)),
        exec.error ? [h('dt', {}, 'Error'), h('dd', { class: 'detail-error' }, exec.error)] : null,
        exec.redrive_count ? [h('dt', {}, 'Redriven'), h('dd', { id: 'execution-redriven' }, `${exec.redrive_count} time${exec.redrive_count === 1 ? '' : 's'}, last `, when(exec.redriven_at))] : null,
        exec.restarted_from ? [h('dt', {}, 'Restart of'), h('dd', {}, idText(exec.restarted_from, `#/executions/${encodeURIComponent(exec.restarted_from)}`, IdKind.EXECUTION))] : null,
        exec.restarted_as ? [h('dt', {}, 'Restarted as'), h('dd', { id: 'execution-restarted-as' }, idText(exec.restarted_as, `#/executions/${encodeURIComponent(exec.restarted_as)}`, IdKind.EXECUTION))] : null,
        h('dt', {}, 'Input'), h('dd', {}, h('pre', { class: 'json', tabindex: '0' }, pretty(exec.input)))));
  }

  function renderGraph() {
    if (!graph) return;
    const states = new Map(exec.nodes.map((n) => [n.id, n.status]));
    const spinning = new Set(exec.nodes.filter((n) => n.status === 'waiting_for_events').map((n) => n.id));
    for (const w of exec.wait_states) if (OPEN_WAIT.has(w.status)) spinning.add(w.node_id);
    const warnings = new Map(exec.nodes.filter((n) => n.warning).map((n) => [n.id, n.warning]));
    graph.update(states, spinning, selected, warnings);
  }

  function renderNode() {
    const n = exec.nodes.find((x) => x.id === selected);
    const w = waitOf(selected);
    if (!selected) {
      replace(nodeInfo, empty('Select a node of the graph to see its output, attempts and wait.'));
    } else {
      replace(nodeInfo,
        h('h3', {}, 'Node ', h('code', {}, selected), ' ', badge(n ? n.status : 'not_reached'),
          n && n.warning ? [' ', h('span', { class: 'badge badge-warning', 'data-warning': '', title: n.warning }, 'warning')] : null),
        n ? h('dl', { class: 'facts' },
          h('dt', {}, 'Attempts'), h('dd', { id: 'node-attempts' }, String(n.attempts)),
          h('dt', {}, 'Started'), h('dd', {}, when(n.started_at)),
          h('dt', {}, 'Finished'), h('dd', {}, when(n.finished_at)),
          n.error ? [h('dt', {}, 'Error'), h('dd', { id: 'node-error', class: 'detail-error' }, n.error)] : null,
          n.warning ? [h('dt', {}, 'Warning'), h('dd', { id: 'node-warning', class: 'detail-warning', role: 'note' }, n.warning)] : null,
          n.output !== undefined ? [h('dt', {}, 'Output'), h('dd', {}, h('pre', { id: 'node-output', class: 'json', tabindex: '0' }, pretty(n.output)))] : null)
          : h('p', { class: 'muted' }, 'This node has not run in this execution.'),
        w ? waitSection(w) : null);
    }
    // The wait's actions are rebuilt only for another wait, so a reason being typed stays.
    const key = `${selected}/${w ? w.id : ''}`;
    if (key !== waitActionsKey) {
      waitActionsKey = key;
      waitBlocks = w ? ACTIONS.filter((a) => a.scope === 'wait').map(actionBlock) : [];
      replace(waitActions, waitBlocks.map((b) => b.block));
    }
    const c = ctx();
    for (const b of waitBlocks) b.show(c);
  }

  function waitSection(w) {
    const rows = eventStates(w);
    return h('section', { class: 'wait', id: 'wait', 'data-wait-id': w.id, 'data-wait-status': w.status, 'data-wait-type': w.wait_type },
      h('h4', {}, w.wait_type === 'timer' ? 'Timer' : 'Wait', ' ', badge(w.status)),
      h('dl', { class: 'facts' },
        w.wait_type === 'timer' ? [h('dt', {}, 'Timer'), h('dd', {}, h('code', {}, JSON.stringify(w.timer || {})))]
          : [h('dt', {}, 'Strategy'), h('dd', { id: 'wait-strategy' }, w.aggregation_strategy || '')],
        h('dt', {}, 'Still needs'), h('dd', { id: 'wait-needs' }, stillNeeds(w)),
        OPEN_WAIT.has(w.status) ? [
          h('dt', {}, w.wait_type === 'timer' ? 'Fires' : 'Next deadline'), h('dd', {}, deadline(w.next_deadline_at), ' ', h('span', { class: 'muted' }, fmtTime(w.next_deadline_at))),
          w.wait_type === 'timer' ? null : [h('dt', {}, 'Expires'), h('dd', {}, deadline(w.expires_at), ' ', h('span', { class: 'muted' }, fmtTime(w.expires_at)))],
        ] : null,
        h('dt', {}, 'Correlation id'), h('dd', {}, idText(w.correlation_id, null, IdKind.CORRELATION)),
        h('dt', {}, 'Wait id'), h('dd', {}, idText(w.id, null, IdKind.WAIT)),
        h('dt', {}, 'Version'), h('dd', {}, String(w.version)),
        w.error ? [h('dt', {}, w.status === 'cancelled' ? 'Reason' : 'Error'), h('dd', { class: 'detail-error' }, w.error)] : null,
        w.resumed_at ? [h('dt', {}, 'Resumed'), h('dd', {}, when(w.resumed_at), w.resumed_by ? ` by ${w.resumed_by}` : '')] : null),
      rows.length ? table('wait-events', [
        { title: 'Event', cell: (e) => [h('code', {}, e.name), e.required ? [' ', h('span', { class: 'chip-required' }, 'required')] : null] },
        { title: 'State', cell: (e) => h('span', { class: 'chip', 'data-event-state': e.state }, e.state.replace('_', ' ')) },
        { title: 'When', cell: (e) => (e.received ? when(e.received.received_at) : '') },
        { title: 'Source', cell: (e) => (e.received ? sourceText(e.received.source) : '') },
      ], rows, (e) => ({ 'data-event-name': e.name, 'data-event-state': e.state })) : null);
  }

  function renderTimeline() {
    replace(timeline, (exec.timeline || []).map((e) => h('li', { 'data-kind': e.kind, 'data-node-id': e.node_id || '' },
      h('time', { datetime: e.at }, fmtTime(e.at)), ' ', h('span', {}, timelineText(e)))));
  }

  function render() {
    if (!exec) return;
    renderHead();
    const c = ctx();
    for (const b of execBlocks) b.show(c);
    renderGraph();
    renderNode();
    renderTimeline();
  }

  // The unmatched events that named it, each with its resolution and, to an operator,
  // Replay and Dismiss; their answers show with the page's other actions'.
  const unmatchedColumnsHere = [...unmatchedColumns, resolutionColumn, rowActions('unmatched', result, () => refresh())];

  const begin = latest();
  async function refresh() {
    const newest = begin();
    const [a, u] = await Promise.all([
      get(`executions/${encodeURIComponent(id)}`),
      get('events/unmatched', { execution: id, limit: 50 }),
    ]);
    if (!newest()) return true;
    if (!a.ok) {
      if (a.status === 404) {
        // No such execution: only the answer and a way to find the one meant.
        exec = null;
        body.hidden = true;
        replace(problem, renderProblem(a.problem), searchBox());
      } else {
        // Unreachable or refused: the last answer stays, dimmed by the page's frame.
        replace(problem, renderProblem(a.problem));
      }
      return a.status !== 0;
    }
    replace(problem);
    body.hidden = false;
    exec = a.body;
    const key = `${exec.workflow}@${exec.workflow_version}`;
    if (key !== graphKey) {
      const wf = await get(`workflows/${encodeURIComponent(exec.workflow)}`, { version: exec.workflow_version });
      if (!newest()) return true;
      if (wf.ok) {
        graphKey = key;
        definition = wf.body.definition;
        graph = new GraphView(wf.body.definition, select);
        replace(graphWrap, graph.el);
      } else {
        replace(graphWrap, renderProblem(wf.problem));
      }
    }
    if (!selected) {
      // Where the execution stands: its open wait, else the node that failed.
      const open = exec.wait_states.find((w) => OPEN_WAIT.has(w.status));
      const failed = exec.nodes.find((n) => n.status === 'failed');
      if (open) selected = open.node_id;
      else if (failed) selected = failed.id;
    }
    render();
    if (u.ok) {
      replace(unmatched, u.body.items.length ? table('unmatched', unmatchedColumnsHere, u.body.items, (x) => ({ 'data-unmatched-id': x.id, 'data-reason': x.reason, 'data-resolution': x.resolution || '' }))
        : empty('No event that named this execution went unmatched.'));
    } else {
      replace(unmatched, renderProblem(u.problem));
    }
    return a.status !== 0;
  }

  // body is everything that belongs to an execution: hidden until one is read.
  const body = h('div', { class: 'execution-main', hidden: true }, head, actionBar, result,
    h('div', { class: 'execution-body' },
      h('section', { class: 'graph-section', 'aria-label': 'Graph' }, h('h3', {}, 'Graph'), graphWrap), panel),
    h('div', { class: 'execution-lower' },
      h('section', { 'aria-labelledby': 'timeline-title' }, h('h3', { id: 'timeline-title' }, 'Timeline'), timeline),
      h('section', { 'aria-labelledby': 'unmatched-title' }, h('h3', { id: 'unmatched-title' }, 'Unmatched events that named this execution'), unmatched)));
  replace(problem, empty('Loading the execution…'));
  const root = h('div', { class: 'execution' },
    h('p', {}, h('a', { href: '#/executions' }, '← Executions')),
    problem, body);
  return { title: `Execution ${id}`, root, refresh };
}
