// rendezvous console: finds executions, follows one through its workflow's graph and acts
// on it. It reads and changes nothing but through the public HTTP API (/api/v1), which it
// polls, so what it shows is what the API answers. Pages are routed by the address's
// fragment (#/executions, #/executions/<id>, #/waits, #/unmatched, #/dead-letters), so a
// reload or a shared link opens the same page.

import { h, replace } from './dom.js';
import { executionsView, waitsView, unmatchedView, deadLettersView } from './lists.js';
import { executionView } from './execution.js';
import { tickCountdowns } from './widgets.js';

const POLL_MS = 2000;

const routes = [
  { re: /^executions\/([^/?]+)$/, view: (m, p) => executionView(decodeURIComponent(m[1]), p), nav: 'executions' },
  { re: /^executions$/, view: (m, p) => executionsView(p), nav: 'executions' },
  { re: /^waits$/, view: (m, p) => waitsView(p), nav: 'waits' },
  { re: /^unmatched$/, view: (m, p) => unmatchedView(p), nav: 'unmatched' },
  { re: /^dead-letters$/, view: (m, p) => deadLettersView(p), nav: 'dead-letters' },
];

const main = document.getElementById('view');
const status = document.getElementById('api-status');
const updated = document.getElementById('updated');
let current = null;
let generation = 0; // a poll of a page no longer shown is dropped
let timer = 0;

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
  if (!route) {
    current = null;
    replace(main, h('p', { class: 'empty' }, 'No such page. ', h('a', { href: '#/executions' }, 'Executions')));
    return;
  }
  current = route.view(m, params);
  document.title = `rendezvous · ${current.title}`;
  for (const a of document.querySelectorAll('nav.main a')) a.classList.toggle('current', a.dataset.nav === route.nav);
  replace(main, current.root);
  poll();
}

// poll refreshes the page now and then every POLL_MS; the API's state is shown in the
// header, and the page keeps what it last showed while the API is unreachable.
async function poll() {
  clearTimeout(timer);
  const gen = generation;
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

window.addEventListener('hashchange', mount);
setInterval(() => tickCountdowns(main), 1000);
mount();
