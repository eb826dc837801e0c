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
    confirm: (ctx, body) => {
      const by = expectedEvents(ctx).filter((e) => e.source === 'send' && e.type === body.type);
      return {
        title: `Send a ${body.type} event?`,
        lines: [by.length
          ? `Taken by ${by.map((e) => `${e.node} as ${e.name}`).join(', ')} of execution ${ctx.execution.id}.`
          : `Nothing of execution ${ctx.execution.id} waits for ${body.type} now: it will be buffered for ${bufferTTL(ctx.definition)} for the first node that will, then dead-lettered.`],
        button: 'Send',
      };
    },
    request: (ctx, body) => post(execPath(ctx, '/events'), body),
    // An event buffered was accepted but taken by nothing: not shown as done.
    outcome: (a) => (a.body.outcome === 'buffered' ? 'buffered' : 'ok'),
    done: (a) => {
      const b = a.body;
      if (b.outcome === 'duplicate') return 'Already sent with this id: not applied again.';
      const lines = [`Outcome: ${b.outcome}.`];
      for (const d of b.deliveries || []) lines.push(`${d.node_id}: taken as ${d.event}, ${d.outcome} (wait ${d.wait_status}).`);
      if (b.outcome === 'buffered') lines.push(`Not taken: nothing waits for this type. Buffered until ${b.expires_at} for the first node that will; then it is dead-lettered.`);
      return lines;
    },
  },
  {
    id: 'redrive', scope: 'execution', access: Access.OPERATE, label: 'Redrive',
    applies: (ctx) => ctx.execution.status === 'failed',
    confirm: (ctx) => ({
      title: 'Redrive this execution?',
      lines: [`Execution ${ctx.execution.id} (${ctx.execution.workflow}) goes on from where it failed: its failed and cancelled nodes run again (a wait is reopened), completed nodes keep their output.`,
        `Failed nodes: ${ctx.execution.nodes.filter((n) => n.status === 'failed').map((n) => n.id).join(', ') || 'none'}.`,
        ...redriveLines(ctx)],
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

// redriveLines says what a redrive does to each failed or cancelled node: a wait_events
// node reopens its wait, and its correlated call is sent again only when the call is
// what failed the wait; any other node runs again.
function redriveLines(ctx) {
  const defs = new Map(((ctx.definition && ctx.definition.nodes) || []).map((n) => [n.id, n]));
  return ctx.execution.nodes.filter((n) => n.status === 'failed' || n.status === 'cancelled').map((n) => {
    const def = defs.get(n.id) || {};
    const waits = (ctx.execution.wait_states || []).filter((w) => w.node_id === n.id);
    const w = waits[waits.length - 1];
    if (def.type === 'wait_events' && w && ['timeout', 'failed', 'cancelled'].includes(w.status)) {
      const call = def.data && def.data.apiCall && def.data.apiCall.enabled !== false;
      return `${n.id}: its wait reopens with fresh deadlines, keeping the events it recorded; ${!call ? 'it makes no call.'
        : w.status === 'failed' ? 'its call is sent again (the call is what failed).'
          : 'its call is not sent again (it was accepted: the reopened wait still takes the reply).'}`;
    }
    return `${n.id}: runs again from the start.`;
  });
}

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

// expectedEvents is what the execution's open waits still expect, read from the
// definition of the version it runs: each {node, name, source ('send', 'callback' or
// 'kafka'), type (send, and kafka when set), topic (kafka), match (kafka by payload),
// correlationId}. Events already arrived or timed out are left out.
export function expectedEvents(ctx) {
  const out = [];
  const def = ctx.definition;
  if (!def || !ctx.execution) return out;
  const nodes = new Map((Array.isArray(def.nodes) ? def.nodes : []).map((n) => [n.id, n]));
  for (const w of ctx.execution.wait_states || []) {
    if (w.status !== 'waiting') continue;
    const data = (nodes.get(w.node_id) || {}).data || {};
    const missing = new Set(w.missing_events || []);
    const add = (e) => { if (missing.has(e.name)) out.push({ node: w.node_id, correlationId: w.correlation_id, ...e }); };
    const on = (o) => o && typeof o === 'object' && o.enabled !== false;
    if (on(data.apiCall)) add({ name: 'api_response', source: 'callback' });
    if (on(data.kafkaEvent)) add({ name: 'kafka_event', source: 'kafka', topic: data.kafkaEvent.topic });
    for (const e of Array.isArray(data.events) ? data.events : []) {
      if (e && e.name) add({ name: e.name, source: e.source, type: e.type, topic: e.topic, match: Boolean(e.match) });
    }
  }
  return out;
}

// bufferTTL is how long an event no wait takes is kept for one that will.
function bufferTTL(def) {
  const v = def && def.eventBufferTtl;
  if (typeof v === 'number') return `${v} s`;
  return typeof v === 'string' && v ? v : '24h';
}

// deliveryCommands are the ready-to-run commands that deliver what a callback or Kafka
// wait expects, with its ids filled in: curl to the callback endpoint, kcat to the topic
// (the broker is the operator's to name). A Kafka event matched by payload has no ids
// to fill in and gets no command.
export function deliveryCommands(ctx) {
  const cmds = [];
  for (const e of expectedEvents(ctx)) {
    const ids = { execution_id: ctx.execution.id, correlation_id: e.correlationId };
    if (e.source === 'callback') {
      const url = `${location.origin}/api/internal/callbacks/console${e.name === 'api_response' ? '' : `?event=${encodeURIComponent(e.name)}`}`;
      const body = JSON.stringify(ids);
      cmds.push({ ...e, url, body, text: `curl -X POST '${url}' -H 'Content-Type: application/json' -d '${body}'` });
    } else if (e.source === 'kafka' && !e.match && e.topic) {
      const body = JSON.stringify(e.type ? { type: e.type, ...ids } : ids);
      cmds.push({ ...e, body, text: `echo '${body}' | kcat -P -b "$KAFKA_BROKERS" -t '${e.topic}'` });
    }
  }
  return cmds;
}

// sendInput is the event editor: a type (offered among those the open waits expect), an
// optional id, and a JSON payload checked as it is typed. It says who takes the type
// typed, or that nothing waits for it and it will be buffered; for the events that are
// not sent but called back or produced to Kafka, it shows the command that delivers them.
function sendInput() {
  const types = h('datalist', { id: 'send-types' });
  const type = h('input', { id: 'send-type', type: 'text', placeholder: 'event type', required: true, maxlength: '200', spellcheck: 'false', list: 'send-types', 'aria-label': 'event type', autocomplete: 'off' });
  const id = h('input', { id: 'send-id', type: 'text', placeholder: 'id (optional, for deduplication)', maxlength: '200', spellcheck: 'false', 'aria-label': 'event id (optional)' });
  const payload = h('textarea', { id: 'send-payload', rows: '5', spellcheck: 'false', class: 'mono', 'aria-label': 'payload (JSON)' }, '{}');
  const note = h('p', { class: 'payload-note muted', 'aria-live': 'polite' }, 'JSON payload');
  const takers = h('p', { id: 'send-takers', class: 'payload-note', 'aria-live': 'polite' });
  const commands = h('div', { id: 'send-commands', class: 'send-commands' });
  let current = { expected: [], ttl: '24h', shown: '' };
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
  const sent = () => current.expected.filter((e) => e.source === 'send' && e.type);
  const who = () => {
    const t = type.value.trim();
    const by = sent().filter((e) => e.type === t);
    takers.dataset.state = !t ? '' : by.length ? 'taken' : 'buffered';
    takers.classList.toggle('warn', Boolean(t) && !by.length);
    if (!t) {
      takers.textContent = sent().length ? `Waiting for: ${[...new Set(sent().map((e) => e.type))].join(', ')}.` : 'No open wait of this execution takes an event sent by type.';
    } else if (by.length) {
      takers.textContent = `Taken by ${by.map((e) => `${e.node} as ${e.name}`).join(', ')}.`;
    } else {
      const other = current.expected.find((e) => e.name === t);
      takers.textContent = `Nothing waits for this type — it will be buffered for ${current.ttl} for a node that will.`
        + (other ? ` ${t} is ${other.source === 'callback' ? 'called back' : 'a Kafka record'}, not sent: see the command below.` : '');
    }
  };
  payload.addEventListener('input', check);
  type.addEventListener('input', who);
  return {
    el: h('div', { class: 'send-editor' }, h('div', { class: 'send-line' }, type, types, id), payload, note, takers, commands),
    update: (ctx) => {
      const expected = expectedEvents(ctx);
      const cmds = deliveryCommands(ctx);
      const key = JSON.stringify([expected, cmds.map((c) => c.text)]);
      if (key === current.shown) return; // unchanged: leave what is being read or selected
      current = { expected, ttl: bufferTTL(ctx.definition), shown: key };
      types.replaceChildren(...[...new Set(sent().map((e) => e.type))].map((t) => h('option', { value: t })));
      commands.replaceChildren(...cmds.map((c) => h('div', { class: 'send-command', 'data-source': c.source, 'data-event': c.name, 'data-url': c.url || '', 'data-body': c.body, 'data-topic': c.topic || '' },
        h('p', { class: 'hint' }, c.source === 'callback' ? `${c.name} (node ${c.node}) is called back:` : `${c.name} (node ${c.node}) is a record on ${c.topic}:`),
        h('pre', { class: 'command', tabindex: '0' }, c.text))));
      who();
    },
    read: () => {
      if (!type.value.trim()) throw new Error('An event needs a type.');
      if (!check()) throw new Error('The payload is not JSON.');
      const body = { type: type.value.trim(), payload: JSON.parse(payload.value || 'null') };
      if (id.value.trim()) body.id = id.value.trim();
      return body;
    },
    waited: (t) => sent().some((e) => e.type === t),
    ttl: () => current.ttl,
  };
}

// renderAnswer shows what the API said to an action: its summary, or its problem.
export function renderAnswer(action, answer, ctx) {
  if (!answer.ok) {
    return h('div', { class: 'action-answer', 'data-action': action.id, 'data-outcome': 'problem' },
      h('p', { class: 'answer-head' }, `${action.label}: refused`), renderProblem(answer.problem));
  }
  const said = action.done(answer, ctx);
  const outcome = action.outcome ? action.outcome(answer) : 'ok';
  return h('div', { class: 'action-answer', 'data-action': action.id, 'data-outcome': outcome, role: 'status' },
    h('p', { class: 'answer-head' }, `${action.label}: ${outcome === 'ok' ? 'done' : `${outcome}, not taken`} (${answer.status})`),
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
  // An input in the dialog is checked there: what it lacks is said beside it.
  const check = inDialog && input ? () => { try { input.read(); return ''; } catch (err) { return err.message; } } : null;
  if (!(await confirmAction(q.title, q.lines, q.button, inDialog && input ? input.el : null, check))) return false;
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

