// rendezvous console: finds executions, follows one through its workflow's graph and acts
// on it. It reads and changes nothing but through the public HTTP API (/api/v1), which it
// polls, so what it shows is what the API answers. Pages are routed by the address's
// fragment (#/executions, #/executions/<id>, #/waits, #/unmatched, #/dead-letters), so a
// reload or a shared link opens the same page. Before each poll it asks the API who
// it reads as (session.js), and asks for a token when the API wants one.

import { h, replace } from './dom.js';
import { executionsView, waitsView, unmatchedView, deadLettersView } from './lists.js';
import { executionView } from './execution.js';
import { tickCountdowns } from './widgets.js';
import { tokenStore } from './api.js';
import { session, SessionState } from './session.js';

const POLL_MS = 2000;

const routes = [
  { re: /^executions\/([^/?]+)$/, view: (m, p) => executionView(decodeURIComponent(m[1]), p), nav: 'executions' },
  { re: /^executions$/, view: (m, p) => executionsView(p), nav: 'executions' },
  { re: /^waits$/, view: (m, p) => waitsView(p), nav: 'waits' },
  { re: /^unmatched$/, view: (m, p) => unmatchedView(p), nav: 'unmatched' },
  { re: /^dead-letters$/, view: (m, p) => deadLettersView(p), nav: 'dead-letters' },
  { re: /^builder(?:\/([^/?]+))?$/, view: (m) => lazyBuilderView(m[1] ? decodeURIComponent(m[1]) : ''), nav: 'builder' },
];

const main = document.getElementById('view');
const status = document.getElementById('api-status');
const updated = document.getElementById('updated');
const principal = document.getElementById('principal');
const forget = document.getElementById('forget-token');
const tokenForm = document.getElementById('token-form');
const tokenWhy = document.getElementById('token-why');
const tokenInput = document.getElementById('token-input');
let current = null;
let generation = 0; // a poll of a page no longer shown is dropped
let timer = 0;

// lazyBuilderView is the builder's page, whose code (React and the builder's libraries)
// is loaded when the page first opens: the other pages never load it.
function lazyBuilderView(name) {
  const root = h('div', { class: 'builder-page', id: 'builder' }, h('p', { class: 'empty' }, 'Loading the builder…'));
  let view = null;
  let disposed = false;
  const ready = import('./builder/index.jsx').then((m) => {
    if (!disposed) view = m.builderView(name, root);
  });
  return {
    root,
    title: name ? `Builder · ${name}` : 'Builder',
    async refresh() {
      await ready;
      return view ? view.refresh() : true;
    },
    dispose() {
      disposed = true;
      if (view) view.dispose();
    },
  };
}

function parse() {
  const raw = location.hash.replace(/^#\/?/, '');
  const [path, query] = raw.split('?');
  return { path: path || 'executions', params: new URLSearchParams(query || '') };
}

function mount() {
  const { path, params } = parse();
  let route = null, m = null;
  for (const r of routes) {
    m = path.match(r.re);
    if (m) { route = r; break; }
  }
  generation++;
  if (current && current.dispose) current.dispose();
  if (!route) {
    current = null;
    replace(main, h('p', { class: 'empty' }, 'No such page. ', h('a', { href: '#/executions' }, 'Executions')));
    return;
  }
  current = route.view(m, params);
  document.title = `rendezvous · ${current.title}`;
  for (const a of document.querySelectorAll('nav.main a')) a.classList.toggle('current', a.dataset.nav === route.nav);
  replace(main);
  poll();
}

// renderSession shows who the console reads as, the token form when the API wants a
// token or refuses the one given, and the forget button while a token is kept.
function renderSession() {
  const p = session.principal;
  const ask = session.state === SessionState.NEEDED || session.state === SessionState.FORBIDDEN;
  tokenForm.hidden = !ask;
  forget.hidden = !tokenStore.get();
  // Without authentication (kind insecure) there is nobody to name.
  principal.textContent = p && p.kind !== 'insecure' ? `as ${p.kind}:${p.name} (${p.role})` : '';
  principal.dataset.role = p ? p.role : '';
  principal.dataset.kind = p ? p.kind : '';
  tokenWhy.textContent = session.state === SessionState.FORBIDDEN
    ? 'This token\'s role may not read executions and waits. Use a viewer, operator or admin token.'
    : 'This service needs a bearer token (role viewer, operator or admin). It is kept in this browser tab only, and sent to the API alone.';
}

// A page needs a principal that may read: until there is one, none is shown.
function refusedText() {
  const r = session.refusal;
  const why = r ? r.detail || r.title : '';
  return session.state === SessionState.NEEDED
    ? `Sign in: ${why || 'the API needs a token'}`
    : `Not allowed to read${why ? `: ${why}` : ''}`;
}

// poll refreshes the page now and then every POLL_MS; the API's state is shown in the
// header, and the page keeps what it last showed while the API is unreachable.
async function poll() {
  clearTimeout(timer);
  const gen = generation;
  const state = await session.check();
  if (gen !== generation) return;
  renderSession();
  if (state === SessionState.NEEDED || state === SessionState.FORBIDDEN) {
    replace(main, h('p', { class: 'empty', id: 'signed-out' }, 'Give a token that may read to see this page.'));
    status.dataset.state = 'error';
    status.textContent = refusedText();
    document.body.classList.remove('stale');
    timer = setTimeout(poll, POLL_MS);
    return;
  }
  if (current && current.root.parentNode !== main) replace(main, current.root);
  if (current) {
    let reached = false;
    try {
      reached = await current.refresh();
    } catch (err) {
      console.error(err); // a defect of the page, not of the API
    }
    if (gen !== generation) return;
    status.dataset.state = reached ? 'ok' : 'error';
    status.textContent = reached ? 'API reachable' : 'API unreachable — showing the last answer';
    document.body.classList.toggle('stale', !reached);
    if (reached) {
      updated.dataset.at = new Date().toISOString();
      updated.textContent = `updated ${new Date().toLocaleTimeString()}`;
    }
  }
  timer = setTimeout(poll, POLL_MS);
}

tokenForm.addEventListener('submit', (ev) => {
  ev.preventDefault();
  const t = tokenInput.value.trim();
  if (!t) return;
  tokenStore.set(t);
  tokenInput.value = '';
  session.reset();
  mount(); // read afresh with the new token
});
forget.addEventListener('click', () => {
  tokenStore.clear();
  session.reset();
  mount(); // nothing read with the old token stays on the page
});

window.addEventListener('hashchange', mount);
setInterval(() => tickCountdowns(main), 1000);
mount();
