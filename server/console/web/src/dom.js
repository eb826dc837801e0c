// DOM building. Every piece of text, wherever it came from, enters the page as a text
// node or an attribute value, never as markup: the console has no HTML-parsing sink at
// all, so an event payload or a workflow name cannot become an element or a script.

// SVG is the namespace of SVG elements: an identifier, never fetched.
export const SVG = 'http://www.w3.org/2000/svg';

function build(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'on') {
      for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
    } else if (k === 'class') {
      el.setAttribute('class', Array.isArray(v) ? v.filter(Boolean).join(' ') : v);
    } else if (k === 'value' && 'value' in el) {
      el.value = v;
    } else if (k === 'checked' || k === 'selected' || k === 'disabled') {
      el[k] = Boolean(v);
    } else {
      el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  append(el, children);
  return el;
}

// append adds children: strings and numbers as text, nodes as they are; arrays are
// flattened and null/false skipped.
export function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// h makes an HTML element: h('td', {class: 'num'}, 'text', child).
export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

// s makes an SVG element.
export function s(tag, attrs, ...children) {
  return build(document.createElementNS(SVG, tag), attrs, children);
}

// replace empties el and fills it with children.
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}
