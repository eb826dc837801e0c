// Small pieces every page uses: ids, status badges, countdowns, tables, pagers and the
// confirmation dialog.

import { h, replace } from './dom.js';
import { countdown, fmtTime, ago } from './format.js';

// idText shows an id in monospace with a copy button. A long id (a UUID) is shortened to
// its first and last eight digits: ids of executions started in the same minute share
// their first digits (UUIDv7 begins with the time), so the end is what tells them apart.
// The whole id stays in the element (hidden from the eye, not from search in the page or
// a screen reader), in its tooltip, and is what the copy button copies. link, when given,
// is where the id leads. kind ('execution', 'correlation', 'wait') is shown as a tag
// before it, in words and shape, so that an execution id is never taken for a
// correlation id (both are UUIDv7 and start alike).
export const IdKind = { EXECUTION: 'execution', CORRELATION: 'correlation', WAIT: 'wait' };
const KIND_TAG = { execution: 'exec', correlation: 'corr', wait: 'wait' };
export function idText(id, link, kind) {
  const parts = id.length > 20
    ? [h('span', { class: 'id-head' }, id.slice(0, 8)), h('span', { class: 'id-mid' }, id.slice(8, -8)), h('span', { class: 'id-tail' }, id.slice(-8))]
    : [id];
  const attrs = { class: 'id', 'data-id': id, title: id };
  const text = link ? h('a', { ...attrs, href: link }, parts) : h('code', attrs, parts);
  const btn = h('button', { type: 'button', class: 'copy', title: 'Copy the id', 'aria-label': `Copy ${id}` }, 'copy');
  btn.addEventListener('click', async (ev) => {
    ev.preventDefault();
    ev.stopPropagation();
    try {
      await navigator.clipboard.writeText(id);
      btn.textContent = 'copied';
    } catch {
      // No clipboard (an insecure origin): select the id so that the operator can copy it.
      const range = document.createRange();
      range.selectNodeContents(text);
      const sel = window.getSelection();
      sel.removeAllRanges();
      sel.addRange(range);
      btn.textContent = 'selected';
    }
    setTimeout(() => { btn.textContent = 'copy'; }, 1500);
  });
  return h('span', { class: ['id-wrap', kind ? `id-kind-${kind}` : ''], 'data-id-kind': kind || '' },
    kind ? h('span', { class: 'id-tag', title: `${kind} id` }, KIND_TAG[kind]) : null, text, btn);
}

export function badge(status) {
  return h('span', { class: 'badge', 'data-status': status || '' }, (status || '').replace(/_/g, ' '));
}

// deadline is a live countdown element; tick() refreshes every [data-deadline] on the page.
export function deadline(iso) {
  const el = h('span', { class: 'countdown', 'data-deadline': iso, title: fmtTime(iso) });
  updateCountdown(el);
  return el;
}

function updateCountdown(el) {
  const c = countdown(el.dataset.deadline);
  if (!c) return;
  el.dataset.countdown = c.state;
  el.dataset.secondsLeft = String(c.seconds);
  el.textContent = c.text;
}

export function tickCountdowns(root) {
  for (const el of root.querySelectorAll('[data-deadline]')) updateCountdown(el);
  for (const el of root.querySelectorAll('[data-ago]')) el.textContent = ago(el.dataset.ago);
}

export function when(iso) {
  if (!iso) return h('span', { class: 'muted' }, '—');
  return h('time', { datetime: iso, title: fmtTime(iso) }, fmtTime(iso));
}

export function since(iso) {
  return h('span', { class: 'muted', 'data-ago': iso, title: fmtTime(iso) }, ago(iso));
}

// table makes a table of columns [{title, cell(item) → node|string}] and rows; row(item)
// may return attributes of the row.
export function table(id, columns, items, row) {
  return h('div', { class: 'table-wrap' },
    h('table', { id, class: 'list' },
      h('thead', {}, h('tr', {}, columns.map((c) => h('th', { scope: 'col', class: c.class }, c.title)))),
      h('tbody', {}, items.map((it) => h('tr', row ? row(it) : {}, columns.map((c) => h('td', { class: c.class }, c.cell(it))))))));
}

// Pager keeps keyset paging through a list: the cursors of the pages before the current
// one, so that "previous" goes back and "first" starts over. The API gives only
// next_cursor; a page is always read fresh, so an item is never shown twice on one page.
export class Pager {
  constructor(onChange) {
    this.stack = [];   // cursors of the pages before the current one ('' is the first)
    this.cursor = '';  // the current page's cursor
    this.next = '';    // next_cursor of the current page
    this.onChange = onChange;
  }

  reset() {
    this.stack = [];
    this.cursor = '';
    this.next = '';
  }

  view(name) {
    const first = h('button', { type: 'button', 'data-page': 'first', disabled: this.stack.length === 0 }, 'First');
    const prev = h('button', { type: 'button', 'data-page': 'previous', disabled: this.stack.length === 0 }, 'Previous');
    const next = h('button', { type: 'button', 'data-page': 'next', disabled: !this.next }, 'Next');
    first.addEventListener('click', () => { this.reset(); this.onChange(); });
    prev.addEventListener('click', () => { this.cursor = this.stack.pop() || ''; this.onChange(); });
    next.addEventListener('click', () => { this.stack.push(this.cursor); this.cursor = this.next; this.onChange(); });
    return h('nav', { class: 'pager', 'aria-label': `Pages of ${name}` }, first, prev,
      h('span', { class: 'muted' }, `page ${this.stack.length + 1}`), next);
  }
}

// confirm asks before an action, in a modal dialog of the page (the browser's own
// confirm() blocks the page's updates). It resolves true when the operator confirms.
// field, when given, is an input shown in the dialog (a dismissal's reason).
// check, when given, is run on confirming: a message it returns is shown in the dialog,
// which stays open (a required reason left empty), and nothing is sent.
export function confirmAction(title, lines, confirmLabel, field, check) {
  return new Promise((resolve) => {
    const why = h('p', { class: 'dialog-error', role: 'alert', hidden: true });
    const ok = h('button', { type: 'button', class: 'danger', 'data-confirm': 'yes' }, confirmLabel || 'Confirm');
    const no = h('button', { type: 'button', 'data-confirm': 'no' }, 'Keep it');
    const dlg = h('dialog', { class: 'confirm', 'aria-labelledby': 'confirm-title' },
      h('h2', { id: 'confirm-title' }, title),
      lines.map((l) => h('p', {}, l)),
      field ? h('p', { class: 'dialog-field' }, field) : null, why,
      h('div', { class: 'dialog-buttons' }, no, ok));
    const done = (v) => { dlg.close(); dlg.remove(); resolve(v); };
    ok.addEventListener('click', () => {
      const problem = check ? check() : '';
      if (problem) {
        why.textContent = problem;
        why.hidden = false;
        if (field) field.focus();
        return;
      }
      done(true);
    });
    no.addEventListener('click', () => done(false));
    dlg.addEventListener('cancel', (ev) => { ev.preventDefault(); done(false); });
    document.body.appendChild(dlg);
    dlg.showModal();
    (field || no).focus();
  });
}

// latest tells a refresh whether it is still the newest one: a poll and a click (a
// filter, a page, an action) may read at once, and the older answer must not be shown
// over the newer. begin() returns a function that is true while no later begin() ran.
export function latest() {
  let n = 0;
  return () => {
    const mine = ++n;
    return () => mine === n;
  };
}

export function empty(text) {
  return h('p', { class: 'empty' }, text);
}

export { replace };
