// What an operator can do from an execution's page. Each action is one entry of ACTIONS:
// where it shows (on the execution, or on a selected node's wait), when it applies, what
// the confirmation says, and the request it makes. An action shows only for an endpoint
// the API has; a new endpoint is one more entry here. Whether the operator may use an
// action is canAct's answer alone, so that roles plug in at one place.

import { h } from './dom.js';
import { post, renderProblem } from './api.js';
import { sourceText } from './format.js';

const FINISHED = new Set(['completed', 'failed', 'cancelled']);
const OPEN_WAIT = new Set(['waiting', 'scheduled']);

// canAct says whether this operator may use an action. Every operator may, until the
// API tells roles apart; then this is the one place that asks.
export function canAct(action) {
  return Boolean(action);
}

const execPath = (ctx, rest) => `executions/${encodeURIComponent(ctx.execution.id)}${rest}`;

// Each action: id; scope 'execution' or 'wait'; label; applies(ctx) with ctx {execution,
// wait?}; input(ctx) → {el, read() → body or throws Error with a message} (optional);
// confirm(ctx) → {title, lines, button}; request(ctx, body) → Answer; done(answer) → what
// to show.
export const ACTIONS = [
  {
    id: 'cancel-execution', scope: 'execution', label: 'Cancel execution',
    applies: (ctx) => !FINISHED.has(ctx.execution.status),
    input: () => reasonInput('cancel-execution-reason'),
    confirm: (ctx) => ({
      title: 'Cancel this execution?',
      lines: [`Execution ${ctx.execution.id} (${ctx.execution.workflow}) stops: its open waits are cancelled and no further node runs. This cannot be undone.`],
      button: 'Cancel execution',
    }),
    request: (ctx, body) => post(execPath(ctx, '/cancel'), body),
    done: (a) => `Execution is ${a.body.status}.`,
  },
  ...['continue', 'fail'].map((then) => ({
    id: `cancel-wait-${then}`, scope: 'wait', label: then === 'continue' ? 'Cancel wait, continue' : 'Cancel wait, fail',
    applies: (ctx) => ctx.wait && OPEN_WAIT.has(ctx.wait.status) && !FINISHED.has(ctx.execution.status),
    input: () => reasonInput(`cancel-wait-${then}-reason`),
    confirm: (ctx) => ({
      title: `Cancel the wait of node ${ctx.wait.node_id}?`,
      lines: [then === 'continue'
        ? `The wait stops and the execution goes on from ${ctx.wait.node_id} with the events it has (its cancelled branch, where the graph has one).`
        : `The wait stops and the node fails, and with it the execution.`,
      `Still missing: ${(ctx.wait.missing_events || []).join(', ') || 'nothing'}.`],
      button: then === 'continue' ? 'Cancel and continue' : 'Cancel and fail',
    }),
    request: (ctx, body) => post(execPath(ctx, `/waits/${encodeURIComponent(ctx.wait.node_id)}/cancel`), { ...body, then }),
    done: (a, ctx) => {
      const w = (a.body.wait_states || []).find((x) => x.node_id === ctx.wait.node_id);
      return `Wait is ${w ? w.status : 'cancelled'}; execution is ${a.body.status}.`;
    },
  })),
  {
    id: 'send-event', scope: 'execution', label: 'Send event',
    applies: (ctx) => !FINISHED.has(ctx.execution.status),
    input: sendInput,
    confirm: (ctx, body) => ({
      title: `Send a ${body.type} event?`,
      lines: [`Every node of execution ${ctx.execution.id} waiting for ${body.type} takes it; if none does yet, it is buffered for the first that will.`],
      button: 'Send',
    }),
    request: (ctx, body) => post(execPath(ctx, '/events'), body),
    done: (a) => {
      const b = a.body;
      if (b.outcome === 'duplicate') return 'Already sent with this id: not applied again.';
      const lines = [`Outcome: ${b.outcome}.`];
      for (const d of b.deliveries || []) lines.push(`${d.node_id}: taken as ${d.event}, ${d.outcome} (wait ${d.wait_status}).`);
      if (b.outcome === 'buffered') lines.push(`Buffered until ${b.expires_at} for the first node that waits for it.`);
      return lines;
    },
  },
];

function reasonInput(id) {
  const input = h('input', { id, type: 'text', placeholder: 'reason (optional)', maxlength: '500', class: 'reason-input' });
  return { el: input, read: () => (input.value.trim() ? { reason: input.value.trim() } : {}) };
}

// sendInput is the event editor: a type, an optional id, and a JSON payload checked as
// it is typed.
function sendInput() {
  const type = h('input', { id: 'send-type', type: 'text', placeholder: 'event type', required: true, maxlength: '200', spellcheck: 'false' });
  const id = h('input', { id: 'send-id', type: 'text', placeholder: 'id (optional, for deduplication)', maxlength: '200', spellcheck: 'false' });
  const payload = h('textarea', { id: 'send-payload', rows: '5', spellcheck: 'false', class: 'mono', 'aria-label': 'payload (JSON)' }, '{}');
  const note = h('p', { class: 'payload-note muted', 'aria-live': 'polite' }, 'JSON payload');
  const check = () => {
    try {
      JSON.parse(payload.value || 'null');
      note.textContent = 'JSON payload';
      note.classList.remove('bad');
      return true;
    } catch (err) {
      note.textContent = `Not JSON: ${err.message}`;
      note.classList.add('bad');
      return false;
    }
  };
  payload.addEventListener('input', check);
  return {
    el: h('div', { class: 'send-editor' }, h('div', { class: 'send-line' }, type, id), payload, note),
    read: () => {
      if (!type.value.trim()) throw new Error('An event needs a type.');
      if (!check()) throw new Error('The payload is not JSON.');
      const body = { type: type.value.trim(), payload: JSON.parse(payload.value || 'null') };
      if (id.value.trim()) body.id = id.value.trim();
      return body;
    },
  };
}

// renderAnswer shows what the API said to an action: its summary, or its problem.
export function renderAnswer(action, answer, ctx) {
  if (!answer.ok) {
    return h('div', { class: 'action-answer', 'data-action': action.id, 'data-outcome': 'problem' },
      h('p', { class: 'answer-head' }, `${action.label}: refused`), renderProblem(answer.problem));
  }
  const said = action.done(answer, ctx);
  return h('div', { class: 'action-answer', 'data-action': action.id, 'data-outcome': 'ok', role: 'status' },
    h('p', { class: 'answer-head' }, `${action.label}: done (${answer.status})`),
    (Array.isArray(said) ? said : [said]).map((l) => h('p', {}, l)));
}

