// The workflow builder: a definition drawn as a graph (@xyflow/react), laid out by dagre
// and rearranged by dragging, built from a palette of node types, each node and the
// definition's own fields edited in forms generated from the served JSON Schemas
// (@rjsf/core), and the same document in a JSON tab. The definition (doc) is the one
// state: canvas, forms and JSON tab are views of it and every edit is an edit of it, so
// the builder can express nothing the JSON cannot. Where a node sits is the canvas's
// own business and is not stored.
//
// Every change is checked at once against the schemas in the browser and, a moment
// later, by the service (POST /api/v1/workflows/validate), which knows the rest
// (templates, conditions, edges naming nodes, cycles). Each error is shown on its field,
// found by its JSON path, and its node is marked on the canvas.

import { useCallback, useEffect, useMemo, useRef, useState } from 'react';
import {
  ReactFlow, ReactFlowProvider, Background, Controls, Handle, Position, BaseEdge, EdgeLabelRenderer,
  getBezierPath, applyNodeChanges, useReactFlow,
} from '@xyflow/react';
import { Graph, layout } from '@dagrejs/dagre';
// The Form alone: the package's index also exports a test registry that needs ajv.
import Form from '@rjsf/core/lib/components/Form.js';
import { diffLines } from 'diff';

import { request, get } from '../api.js';
import { NODE_TYPES, Schemas, splitPath } from './schema.js';
import { widgets, uiFor, buttonTemplates } from './widgets.jsx';

const formTemplates = { ButtonTemplates: buttonTemplates };
import { formValidator, errorSchemaAt } from './validator.js';
import { readDraft, writeDraft, dropDraft } from './drafts.js';

const NODE_W = 190;
const NODE_H = 64;
const VALIDATE_DELAY_MS = 400; // the service is asked once typing pauses

// layoutPositions places every node left to right along the edges (dagre).
function layoutPositions(doc) {
  const g = new Graph({ multigraph: true });
  g.setGraph({ rankdir: 'LR', nodesep: 40, ranksep: 150, marginx: 20, marginy: 20 });
  g.setDefaultEdgeLabel(() => ({}));
  const ids = nodesOf(doc).map((n) => n.id).filter((id) => typeof id === 'string');
  for (const id of ids) g.setNode(id, { width: NODE_W, height: NODE_H });
  edgesOf(doc).forEach((e, i) => {
    if (g.hasNode(e.source) && g.hasNode(e.target)) g.setEdge(e.source, e.target, {}, `e${i}`);
  });
  layout(g);
  const out = {};
  for (const id of ids) {
    const n = g.node(id);
    out[id] = { x: n.x - NODE_W / 2, y: n.y - NODE_H / 2 };
  }
  return out;
}

const nodesOf = (doc) => (doc && Array.isArray(doc.nodes) ? doc.nodes.filter((n) => n && typeof n === 'object') : []);
const edgesOf = (doc) => (doc && Array.isArray(doc.edges) ? doc.edges.filter((e) => e && typeof e === 'object') : []);
const pretty = (v) => JSON.stringify(v, null, 2);

// canonical sorts object keys, so that a diff shows what changed and not where a key sits.
function canonical(v) {
  if (Array.isArray(v)) return v.map(canonical);
  if (v && typeof v === 'object') return Object.fromEntries(Object.keys(v).sort().map((k) => [k, canonical(v[k])]));
  return v;
}

// clean drops the keys a form left undefined (an emptied field): absent in JSON.
function clean(v) {
  if (Array.isArray(v)) return v.map((x) => (x === undefined ? null : clean(x)));
  if (v && typeof v === 'object') {
    const out = {};
    for (const [k, x] of Object.entries(v)) if (x !== undefined) out[k] = clean(x);
    return out;
  }
  return v;
}

// setIn returns a copy of obj with the value at path (keys and indexes) replaced; an
// undefined value removes the key. Keys keep their order.
function setIn(obj, path, value) {
  if (!path.length) return value;
  const [head, ...rest] = path;
  const copy = Array.isArray(obj) ? [...obj] : { ...(obj || {}) };
  const next = setIn(copy[head], rest, value);
  if (next === undefined && !Array.isArray(copy)) delete copy[head];
  else copy[head] = next;
  return copy;
}

// ancestors are the nodes a node runs after, along the edges: the outputs it can read.
function ancestors(doc, id) {
  const seen = new Set();
  const stack = [id];
  while (stack.length) {
    const cur = stack.pop();
    for (const e of edgesOf(doc)) {
      if (e.target === cur && !seen.has(e.source)) {
        seen.add(e.source);
        stack.push(e.source);
      }
    }
  }
  seen.delete(id);
  return [...seen];
}

// templateNames are the templates a field of node id can use.
function templateNames(doc, id, type, startInput) {
  const names = [];
  const inputKeys = new Set();
  for (const t of (doc && Array.isArray(doc.triggers) ? doc.triggers : [])) {
    if (t && t.input && typeof t.input === 'object') for (const k of Object.keys(t.input)) inputKeys.add(k);
  }
  if (startInput && typeof startInput === 'object' && !Array.isArray(startInput)) for (const k of Object.keys(startInput)) inputKeys.add(k);
  for (const k of inputKeys) names.push(`@{_trigger.${k}}`);
  if (doc && doc.vars && typeof doc.vars === 'object') for (const k of Object.keys(doc.vars)) names.push(`@{_vars.${k}}`);
  names.push('@{_execution.id}');
  if (type === 'wait_events') names.push('@{_execution.correlationId}');
  for (const a of ancestors(doc, id)) names.push(`@{nodes.${a}.output}`);
  return names;
}

// enabledEvents names the events a wait_events node expects, for requiredEvents.
function enabledEvents(data) {
  const out = [];
  if (!data || typeof data !== 'object') return out;
  const on = (o) => o && typeof o === 'object' && o.enabled !== false;
  if (on(data.apiCall)) out.push('api_response');
  if (on(data.kafkaEvent)) out.push('kafka_event');
  for (const e of Array.isArray(data.events) ? data.events : []) if (e && typeof e.name === 'string' && e.name) out.push(e.name);
  return out;
}

// nodeIndexOf and edgeIndexOf: the node (edge) an error's path lies in, or -1.
function nodeIndexOf(path) {
  const m = /^nodes\[(\d+)\]/.exec(path);
  return m ? Number(m[1]) : -1;
}
function edgeIndexOf(path) {
  const m = /^edges\[(\d+)\]/.exec(path);
  return m ? Number(m[1]) : -1;
}

// ---- canvas pieces ----

function RdvNode({ data, selected }) {
  return (
    <div className={['rdv-node', selected ? 'selected' : '', data.errors ? 'has-errors' : data.warnings ? 'has-warnings' : ''].join(' ')}
      data-node-id={data.id} data-node-type={data.type} data-errors={data.errors || 0} data-warnings={data.warnings || 0}>
      <Handle type="target" position={Position.Left} />
      <div className="rdv-node-id">{data.id}</div>
      <div className="rdv-node-type">{data.type}</div>
      {data.errors ? <span className="rdv-node-errors" title={`${data.errors} error(s)`}>{data.errors}</span> : null}
      {!data.errors && data.warnings ? <span className="rdv-node-warnings" title={`${data.warnings} warning(s)`}>!</span> : null}
      <Handle type="source" position={Position.Right} />
    </div>
  );
}

function CondEdge(props) {
  const { id, sourceX, sourceY, targetX, targetY, sourcePosition, targetPosition, markerEnd, data, selected } = props;
  const [path, labelX, labelY] = getBezierPath({ sourceX, sourceY, sourcePosition, targetX, targetY, targetPosition });
  const cond = data.condition;
  return (
    <>
      <BaseEdge id={id} path={path} markerEnd={markerEnd} className={data.errors ? 'has-errors' : ''} />
      <EdgeLabelRenderer>
        <div className={['edge-cond', 'nodrag', 'nopan', selected ? 'selected' : '', data.errors ? 'has-errors' : ''].join(' ')}
          data-edge-index={data.index} data-condition={cond || ''}
          style={{ transform: `translate(-50%, -50%) translate(${labelX}px,${labelY}px)` }}>
          {selected && data.editable
            ? <input className="edge-cond-input" aria-label="Condition" placeholder="always (e.g. output.status < 400)" value={cond || ''}
              onChange={(ev) => data.onCondition(ev.target.value)} spellCheck={false} />
            : <button type="button" className="edge-cond-label" onClick={() => data.onSelect()}>{cond || (data.editable ? '+ condition' : 'always')}</button>}
        </div>
      </EdgeLabelRenderer>
    </>
  );
}

// countByNode counts problems (errors or warnings) by the index of the node their path
// is in.
function countByNode(problems) {
  const m = new Map();
  for (const e of problems) {
    const i = nodeIndexOf(e.path);
    if (i >= 0) m.set(i, (m.get(i) || 0) + 1);
  }
  return m;
}

const nodeTypes = { rdv: RdvNode };
const edgeTypes = { cond: CondEdge };

function Canvas({ doc, errors, warnings, editable, selected, onSelect, onChange, positions, setPositions, fitKey }) {
  const flow = useReactFlow();
  const [flowNodes, setFlowNodes] = useState([]);

  // A new layout (opening a workflow, Lay out) is shown whole.
  useEffect(() => {
    const t = setTimeout(() => flow.fitView({ padding: 0.3, maxZoom: 1.2 }), 50);
    return () => clearTimeout(t);
  }, [fitKey, flow]);

  const errorsByNode = useMemo(() => countByNode(errors), [errors]);
  const warningsByNode = useMemo(() => countByNode(warnings), [warnings]);

  // The canvas's nodes follow the definition; a node keeps where it was dragged to.
  useEffect(() => {
    setFlowNodes((prev) => {
      const old = new Map(prev.map((n) => [n.id, n]));
      return nodesOf(doc).map((n, i) => {
        const id = String(n.id);
        const o = old.get(id);
        return {
          ...(o || {}),
          id,
          type: 'rdv',
          position: positions[id] || (o && o.position) || { x: 0, y: 0 },
          data: { id, type: n.type, errors: errorsByNode.get(i) || 0, warnings: warningsByNode.get(i) || 0 },
          selected: selected && selected.kind === 'node' && selected.id === id,
        };
      });
    });
  }, [doc, positions, errorsByNode, warningsByNode, selected]);

  const edges = edgesOf(doc).map((e, i) => ({
    id: `e${i}`, source: String(e.source), target: String(e.target), type: 'cond',
    selected: Boolean(selected && selected.kind === 'edge' && selected.index === i),
    markerEnd: { type: 'arrowclosed' },
    data: {
      index: i, condition: e.condition, editable,
      errors: errors.filter((er) => edgeIndexOf(er.path) === i).length,
      onSelect: () => onSelect({ kind: 'edge', index: i }),
      onCondition: (v) => onChange((d) => setIn(d, ['edges', i, 'condition'], v === '' ? undefined : v)),
    },
  }));

  const onNodesChange = useCallback((changes) => {
    setFlowNodes((ns) => applyNodeChanges(changes.filter((c) => c.type !== 'remove' && c.type !== 'select'), ns));
    for (const c of changes) {
      if (c.type === 'position' && c.position) setPositions((p) => ({ ...p, [c.id]: c.position }));
      if (c.type === 'select' && c.selected) onSelect({ kind: 'node', id: c.id });
      if (c.type === 'remove' && editable) onChange((d) => removeNode(d, c.id));
    }
  }, [editable, onChange, onSelect, setPositions]);

  const onEdgesChange = useCallback((changes) => {
    const removed = changes.filter((c) => c.type === 'remove').map((c) => Number(c.id.slice(1)));
    for (const c of changes) if (c.type === 'select' && c.selected) onSelect({ kind: 'edge', index: Number(c.id.slice(1)) });
    if (removed.length && editable) onChange((d) => ({ ...d, edges: edgesOf(d).filter((_, i) => !removed.includes(i)) }));
  }, [editable, onChange, onSelect]);

  const onConnect = useCallback((c) => {
    if (!editable || c.source === c.target) return;
    onChange((d) => ({ ...d, edges: [...(Array.isArray(d.edges) ? d.edges : []), { source: c.source, target: c.target }] }));
    onSelect({ kind: 'edge', index: edgesOf(doc).length });
  }, [editable, onChange, onSelect, doc]);

  const onDrop = useCallback((ev) => {
    ev.preventDefault();
    const type = ev.dataTransfer.getData('application/x-rendezvous-node');
    if (!type || !editable) return;
    const at = flow.screenToFlowPosition({ x: ev.clientX, y: ev.clientY });
    addNode(type, onChange, setPositions, onSelect, doc, at);
  }, [editable, flow, onChange, setPositions, onSelect, doc]);

  return (
    <div className="builder-canvas" onDrop={onDrop} onDragOver={(ev) => { ev.preventDefault(); ev.dataTransfer.dropEffect = 'move'; }}>
      <ReactFlow nodes={flowNodes} edges={edges} nodeTypes={nodeTypes} edgeTypes={edgeTypes}
        onNodesChange={onNodesChange} onEdgesChange={onEdgesChange} onConnect={onConnect}
        onPaneClick={() => onSelect(null)}
        nodesConnectable={editable} edgesFocusable elementsSelectable deleteKeyCode={editable ? ['Delete', 'Backspace'] : null}
        fitView fitViewOptions={{ padding: 0.3, maxZoom: 1.2 }} proOptions={{ hideAttribution: true }} minZoom={0.2}>
        <Background gap={16} />
        <Controls showInteractive={false} />
      </ReactFlow>
    </div>
  );
}

function removeNode(d, id) {
  return {
    ...d,
    nodes: nodesOf(d).filter((n) => String(n.id) !== id),
    ...(Array.isArray(d.edges) ? { edges: d.edges.filter((e) => e.source !== id && e.target !== id) } : {}),
  };
}

// addNode appends a node of type with a fresh id: wait_events_1, http_2, …
function addNode(type, onChange, setPositions, onSelect, doc, at) {
  const ids = new Set(nodesOf(doc).map((n) => n.id));
  let k = 1;
  while (ids.has(`${type}_${k}`)) k++;
  const id = `${type}_${k}`;
  const pos = at || (() => {
    const ps = Object.values(layoutPositions(doc));
    const maxX = ps.reduce((m, p) => Math.max(m, p.x), -NODE_W - 90);
    return { x: maxX + NODE_W + 90, y: ps.length ? ps[ps.length - 1].y : 40 };
  })();
  setPositions((p) => ({ ...p, [id]: pos }));
  onChange((d) => ({ ...d, nodes: [...nodesOf(d), { id, type }] }));
  onSelect({ kind: 'node', id });
}

// ---- panels ----

function Problems({ errors }) {
  if (!errors.length) return null;
  return (
    <ul className="builder-errors" role="alert">
      {errors.map((e, i) => <li key={i} data-path={e.path}><code>{e.path || '(definition)'}</code> {e.message}</li>)}
    </ul>
  );
}

// Warnings lists what the service says the definition holds to no effect: apart from the
// errors, in their own colour, and never a reason the definition is refused.
function Warnings({ warnings }) {
  if (!warnings.length) return null;
  return (
    <ul className="builder-warnings" role="status" aria-label="Warnings">
      {warnings.map((w, i) => <li key={i} data-path={w.path}><span className="warning-label">warning</span> <code>{w.path || '(definition)'}</code> {w.message}</li>)}
    </ul>
  );
}

function NodePanel({ schemas, doc, index, errors, warnings, editable, onChange, startInput }) {
  const node = nodesOf(doc)[index];
  const known = NODE_TYPES.find((t) => t.type === node.type);
  const formSchema = useMemo(() => {
    if (!known) return { type: 'string', 'x-kind': 'json', description: `No schema is known for node type ${node.type}: its data as JSON.` };
    const base = schemas.formSchema(known.schema);
    const s = { ...base, properties: { ...base.properties } };
    if (node.type === 'wait_events' && s.properties && s.properties.requiredEvents) {
      // requiredEvents is chosen among the events the node has enabled.
      const names = [...new Set([...enabledEvents(node.data), ...(Array.isArray(node.data && node.data.requiredEvents) ? node.data.requiredEvents : [])])];
      if (names.length) s.properties.requiredEvents = { ...s.properties.requiredEvents, items: { type: 'string', enum: names } };
    }
    return s;
  }, [schemas, known, node.type, node.data]);
  const uiSchema = useMemo(() => {
    const ui = uiFor(formSchema);
    if (formSchema.properties && formSchema.properties.requiredEvents && formSchema.properties.requiredEvents.items.enum) {
      ui.requiredEvents = { 'ui:widget': 'checkboxes' };
    }
    return { ...ui, 'ui:submitButtonOptions': { norender: true } };
  }, [formSchema]);
  const own = errors.filter((e) => nodeIndexOf(e.path) === index && !e.path.startsWith(`nodes[${index}].data`));
  const extraErrors = useMemo(() => errorSchemaAt(errors, ['nodes', index, 'data'], splitPath), [errors, index]);
  const names = useMemo(() => templateNames(doc, node.id, node.type, startInput), [doc, node.id, node.type, startInput]);

  const rename = (to) => onChange((d) => {
    const from = nodesOf(d)[index].id;
    let next = setIn(d, ['nodes', index, 'id'], to);
    if (Array.isArray(next.edges)) {
      next = { ...next, edges: next.edges.map((e) => ({ ...e, ...(e.source === from ? { source: to } : {}), ...(e.target === from ? { target: to } : {}) })) };
    }
    return next;
  }, { renamed: [node.id, to] });

  return (
    <section className="builder-panel" data-panel="node" data-node-id={node.id}>
      <h3>Node <code>{node.id}</code> <span className="muted">{node.type}</span></h3>
      <label className="field-label" htmlFor="node-id">id</label>
      <input id="node-id" className="form-control" value={node.id ?? ''} disabled={!editable} spellCheck={false}
        onChange={(ev) => rename(ev.target.value)} />
      <Problems errors={own} />
      <Warnings warnings={warnings.filter((w) => nodeIndexOf(w.path) === index)} />
      <div className="node-data-form">
        <Form schema={formSchema} uiSchema={uiSchema} formData={node.data ?? undefined} validator={formValidator} widgets={widgets} templates={formTemplates}
          idPrefix="data" idSeparator="_" readonly={!editable} extraErrors={extraErrors} showErrorList={false} noHtml5Validate
          formContext={{ templateNames: names }}
          experimental_defaultFormStateBehavior={{ emptyObjectFields: 'skipDefaults', arrayMinItems: { populate: 'never' } }}
          onChange={({ formData }) => onChange((d) => setIn(d, ['nodes', index, 'data'], clean(formData)))} />
      </div>
      {editable ? <button type="button" className="danger" onClick={() => onChange((d) => removeNode(d, String(node.id)))}>Delete node</button> : null}
    </section>
  );
}

function EdgePanel({ doc, index, errors, editable, onChange }) {
  const e = edgesOf(doc)[index];
  const own = errors.filter((er) => edgeIndexOf(er.path) === index);
  const ids = nodesOf(doc).map((n) => n.id);
  const set = (k, v) => onChange((d) => setIn(d, ['edges', index, k], v === '' ? undefined : v));
  return (
    <section className="builder-panel" data-panel="edge" data-edge-index={index}>
      <h3>Edge <code>{e.source}</code> → <code>{e.target}</code></h3>
      {['source', 'target'].map((k) => (
        <p key={k}><label className="field-label" htmlFor={`edge-${k}`}>{k}</label>
          <select id={`edge-${k}`} className="form-control" value={e[k] ?? ''} disabled={!editable} onChange={(ev) => set(k, ev.target.value)}>
            {ids.map((id) => <option key={id} value={id}>{id}</option>)}
          </select></p>
      ))}
      <p><label className="field-label" htmlFor="edge-condition">condition</label>
        <input id="edge-condition" className="form-control" value={e.condition ?? ''} disabled={!editable} spellCheck={false}
          placeholder="always; e.g. output.timeout == false" onChange={(ev) => set('condition', ev.target.value)} /></p>
      <Problems errors={own} />
      {editable ? <button type="button" className="danger" onClick={() => onChange((d) => ({ ...d, edges: edgesOf(d).filter((_, i) => i !== index) }))}>Delete edge</button> : null}
    </section>
  );
}

function DefinitionPanel({ schemas, doc, errors, warnings, editable, onChange }) {
  const formSchema = useMemo(() => schemas.definitionForm(), [schemas]);
  const uiSchema = useMemo(() => ({ ...uiFor(formSchema), 'ui:submitButtonOptions': { norender: true } }), [formSchema]);
  const fields = Object.keys(formSchema.properties);
  const formData = Object.fromEntries(fields.filter((k) => doc[k] !== undefined).map((k) => [k, doc[k]]));
  const extraErrors = useMemo(() => {
    const own = errors.filter((e) => fields.includes(splitPath(e.path)[0]));
    return errorSchemaAt(own, [], splitPath);
  }, [errors, fields]);
  const rest = errors.filter((e) => e.path === '' || e.path === 'nodes' || e.path === 'edges');
  return (
    <section className="builder-panel" data-panel="definition">
      <h3>Workflow</h3>
      <p className="hint">Select a node or an edge to edit it; drag from a node's right handle to another node's left handle (or click one, then the other) to connect them.</p>
      <Problems errors={rest} />
      <Warnings warnings={warnings} />
      <Form schema={formSchema} uiSchema={uiSchema} formData={formData} validator={formValidator} widgets={widgets} templates={formTemplates}
        idPrefix="wf" idSeparator="_" readonly={!editable} extraErrors={extraErrors} showErrorList={false} noHtml5Validate
        formContext={{ templateNames: [] }}
        experimental_defaultFormStateBehavior={{ emptyObjectFields: 'skipDefaults', arrayMinItems: { populate: 'never' } }}
        onChange={({ formData: fd }) => onChange((d) => {
          let next = d;
          for (const k of fields) next = setIn(next, [k], clean(fd[k]));
          return next;
        })} />
    </section>
  );
}

// JsonTab edits the definition as text. Text that is not a JSON object yet is kept by
// the builder (draft, with why it does not parse), not here: it outlives a switch of
// tabs, the header says the document is invalid and Save stays disabled, so nothing
// typed is dropped without a word. The canvas keeps the last document meanwhile.
function JsonTab({ doc, editable, onChange, errors, warnings, draft, setDraft }) {
  const text = draft ? draft.text : pretty(doc);
  return (
    <section className="builder-json" data-panel="json">
      <textarea id="builder-json" spellCheck={false} readOnly={!editable} value={text} aria-label="Definition as JSON"
        onChange={(ev) => {
          const t = ev.target.value;
          try {
            const v = JSON.parse(t);
            if (!v || typeof v !== 'object' || Array.isArray(v)) throw new Error('a definition is a JSON object');
            // Kept as typed while it is the document: reformatting would move the cursor.
            setDraft({ text: t, error: '' });
            onChange(() => v, { fromJSON: true });
          } catch (err) {
            setDraft({ text: t, error: err.message });
          }
        }} />
      {draft && draft.error ? <p className="problem json-parse-error" role="alert">Not JSON yet: {draft.error}</p> : null}
      <Problems errors={errors} />
      <Warnings warnings={warnings} />
    </section>
  );
}

// DiffView shows the stored definition against the one to save, line by line, long
// unchanged stretches folded.
function DiffView({ before, after }) {
  const parts = diffLines(before, after);
  const rows = [];
  parts.forEach((p, i) => {
    const lines = p.value.replace(/\n$/, '').split('\n');
    const kind = p.added ? 'added' : p.removed ? 'removed' : 'same';
    const sign = p.added ? '+' : p.removed ? '-' : ' ';
    if (kind === 'same' && lines.length > 7) {
      const head = i === 0 ? [] : lines.slice(0, 3);
      const tail = i === parts.length - 1 ? [] : lines.slice(-3);
      head.forEach((l, j) => rows.push(<div key={`${i}h${j}`} className="diff-line same"> {l}</div>));
      rows.push(<div key={`${i}f`} className="diff-fold">… {lines.length - head.length - tail.length} unchanged lines</div>);
      tail.forEach((l, j) => rows.push(<div key={`${i}t${j}`} className="diff-line same"> {l}</div>));
      return;
    }
    lines.forEach((l, j) => rows.push(<div key={`${i}-${j}`} className={`diff-line ${kind}`} data-diff={kind}>{sign}{l}</div>));
  });
  return <pre className="diff">{rows}</pre>;
}

function Modal({ id, title, children, onClose }) {
  const ref = useRef(null);
  useEffect(() => {
    const d = ref.current;
    if (d && !d.open) d.showModal();
    return () => { if (d && d.open) d.close(); };
  }, []);
  return (
    <dialog ref={ref} id={id} className="builder-dialog" aria-label={title} onCancel={(ev) => { ev.preventDefault(); onClose(); }}>
      <h3>{title}</h3>
      {children}
    </dialog>
  );
}

function ProblemBox({ problem }) {
  if (!problem) return null;
  return (
    <div className="problem" role="alert" data-problem-status={problem.status || 0}>
      <p className="problem-title">{problem.title || 'Error'}{problem.status ? ` (${problem.status})` : ''}</p>
      {problem.detail ? <p className="problem-detail">{problem.detail}</p> : null}
    </div>
  );
}

// ---- the builder ----

// NEW_DOC is what a new workflow starts as.
const NEW_DOC = { name: 'new-workflow', nodes: [] };

function BuilderApp({ name, canEdit, canStart }) {
  const [schemas, setSchemas] = useState(null);
  const [loadProblem, setLoadProblem] = useState(null);
  const [doc, setDoc] = useState(null);
  const [stored, setStored] = useState(null); // {name, version, definition} as the service has it
  const [positions, setPositions] = useState({});
  const [selected, setSelected] = useState(null);
  const [tab, setTab] = useState('properties');
  const [serverErrors, setServerErrors] = useState({ doc: null, errors: [], warnings: [] });
  const [dialog, setDialog] = useState(null); // 'save' | 'start'
  const [saveState, setSaveState] = useState(null);
  const [startText, setStartText] = useState('{}');
  const [workflows, setWorkflows] = useState([]);
  const [fitKey, setFitKey] = useState(0);
  // jsonDraft is the JSON tab's text while it differs from the document's: {text, error},
  // error empty when the text is the document as typed.
  const [jsonDraft, setJsonDraft] = useState(null);
  // saving is what the save dialog was opened for: its words stay those of that moment
  // while the stored version moves under it.
  const [saving, setSaving] = useState(null);
  // restored says a draft kept in the browser replaced the document when it opened.
  const [restored, setRestored] = useState(null);

  useEffect(() => {
    loadSchemas(setSchemas, setLoadProblem);
    get('workflows', { limit: 200 }).then((a) => { if (a.ok && a.body) setWorkflows(a.body.items || []); });
  }, []);

  // Open the named workflow's latest version, or a new definition.
  useEffect(() => {
    let dropped = false;
    setSelected(null);
    setJsonDraft(null);
    // open shows the document, or the draft kept for it when there is one that differs.
    const open = (definition, version) => {
      const draft = readDraft(name);
      const base = pretty(canonical(definition));
      const use = draft && pretty(canonical(draft.doc)) !== base ? draft : null;
      const d = use ? use.doc : definition;
      setDoc(d);
      let jsonError = '';
      if (use && use.json) { try { JSON.parse(use.json); } catch (err) { jsonError = err.message; } }
      setJsonDraft(jsonError ? { text: use.json, error: jsonError } : null);
      setRestored(use ? { at: use.at, version: use.version, current: version } : null);
      if (!use) dropDraft(name);
      setPositions(layoutPositions(d));
      setFitKey((k) => k + 1);
    };
    if (!name) {
      setStored(null);
      open(NEW_DOC, 0);
      return undefined;
    }
    get(`workflows/${encodeURIComponent(name)}`).then((a) => {
      if (dropped) return;
      if (!a.ok) { setLoadProblem(a.problem); return; }
      setStored({ name, version: a.body.version, definition: a.body.definition });
      open(a.body.definition, a.body.version);
    });
    return () => { dropped = true; };
  }, [name]);

  // edit changes the definition; every view follows. A document typed in the JSON tab
  // replaces the definition whole: its new nodes are placed by the layout, the others
  // stay where they are.
  const edit = useCallback((fn, how) => {
    if (how && how.fromJSON) {
      const next = fn();
      setDoc(next);
      setPositions((p) => (nodesOf(next).some((n) => !p[n.id]) ? { ...layoutPositions(next), ...p } : p));
      return;
    }
    setDoc(fn);
    setJsonDraft(null);
    if (how && how.renamed) {
      const [from, to] = how.renamed;
      setPositions((p) => ({ ...p, [to]: p[from] }));
      setSelected({ kind: 'node', id: to });
    }
  }, []);

  const clientErrors = useMemo(() => (schemas && doc ? schemas.validate(doc) : []), [schemas, doc]);

  // The service's word, once typing pauses; an answer for an older document is dropped.
  useEffect(() => {
    if (!doc) return undefined;
    const t = setTimeout(async () => {
      const a = await request('POST', 'workflows/validate', { body: doc });
      const warned = (a.body && Array.isArray(a.body.warnings) ? a.body.warnings : []).map((w) => ({ path: w.path || '', message: w.message }));
      if (a.ok) setServerErrors({ doc, errors: [], warnings: warned });
      else if (a.status === 422 && a.body && Array.isArray(a.body.errors)) {
        setServerErrors({ doc, errors: a.body.errors.map((e) => ({ path: e.path || '', message: e.message, source: 'service' })), warnings: warned });
      }
    }, VALIDATE_DELAY_MS);
    return () => clearTimeout(t);
  }, [doc]);

  // The service's errors for this document, and the browser's on paths the service's
  // answer does not cover yet (it is asked after a pause).
  const errors = useMemo(() => {
    const fresh = serverErrors.doc === doc;
    const server = fresh ? serverErrors.errors : [];
    const covered = new Set(server.map((e) => e.path));
    return [...server, ...clientErrors.filter((e) => !covered.has(e.path))];
  }, [serverErrors, doc, clientErrors]);
  const checked = serverErrors.doc === doc;
  // Only the service knows what is held to no effect; its warnings are shown for the
  // document it was asked about.
  const warnings = checked ? serverErrors.warnings : [];
  const jsonInvalid = Boolean(jsonDraft && jsonDraft.error);

  // The draft: kept while the document (or the JSON tab's text) differs from what it was
  // opened as; the browser asks before a page with such changes is left.
  const draftName = (stored && stored.name) || name || '';
  const unsaved = Boolean(doc) && canEdit && (jsonInvalid ||
    pretty(canonical(doc)) !== pretty(canonical(stored && stored.name === draftName ? stored.definition : NEW_DOC)));
  useEffect(() => {
    if (!doc || !canEdit) return;
    if (unsaved) {
      // A draft written again unchanged (as restored) keeps the time it was made.
      const prev = readDraft(draftName);
      const json = jsonInvalid ? jsonDraft.text : undefined;
      const same = prev && prev.json === json && JSON.stringify(prev.doc) === JSON.stringify(doc);
      writeDraft(draftName, { doc, json, at: same ? prev.at : Date.now(), version: stored ? stored.version : 0 });
    }
    else dropDraft(draftName);
  }, [doc, jsonDraft, unsaved, draftName, canEdit, stored, jsonInvalid]);
  useEffect(() => {
    if (!unsaved) return undefined;
    const ask = (ev) => { ev.preventDefault(); ev.returnValue = ''; };
    window.addEventListener('beforeunload', ask);
    return () => window.removeEventListener('beforeunload', ask);
  }, [unsaved]);

  if (loadProblem) {
    // Not a dead end: another workflow, or a new one, is one step away.
    return (
      <div className="builder">
        <ProblemBox problem={loadProblem} />
        <p id="builder-elsewhere">
          {canEdit ? <><a href="#/builder">Start a new workflow</a> or open </> : 'Open '}
          <select aria-label="Open a stored workflow" value="" onChange={(ev) => { if (ev.target.value) location.hash = `#/builder/${encodeURIComponent(ev.target.value)}`; }}>
            <option value="">a stored workflow…</option>
            {workflows.map((w) => <option key={w.name} value={w.name}>{w.name}</option>)}
          </select>
        </p>
      </div>
    );
  }
  if (!schemas || !doc) return <div className="builder"><p className="empty">Loading the definition format…</p></div>;

  const nodeIndex = selected && selected.kind === 'node' ? nodesOf(doc).findIndex((n) => String(n.id) === selected.id) : -1;
  const edgeIndex = selected && selected.kind === 'edge' && selected.index < edgesOf(doc).length ? selected.index : -1;
  let startInput = null;
  try { startInput = JSON.parse(startText); } catch { startInput = null; }

  // Saving under another name stores a new workflow: its diff is against nothing.
  const base = stored && stored.name === doc.name ? stored : null;
  const before = base ? pretty(canonical(base.definition)) : '';
  const after = pretty(canonical(doc));
  const dirty = before !== after;
  // The workflow shown: the one opened, or the one a new workflow was just stored as.
  const shownName = (stored && stored.name) || name || '';
  // Save stores a document the service accepts: not while the JSON tab's text is not
  // JSON or errors remain (the header counts them), nor when nothing changed.
  const saveBlocked = jsonInvalid ? 'The JSON tab\'s text is not JSON.' : errors.length ? `Fix the ${errors.length} error(s) first.` : !dirty ? 'Nothing changed since the stored version.' : '';

  const save = async () => {
    setSaveState({ busy: true });
    const a = await request('PUT', `workflows/${encodeURIComponent(doc.name)}`, { body: doc });
    if (!a.ok) { setSaveState({ problem: a.problem, errors: a.body && a.body.errors, warnings: a.body && a.body.warnings }); return; }
    const r = await get(`workflows/${encodeURIComponent(doc.name)}`);
    if (r.ok) setStored({ name: doc.name, version: r.body.version, definition: r.body.definition });
    const l = await get('workflows', { limit: 200 });
    if (l.ok && l.body) setWorkflows(l.body.items || []);
    setSaveState({ done: a.body, warnings: a.body.warnings });
    if (!name) dropDraft('');
    setRestored(null);
    if (doc.name !== name) {
      history.replaceState(null, '', `#/builder/${encodeURIComponent(doc.name)}`);
    }
  };

  const start = async () => {
    let input;
    try { input = JSON.parse(startText); } catch (err) { setSaveState({ problem: { title: 'The input is not JSON', detail: err.message } }); return; }
    const a = await request('POST', `workflows/${encodeURIComponent(stored.name)}/executions`, { body: { input } });
    if (!a.ok) { setSaveState({ problem: a.problem }); return; }
    location.hash = `#/executions/${encodeURIComponent(a.body.id)}`;
  };

  return (
    <div className={`builder ${canEdit ? 'editable' : 'read-only'}`} data-editable={canEdit ? 'true' : 'false'}>
      <div className="builder-bar">
        <label htmlFor="builder-open">Workflow</label>
        <select id="builder-open" value={shownName} onChange={(ev) => { location.hash = ev.target.value ? `#/builder/${encodeURIComponent(ev.target.value)}` : '#/builder'; }}>
          <option value="">{canEdit ? '(new workflow)' : '(choose)'}</option>
          {workflows.map((w) => <option key={w.name} value={w.name}>{w.name}</option>)}
          {shownName && !workflows.some((w) => w.name === shownName) ? <option value={shownName}>{shownName}</option> : null}
        </select>
        <span id="builder-version" className="muted" data-version={stored ? stored.version : 0}>
          {stored ? `version ${stored.version} stored` : 'not stored yet'}{dirty ? ' · changed' : ''}
        </span>
        <span id="builder-check" data-state={jsonInvalid || errors.length ? 'invalid' : checked ? 'valid' : 'checking'} data-errors={errors.length}
          data-json={jsonInvalid ? 'invalid' : 'valid'} title={jsonInvalid ? jsonDraft.error : undefined}>
          {jsonInvalid ? 'invalid JSON' : errors.length ? `${errors.length} error(s)` : checked ? 'valid' : 'checking…'}
        </span>
        {warnings.length ? <span id="builder-warnings" data-warnings={warnings.length}>{`${warnings.length} warning(s)`}</span> : null}
        <span className="spacer" />
        <button type="button" id="builder-layout" onClick={() => { setPositions(layoutPositions(doc)); setFitKey((k) => k + 1); }}>Lay out</button>
        {canEdit ? <button type="button" id="builder-save" disabled={Boolean(saveBlocked)} title={saveBlocked || undefined}
          onClick={() => { setSaveState(null); setDialog('save'); setSaving({ name: doc.name, version: base ? base.version + 1 : 1, base: base ? base.version : 0 }); }}>Save…</button> : null}
        {canStart && stored ? <button type="button" id="builder-start" onClick={() => { setSaveState(null); setDialog('start'); }}>Start execution…</button> : null}
      </div>
      {restored ? (
        <p id="builder-draft" className="builder-draft" role="status">
          Restored the unsaved changes made {new Date(restored.at).toLocaleString()}{restored.version ? ` on version ${restored.version}` : ''}
          {restored.version && restored.current && restored.version !== restored.current ? ` (version ${restored.current} is stored now)` : ''}; they are kept in this browser until saved.{' '}
          <button type="button" id="builder-discard" onClick={() => {
            dropDraft(draftName);
            setRestored(null);
            const d = stored && stored.name === draftName ? stored.definition : NEW_DOC;
            setDoc(d);
            setJsonDraft(null);
            setPositions(layoutPositions(d));
            setFitKey((k) => k + 1);
          }}>Discard them</button>
        </p>
      ) : null}
      <div className="builder-main">
        {canEdit ? (
          <aside className="builder-palette" aria-label="Node types">
            <h3>Add a node</h3>
            {NODE_TYPES.map((t) => (
              <button key={t.type} type="button" draggable className="palette-item" data-node-type={t.type}
                onDragStart={(ev) => { ev.dataTransfer.setData('application/x-rendezvous-node', t.type); ev.dataTransfer.effectAllowed = 'move'; }}
                onClick={() => addNode(t.type, edit, setPositions, setSelected, doc)}>
                <span className="palette-type">{t.type}</span><span className="palette-label">{t.label}</span>
              </button>
            ))}
            <p className="hint">Drag a type onto the canvas, or click it.</p>
          </aside>
        ) : null}
        <ReactFlowProvider>
          <Canvas doc={doc} errors={errors} warnings={warnings} editable={canEdit} selected={selected} onSelect={setSelected} onChange={edit}
            positions={positions} setPositions={setPositions} fitKey={fitKey} />
        </ReactFlowProvider>
        <div className="builder-side">
          <div className="tabs" role="tablist">
            <button type="button" role="tab" id="tab-properties" aria-selected={tab === 'properties'} onClick={() => setTab('properties')}>Properties</button>
            <button type="button" role="tab" id="tab-json" aria-selected={tab === 'json'} onClick={() => setTab('json')}>JSON</button>
          </div>
          {tab === 'json'
            ? <JsonTab doc={doc} editable={canEdit} onChange={edit} errors={errors} warnings={warnings} draft={jsonDraft} setDraft={setJsonDraft} />
            : nodeIndex >= 0
              ? <NodePanel key={`n${nodeIndex}`} schemas={schemas} doc={doc} index={nodeIndex} errors={errors} warnings={warnings} editable={canEdit} onChange={edit} startInput={startInput} />
              : edgeIndex >= 0
                ? <EdgePanel doc={doc} index={edgeIndex} errors={errors} editable={canEdit} onChange={edit} />
                : <DefinitionPanel schemas={schemas} doc={doc} errors={errors} warnings={warnings} editable={canEdit} onChange={edit} />}
        </div>
      </div>
      {dialog === 'save' && saving ? (
        <Modal id="builder-save-dialog" title={saveState && saveState.done
          ? `Saved ${saving.name}: version ${saveState.done.version}${saveState.done.unchanged ? ' (unchanged)' : ''}`
          : `Save ${saving.name} as version ${saving.version}`} onClose={() => setDialog(null)}>
          {saveState && saveState.done ? (
            <p id="builder-saved" className="ok" role="status" data-version={saveState.done.version}>
              {saveState.done.unchanged
                ? `Nothing changed: ${saving.name} stays at version ${saveState.done.version}.`
                : `Stored ${saving.name} as version ${saveState.done.version}${saving.base ? `, after version ${saving.base}` : ', its first version'}. New executions run it; running ones keep the version they started with.`}
            </p>
          ) : (
            <>
              <p className="hint">{saving.base ? `Changes against version ${saving.base} as stored (keys sorted, so only what changed differs):` : 'A new workflow:'}</p>
              <DiffView before={before} after={after} />
            </>
          )}
          <ProblemBox problem={saveState && saveState.problem} />
          {saveState && saveState.errors ? <Problems errors={saveState.errors} /> : null}
          {saveState && saveState.warnings ? <Warnings warnings={saveState.warnings} /> : null}
          <div className="dialog-buttons">
            <button type="button" data-dialog="close" onClick={() => setDialog(null)}>{saveState && saveState.done ? 'Close' : 'Cancel'}</button>
            {!(saveState && saveState.done) ? <button type="button" data-dialog="confirm" disabled={saveState && saveState.busy} onClick={save}>Save</button> : null}
          </div>
        </Modal>
      ) : null}
      {dialog === 'start' ? (
        <Modal id="builder-start-dialog" title={`Start ${stored.name} (version ${stored.version})`} onClose={() => setDialog(null)}>
          {dirty ? <p className="hint">The execution runs version {stored.version} as stored, not the unsaved changes.</p> : null}
          <label htmlFor="builder-start-input">Input (JSON)</label>
          <textarea id="builder-start-input" rows={6} spellCheck={false} value={startText} onChange={(ev) => setStartText(ev.target.value)} />
          <ProblemBox problem={saveState && saveState.problem} />
          <div className="dialog-buttons">
            <button type="button" data-dialog="close" onClick={() => setDialog(null)}>Cancel</button>
            <button type="button" data-dialog="confirm" onClick={start}>Start</button>
          </div>
        </Modal>
      ) : null}
    </div>
  );
}

// loadSchemas loads the served schemas once per page.
let schemasPromise = null;
function loadSchemas(ok, fail) {
  if (!schemasPromise) schemasPromise = Schemas.load();
  schemasPromise.then(ok, (err) => {
    schemasPromise = null;
    fail({ title: 'Could not load the definition format', detail: String(err && err.message) });
  });
}

export default BuilderApp;
