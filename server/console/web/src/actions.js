// What an operator can do from the console. Each action is one entry of ACTIONS: where
// it shows (on the execution, on a selected node's wait, or on a row of the dead letters
// or unmatched events), when it applies, what the confirmation says, and the request it
// makes. An action shows only for an endpoint the API has; a new endpoint is one more
// entry here. Whether the operator may use an action is canAct's answer alone: the
// access the action's route needs, against the role the API says the token has.

import { h } from './dom.js';
import { post, renderProblem } from './api.js';
import { session, Access } from './session.js';
import { confirmAction } from './widgets.js';

const FINISHED = new Set(['completed', 'failed', 'cancelled']);
const OPEN_WAIT = new Set(['waiting', 'scheduled']);

// canAct says whether this operator may use an action: whether the role whoami named
// has the access the action's route needs (server/access.go). A viewer sees
// no action; a sender never sees a page to act on, as it may not read.
export function canAct(action) {
  return Boolean(action) && session.allows(action.access);
}

const execPath = (ctx, rest) => `executions/${encodeURIComponent(ctx.execution.id)}${rest}`;
const execLink = (id) => h('a', { href: `#/executions/${encodeURIComponent(id)}`, 'data-id': id }, id);

// Each action: id; scope 'execution', 'wait', 'dead-letter' or 'unmatched'; access (what
// its route needs); label; applies(ctx) with ctx {execution, wait?} or, on a row, {item};
// input(ctx) → {el, read() → body or throws Error with a message, reset()?} (optional; a
// row's input shows in the confirmation); confirm(ctx, body) → {title, lines, button};
// request(ctx, body) → Answer; done(answer, ctx) → what to show (text or elements).
export const ACTIONS = [
  {
    id: 'cancel-execution', scope: 'execution', access: Access.OPERATE, label: 'Cancel execution',
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
    id: `cancel-wait-${then}`, scope: 'wait', access: Access.OPERATE, label: then === 'continue' ? 'Cancel wait, continue' : 'Cancel wait, fail',
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
    id: 'send-event', scope: 'execution', access: Access.SEND, label: 'Send event',
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
  {
    id: 'redrive', scope: 'execution', access: Access.OPERATE, label: 'Redrive',
    applies: (ctx) => ctx.execution.status === 'failed',
    confirm: (ctx) => ({
      title: 'Redrive this execution?',
      lines: [`Execution ${ctx.execution.id} (${ctx.execution.workflow}) goes on from where it failed: its failed and cancelled nodes run again (a wait is reopened), completed nodes keep their output.`,
        `Failed nodes: ${ctx.execution.nodes.filter((n) => n.status === 'failed').map((n) => n.id).join(', ') || 'none'}.`],
      button: 'Redrive',
    }),
    request: (ctx) => post(execPath(ctx, '/redrive')),
    done: (a) => {
      const b = a.body;
      return [`Execution is ${b.status} (redrive ${b.redrive_count}).`,
        ...(b.nodes || []).map((n) => `${n.id}: ${String(n.action).replace(/_/g, ' ')}.`)];
    },
  },
  {
    id: 'restart', scope: 'execution', access: Access.OPERATE, label: 'Restart',
    // Like redrive, on a failed execution: the API would also restart a cancelled or open
    // one (cancelling it first), which the page's Cancel already covers.
    applies: (ctx) => ctx.execution.status === 'failed' && !ctx.execution.restarted_as,
    input: restartInput,
    confirm: (ctx, body) => ({
      title: 'Restart this execution?',
      lines: [`A new execution of ${ctx.execution.workflow} starts with the same input, on ${body.version === 'latest' ? 'the latest version of the workflow' : `version ${ctx.execution.workflow_version}`}; this one stays as it is, linked to the new one.`],
      button: 'Restart',
    }),
    request: (ctx, body) => post(execPath(ctx, '/restart'), body),
    done: (a) => [h('span', {}, 'Restarted as ', execLink(a.body.id), ` (${a.body.status}).`)],
  },
  ...['dead-letter', 'unmatched'].flatMap((scope) => {
    const what = scope === 'dead-letter' ? 'dead letter' : 'unmatched event';
    const path = (ctx, verb) => `events/${scope === 'dead-letter' ? 'dead-letters' : 'unmatched'}/${encodeURIComponent(ctx.item.id)}/${verb}`;
    return [
      {
        id: `replay-${scope}`, scope, access: Access.OPERATE, label: 'Replay',
        applies: (ctx) => !ctx.item.resolution,
        confirm: (ctx) => ({
          title: `Replay ${what} ${ctx.item.id}?`,
          lines: [`The event goes through the path of a live event again, to execution ${ctx.item.execution_id || 'it names'}; what it does is shown, and the row is marked replayed when it was applied.`],
          button: 'Replay',
        }),
        request: (ctx) => post(path(ctx, 'replay')),
        done: (a) => [h('span', {}, `Replayed: ${a.body.outcome}, into execution `, execLink(a.body.execution_id), '.')],
      },
      {
        id: `dismiss-${scope}`, scope, access: Access.OPERATE, label: 'Dismiss',
        applies: (ctx) => !ctx.item.resolution,
        input: () => reasonInput(`dismiss-${scope}-reason`, true),
        confirm: (ctx) => ({
          title: `Dismiss ${what} ${ctx.item.id}?`,
          lines: ['It stays listed, marked dismissed with the reason, and can no longer be replayed.'],
          button: 'Dismiss',
        }),
        request: (ctx, body) => post(path(ctx, 'dismiss'), body),
        done: (a) => `${what[0].toUpperCase()}${what.slice(1)} ${a.body.id} ${a.body.resolution}: ${a.body.reason}`,
      },
    ];
  }),
];

// restartInput picks the version a restart runs on, and an optional reason.
function restartInput() {
  const version = h('select', { id: 'restart-version', 'aria-label': 'workflow version' },
    h('option', { value: 'same' }, 'same version'), h('option', { value: 'latest' }, 'latest version'));
  const reason = reasonInput('restart-reason');
  return {
    el: h('span', { class: 'restart-input' }, version, reason.el),
    read: () => ({ version: version.value, ...reason.read() }),
    reset: () => { version.value = 'same'; reason.reset(); },
  };
}

// reasonInput is a reason for the record; required refuses to send without one.
function reasonInput(id, required) {
  const input = h('input', { id, type: 'text', placeholder: required ? 'reason (required)' : 'reason (optional)', maxlength: '500', class: 'reason-input', required: Boolean(required) });
  return {
    el: input,
    reset: () => { input.value = ''; },
    read: () => {
      const r = input.value.trim();
      if (required && !r) throw new Error('A reason is required: say why.');
      return r ? { reason: r } : {};
    },
  };
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

// runAction asks for confirmation, sends the request and renders the answer into out.
// input, when given, is read before the confirmation; inDialog puts its element in the
// confirmation dialog (a row's input), where it is read once confirmed.
export async function runAction(action, ctx, input, out, { inDialog = false } = {}) {
  let body = {};
  if (!inDialog) {
    try {
      body = input ? input.read() : {};
    } catch (err) {
      replaceChildren(out, renderProblem({ title: 'Not sent', detail: err.message }));
      return false;
    }
  }
  const q = action.confirm(ctx, body);
  if (!(await confirmAction(q.title, q.lines, q.button, inDialog && input ? input.el : null))) return false;
  if (inDialog && input) {
    try {
      body = input.read();
    } catch (err) {
      replaceChildren(out, renderProblem({ title: 'Not sent', detail: err.message }));
      return false;
    }
  }
  const answer = await action.request(ctx, body);
  replaceChildren(out, renderAnswer(action, answer, ctx));
  // Done: a reason typed for it is not left to be sent again with the next action.
  if (answer.ok && input && input.reset) input.reset();
  return true;
}

function replaceChildren(el, child) {
  el.replaceChildren(child);
}

