// The workflow's graph: the definition's nodes and edges laid out by dagre (a layered
// layout for directed graphs) and drawn as SVG, each node coloured by the state of its
// node execution, with a spinner on nodes still waiting. The layout is computed once per
// definition; a poll only changes the nodes' states, so nothing moves under the cursor.

import { Graph, layout } from '@dagrejs/dagre';
import { s } from './dom.js';

const CHAR_W = 7.4;   // width of a character of the labels' font, roughly
const NODE_H = 54;
const PAD = 16;

// nodeWidth fits the longer of the node's two lines, and the spinner.
const nodeWidth = (n) => Math.max(120, PAD * 2 + 22 + CHAR_W * Math.max(n.id.length, (n.type || '').length + 2));

export class GraphView {
  // def is the workflow definition ({nodes, edges}); onSelect(nodeID) is called when a
  // node is clicked or chosen with the keyboard.
  constructor(def, onSelect) {
    const g = new Graph({ multigraph: true });
    g.setGraph({ rankdir: 'LR', nodesep: 28, ranksep: 70, edgesep: 16, marginx: 12, marginy: 12 });
    g.setDefaultEdgeLabel(() => ({}));
    const nodes = Array.isArray(def.nodes) ? def.nodes : [];
    const edges = Array.isArray(def.edges) ? def.edges : [];
    for (const n of nodes) g.setNode(n.id, { width: nodeWidth(n), height: NODE_H, node: n });
    edges.forEach((e, i) => {
      if (!g.hasNode(e.source) || !g.hasNode(e.target)) return;
      const label = e.condition || '';
      g.setEdge(e.source, e.target, label
        ? { label, width: Math.min(260, CHAR_W * label.length + 12), height: 18, labelpos: 'c', edge: e }
        : { edge: e }, `e${i}`);
    });
    layout(g);

    const { width, height } = g.graph();
    this.nodes = new Map();
    const defs = s('defs', {}, s('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: '9', refY: '5', markerWidth: '7', markerHeight: '7', orient: 'auto-start-reverse' },
      s('path', { d: 'M 0 0 L 10 5 L 0 10 z', class: 'arrowhead' })));
    const edgeLayer = s('g', { class: 'edges' });
    for (const ref of g.edges()) {
      const e = g.edge(ref);
      const d = e.points.map((p, i) => `${i ? 'L' : 'M'} ${p.x.toFixed(1)} ${p.y.toFixed(1)}`).join(' ');
      const group = s('g', { class: 'edge', 'data-source': ref.v, 'data-target': ref.w },
        s('path', { d, 'marker-end': 'url(#arrow)' }));
      if (e.label) {
        group.appendChild(s('g', { class: 'edge-label', 'data-condition': e.label },
          s('rect', { x: e.x - e.width / 2, y: e.y - e.height / 2, width: e.width, height: e.height, rx: 4 }),
          s('text', { x: e.x, y: e.y + 4, 'text-anchor': 'middle' }, truncate(e.label, Math.floor((e.width - 12) / CHAR_W))),
          s('title', {}, e.label)));
      }
      edgeLayer.appendChild(group);
    }
    const nodeLayer = s('g', { class: 'nodes' });
    for (const id of g.nodes()) {
      const { x, y, width: w, height: hgt, node } = g.node(id);
      const left = x - w / 2, top = y - hgt / 2;
      const status = s('text', { x: left + PAD, y: top + 44, class: 'node-status' });
      const spinner = s('g', { class: 'spinner', transform: `translate(${left + w - PAD - 8} ${top + 18})` },
        s('circle', { r: 8, class: 'spinner-track' }), s('circle', { r: 8, class: 'spinner-arc' }));
      // The warning mark takes the spinner's place: a node with a warning has finished.
      const warningTitle = s('title', {});
      const warning = s('g', { class: 'node-warning', transform: `translate(${left + w - PAD - 8} ${top + 18})`, role: 'note' },
        s('path', { d: 'M 0 -9 L 9 7 L -9 7 Z' }), s('text', { x: 0, y: 5, 'text-anchor': 'middle' }, '!'), warningTitle);
      const group = s('g', { class: 'node', 'data-node-id': id, 'data-node-type': node.type || '', 'data-node-state': 'not_reached', tabindex: '0', role: 'button', 'aria-pressed': 'false' },
        s('rect', { x: left, y: top, width: w, height: hgt, rx: 8 }),
        s('text', { x: left + PAD, y: top + 20, class: 'node-id' }, id),
        s('text', { x: left + PAD, y: top + 32, class: 'node-type' }, node.type || ''),
        status, spinner, warning, s('title', {}, id));
      group.addEventListener('click', () => onSelect(id));
      group.addEventListener('keydown', (ev) => {
        if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); onSelect(id); }
      });
      this.nodes.set(id, { group, status, warningTitle });
      nodeLayer.appendChild(group);
    }
    this.el = s('svg', { class: 'graph', id: 'graph', viewBox: `0 0 ${Math.ceil(width)} ${Math.ceil(height)}`, width: Math.ceil(width), height: Math.ceil(height), role: 'group', 'aria-label': 'The workflow graph' },
      defs, edgeLayer, nodeLayer);
  }

  // update sets each node's state (its node execution's status, or not_reached), the
  // spinner on the nodes in spinning, the warning of the nodes in warnings (node id →
  // text), and the selection.
  update(states, spinning, selected, warnings) {
    for (const [id, { group, status, warningTitle }] of this.nodes) {
      const st = states.get(id) || 'not_reached';
      const warn = (warnings && warnings.get(id)) || '';
      group.dataset.nodeState = st;
      group.dataset.spinning = spinning.has(id) ? 'true' : 'false';
      group.classList.toggle('selected', id === selected);
      group.setAttribute('aria-pressed', String(id === selected));
      if (warn) group.dataset.warning = warn;
      else delete group.dataset.warning;
      warningTitle.textContent = warn ? `warning: ${warn}` : '';
      // A timer waits for its time, not for events.
      status.textContent = st === 'waiting_for_events' && group.dataset.nodeType === 'wait' ? 'waiting (timer)' : st.replace(/_/g, ' ');
    }
  }
}

function truncate(text, n) {
  return text.length <= n ? text : text.slice(0, Math.max(1, n - 1)) + '…';
}
