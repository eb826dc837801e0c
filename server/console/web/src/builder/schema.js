// The definition format as the builder knows it: nothing but the JSON Schemas the
// service serves under /schemas/ (the ones its own validation uses). From them it
//  - validates the whole document in the browser (@cfworker/json-schema, an interpreter:
//    the console's CSP forbids validators that compile schemas into code at run time),
//    each error at the JSON path the service's own errors use (nodes[0].data.apiCall.url);
//  - derives each form's shape (formSchema): the fields a value may have, for the
//    schema-driven form (@rjsf/core) to render. Conditions (if/then/else, allOf) are rules
//    about values, so the shape is the union of the fields they name, and validation
//    reports what the rules refuse.
// So a field added to a schema is in the form and checked without a change here.

import { Validator } from '@cfworker/json-schema';

// The files the service serves; workflow.json refers to the others by relative $ref.
const FILES = ['workflow.json', 'common.json', 'http.json', 'wait.json', 'wait_events.json'];

// NODE_TYPES are the built-in node types the palette offers, each with its data schema.
export const NODE_TYPES = [
  { type: 'wait_events', schema: 'wait_events.json', label: 'Wait for events' },
  { type: 'wait', schema: 'wait.json', label: 'Wait (timer)' },
  { type: 'http', schema: 'http.json', label: 'HTTP request' },
];

// Schemas holds the served schemas by file name and a validator of whole definitions.
export class Schemas {
  constructor(docs, base) {
    this.docs = docs;
    this.base = base;
    this.shapes = new Map(); // formSchema's answers: the schemas do not change
    this.validator = new Validator(docs['workflow.json'], '2020-12', false);
    for (const name of FILES.slice(1)) this.validator.addSchema(docs[name]);
  }

  // load fetches every schema from the service (same origin, so the CSP allows it).
  static async load() {
    const base = new URL('../schemas/', document.baseURI).href;
    const docs = {};
    await Promise.all(FILES.map(async (name) => {
      const resp = await fetch(new URL(name, base), { credentials: 'omit' });
      if (!resp.ok) throw new Error(`GET /schemas/${name}: ${resp.status}`);
      // $id makes the relative $refs ("common.json#/$defs/duration") resolve among them.
      docs[name] = { ...(await resp.json()), $id: new URL(name, base).href };
    }));
    return new Schemas(docs, base);
  }

  // validate checks a whole definition against workflow.json; it answers [{path,
  // message}] with the service's path notation, one entry per failing rule.
  validate(doc) {
    const out = [];
    const seen = new Set();
    for (const e of this.validator.validate(doc).errors) {
      if (WRAPPERS.has(e.keyword)) continue;
      // An alternative's own failures (a branch of anyOf, a not) explain nothing that the
      // alternative's error does not say.
      if (/\/(anyOf|oneOf)\/\d+\/|\/not\//.test(e.keywordLocation)) continue;
      let ptr = e.instanceLocation.replace(/^#/, '');
      let message = e.error;
      const req = e.keyword === 'required' && /required property "([^"]*)"/.exec(e.error);
      if (req) {
        ptr += '/' + req[1].replace(/~/g, '~0').replace(/\//g, '~1');
        message = 'required';
      } else if (e.keyword === 'false' || e.keyword === 'not') {
        message = 'not allowed here';
      }
      const path = pointerToPath(ptr);
      const key = path + '\n' + message;
      if (seen.has(key)) continue;
      seen.add(key);
      out.push({ path, message, source: 'schema' });
    }
    return out;
  }

  // resolve follows a $ref from the document file (a name in FILES).
  resolve(ref, file) {
    const [f, frag] = ref.split('#');
    const target = f ? f.replace(/^.*\//, '') : file;
    let node = this.docs[target];
    for (const part of (frag || '').split('/').filter(Boolean)) node = node && node[decodePointer(part)];
    return { schema: node || {}, file: target };
  }

  // formSchema is the shape of a value of the schema at ref in file: properties merged
  // from every branch, refs inlined, nothing that only says what is refused. The answer
  // is shared: callers copy what they change.
  formSchema(file, ref = '#') {
    const key = `${file}${ref}`;
    if (!this.shapes.has(key)) this.shapes.set(key, shape(this, this.resolve(ref, file).schema, file, 0));
    return this.shapes.get(key);
  }

  // definitionForm is the shape of the definition's own fields (name, vars, triggers…);
  // nodes and edges are drawn on the canvas instead.
  definitionForm() {
    const s = this.formSchema('workflow.json', '#/$defs/definition');
    const properties = { ...s.properties };
    delete properties.nodes;
    delete properties.edges;
    delete properties.$schema;
    return { type: 'object', properties };
  }
}

// Keywords whose errors only say that a subschema had errors; the subschema's own errors
// are reported with their paths.
const WRAPPERS = new Set(['properties', 'items', 'prefixItems', 'allOf', '$ref', '$dynamicRef', 'if', 'then', 'else',
  'additionalProperties', 'patternProperties', 'dependentSchemas', 'unevaluatedProperties', 'unevaluatedItems', 'contains']);

const decodePointer = (s) => decodeURIComponent(s).replace(/~1/g, '/').replace(/~0/g, '~');

// pointerToPath turns /nodes/0/data/headers/Bad Header into the service's notation,
// nodes[0].data.headers["Bad Header"].
export function pointerToPath(ptr) {
  let out = '';
  for (const raw of ptr.split('/').slice(1)) {
    const seg = decodePointer(raw);
    if (/^\d+$/.test(seg)) out += `[${seg}]`;
    else if (/^[A-Za-z0-9_$-]+$/.test(seg)) out += (out ? '.' : '') + seg;
    else out += `[${JSON.stringify(seg)}]`;
  }
  return out;
}

// splitPath is the inverse: the path's keys and indexes, in order.
export function splitPath(path) {
  const out = [];
  const re = /(?:^|\.)([^.[\]]+)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]/g;
  let m;
  while ((m = re.exec(path))) {
    if (m[1] !== undefined) out.push(m[1]);
    else if (m[2] !== undefined) out.push(Number(m[2]));
    else out.push(JSON.parse(m[3]));
  }
  return out;
}

// types lists a schema's types, null aside.
function types(s) {
  const t = s.type === undefined ? [] : Array.isArray(s.type) ? s.type : [s.type];
  return t.filter((x) => x !== 'null');
}

// isForbidding: a subschema that only refuses (not: {} or false).
const isForbidding = (s) => s === false || (s && typeof s === 'object' && ('not' in s));

// collect merges a schema with the branches it is made of into one flat schema: its own
// keywords, then those of its $ref, allOf members and if/then/else branches, the first
// word on a keyword winning and properties merged by name.
function collect(ctx, s, file, depth, acc) {
  if (!s || typeof s !== 'object' || depth > 12) return acc;
  for (const [k, v] of Object.entries(s)) {
    if (['$ref', 'allOf', 'if', 'then', 'else', 'anyOf', 'oneOf', 'not', 'errorMessage', 'patternErrorMessage', '$comment', '$schema', '$defs', '$id', 'title'].includes(k)) continue;
    if (k === 'properties') {
      for (const [name, ps] of Object.entries(v)) {
        if (isForbidding(ps)) continue;
        acc.properties[name] = acc.properties[name] ? [...acc.properties[name], { s: ps, file }] : [{ s: ps, file }];
      }
    } else if (!(k in acc.own)) {
      acc.own[k] = { v, file };
    }
  }
  if (s.$ref) {
    const r = ctx.resolve(s.$ref, file);
    collect(ctx, r.schema, r.file, depth + 1, acc);
  }
  for (const sub of s.allOf || []) collect(ctx, sub, file, depth + 1, acc);
  if (s.then) collect(ctx, s.then, file, depth + 1, acc);
  if (s.else) collect(ctx, s.else, file, depth + 1, acc);
  return acc;
}

// shape turns a schema into the form schema rjsf renders. Kinds of value the form cannot
// edit field by field become text widgets named by x-kind (see widgets.jsx): a
// free JSON value, a number-or-duration, a scalar.
function shape(ctx, schema, file, depth) {
  const acc = collect(ctx, schema, file, depth, { own: {}, properties: {} });
  const own = Object.fromEntries(Object.entries(acc.own).map(([k, { v }]) => [k, v]));
  const t = types(own);
  const out = {};
  if (own.description) out.description = own.description;
  if (own.default !== undefined) out['x-default'] = own.default; // shown, never written
  if (own.examples) out['x-examples'] = own.examples;

  const hasProps = Object.keys(acc.properties).length > 0;
  const mapValue = typeof own.additionalProperties === 'object' && !isForbidding(own.additionalProperties)
    ? own.additionalProperties
    : own.patternProperties ? Object.values(own.patternProperties).find((p) => !isForbidding(p)) : null;

  if (t.length === 1 && t[0] === 'object' || (t.length === 0 && hasProps)) {
    if (hasProps) {
      out.type = 'object';
      out.properties = {};
      for (const [name, parts] of Object.entries(acc.properties)) {
        // Merge the branches' words on one field; the one with a type or a $ref leads.
        const merged = {};
        for (const p of parts) for (const [k, v] of Object.entries(p.s)) if (!(k in merged) && !(k === 'errorMessage')) merged[k] = v;
        const leadFile = (parts.find((p) => p.s.$ref || p.s.type) || parts[0]).file;
        out.properties[name] = shape(ctx, merged, leadFile, depth + 1);
      }
      return out;
    }
    if (mapValue) {
      // A map from names to values: headers, filters, output mappings.
      out.type = 'object';
      out.additionalProperties = shape(ctx, mapValue, file, depth + 1);
      return out;
    }
    return { ...out, type: 'string', 'x-kind': 'json' };
  }
  if (t.length === 1 && t[0] === 'array') {
    const items = own.items ? shape(ctx, own.items, file, depth + 1) : { type: 'string', 'x-kind': 'json' };
    out.type = 'array';
    out.items = items;
    if (own.uniqueItems) out.uniqueItems = true;
    return out;
  }
  if (t.length > 1) {
    if (t.includes('object') || t.includes('array')) return { ...out, type: 'string', 'x-kind': 'json' };
    if (t.includes('boolean')) return { ...out, type: 'string', 'x-kind': 'scalar' };
    if (t.includes('number')) return { ...out, type: 'string', 'x-kind': 'number-or-string' };
  }
  const single = t[0] || 'string';
  out.type = single === 'integer' ? 'integer' : single;
  const choices = closedChoices(own);
  if (choices) out['x-choices'] = choices;
  if (own.enum) {
    const values = own.enum.filter((v) => v !== null);
    if (values.length) out.enum = values;
  }
  if (own.const !== undefined) out.enum = [own.const];
  return out;
}

// closedChoices: the examples of a string whose pattern admits no more than a fixed set
// of spellings (anchored, no repetition: ^(GET|POST|…)$ in any case) and which all
// match it, so that they are the values to choose from (the HTTP method). Other
// patterns (a topic name, a URL) take free text.
function closedChoices(own) {
  const ex = own.examples;
  if (typeof own.pattern !== 'string' || !Array.isArray(ex) || !ex.length || ex.some((e) => typeof e !== 'string')) return null;
  const bare = own.pattern.replace(/\\./g, '');
  if (!/^\^.*\$$/.test(bare) || /[*+?{]/.test(bare)) return null;
  let re;
  try {
    re = new RegExp(own.pattern, 'u');
  } catch {
    return null;
  }
  return ex.every((e) => re.test(e)) ? ex : null;
}
