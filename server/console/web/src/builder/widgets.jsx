// The form's widgets for values the schemas allow in more than one shape, and the form
// schema's companion uiSchema. Every widget writes the definition exactly as typed: an
// emptied field is removed (its default applies), a default is shown as a placeholder
// and never written, so fields the operator did not touch stay as they were stored.

import { useEffect, useState } from 'react';

// uiFor derives the uiSchema of a form schema (schema.js): the widget of each field,
// its placeholder (the schema's default) and its suggestions (the schema's examples).
export function uiFor(s) {
  const ui = {};
  if (!s || typeof s !== 'object') return ui;
  if (s['x-kind']) ui['ui:widget'] = s['x-kind'];
  else if (s['x-choices']) ui['ui:widget'] = 'choice';
  else if (s.type === 'boolean') ui['ui:widget'] = 'tristate';
  else if (s.type === 'string' && !s.enum) ui['ui:widget'] = 'template';
  if (s['x-default'] !== undefined) ui['ui:placeholder'] = `default: ${JSON.stringify(s['x-default'])}`;
  if (s.properties) for (const [k, v] of Object.entries(s.properties)) ui[k] = uiFor(v);
  if (s.additionalProperties && typeof s.additionalProperties === 'object') ui.additionalProperties = uiFor(s.additionalProperties);
  if (s.items) ui.items = uiFor(s.items);
  return ui;
}

const stringExamples = (schema) => (schema['x-examples'] || []).filter((e) => typeof e === 'string');

// Suggestions is the datalist of a field: its schema's examples, then the template names
// in scope at the node (trigger input, vars, earlier nodes' outputs).
function Suggestions({ id, schema, formContext }) {
  const names = [...stringExamples(schema), ...((formContext && formContext.templateNames) || [])];
  if (!names.length) return null;
  return (
    <datalist id={`${id}-suggestions`}>
      {[...new Set(names)].map((n) => <option key={n} value={n} />)}
    </datalist>
  );
}

function common(props) {
  const { id, disabled, readonly, autofocus, onBlur, onFocus, placeholder } = props;
  return {
    id, name: id, disabled: disabled || readonly, autoFocus: autofocus, placeholder: placeholder || '',
    onBlur: onBlur && ((ev) => onBlur(id, ev.target.value)),
    onFocus: onFocus && ((ev) => onFocus(id, ev.target.value)),
    'data-field': id,
  };
}

// TemplateWidget: a text field whose suggestions include the templates in scope.
export function TemplateWidget(props) {
  const { id, value, onChange, schema } = props;
  const formContext = props.registry && props.registry.formContext;
  const hasList = stringExamples(schema).length || ((formContext && formContext.templateNames) || []).length;
  return (
    <>
      <input type="text" className="form-control" {...common(props)} value={value ?? ''} list={hasList ? `${id}-suggestions` : undefined}
        onChange={(ev) => onChange(ev.target.value === '' ? undefined : ev.target.value)} />
      <Suggestions id={id} schema={schema} formContext={formContext} />
    </>
  );
}

// TristateWidget: a boolean that may also be absent (its default).
export function TristateWidget(props) {
  const { value, onChange, placeholder } = props;
  const v = value === true ? 'true' : value === false ? 'false' : '';
  return (
    <select className="form-control" {...common(props)} value={v}
      onChange={(ev) => onChange(ev.target.value === '' ? undefined : ev.target.value === 'true')}>
      <option value="">{placeholder || '(not set)'}</option>
      <option value="true">true</option>
      <option value="false">false</option>
    </select>
  );
}

// ChoiceWidget: a string whose schema admits a closed set of values (schema.js
// closedChoices) as a dropdown; a stored value spelt otherwise ("post") stays choosable.
export function ChoiceWidget(props) {
  const { value, onChange, schema, placeholder } = props;
  const choices = schema['x-choices'] || [];
  const options = value !== undefined && value !== null && !choices.includes(value) ? [...choices, value] : choices;
  return (
    <select className="form-control" {...common(props)} value={value ?? ''}
      onChange={(ev) => onChange(ev.target.value === '' ? undefined : ev.target.value)}>
      <option value="">{placeholder || '(not set)'}</option>
      {options.map((c) => <option key={c} value={c}>{c}</option>)}
    </select>
  );
}

// NumberOrStringWidget: a duration, as a number of seconds or a duration string: what
// reads as a number is written as one.
export function NumberOrStringWidget(props) {
  const { id, value, onChange, schema } = props;
  return (
    <>
      <input type="text" className="form-control" {...common(props)} value={value === undefined || value === null ? '' : String(value)}
        list={`${id}-suggestions`}
        onChange={(ev) => {
          const t = ev.target.value;
          onChange(t === '' ? undefined : /^-?\d+(\.\d+)?$/.test(t) ? Number(t) : t);
        }} />
      <Suggestions id={id} schema={{ 'x-examples': (schema['x-examples'] || []).map(String) }} />
    </>
  );
}

// ScalarWidget: a string, number, boolean or null; JSON literals are read as such.
export function ScalarWidget(props) {
  const { value, onChange } = props;
  const shown = value === undefined ? '' : typeof value === 'string' ? value : JSON.stringify(value);
  return (
    <input type="text" className="form-control" {...common(props)} value={shown}
      onChange={(ev) => {
        const t = ev.target.value;
        if (t === '') return onChange(undefined);
        if (/^(true|false|null|-?\d+(\.\d+)?([eE][+-]?\d+)?)$/.test(t)) return onChange(JSON.parse(t));
        return onChange(t);
      }} />
  );
}

// JsonWidget: a free JSON value (a body, vars, a list of candidates), typed as JSON;
// text that is no JSON is kept as a string, which the schema then judges.
export function JsonWidget(props) {
  const { value, onChange } = props;
  const render = (v) => (v === undefined ? '' : typeof v === 'string' ? v : JSON.stringify(v, null, 2));
  const [text, setText] = useState(render(value));
  useEffect(() => {
    // Follow the value when it changes elsewhere (the JSON tab), not while typing.
    if (!sameJSON(parseLoose(text), value)) setText(render(value));
  }, [value]); // eslint-disable-line react-hooks/exhaustive-deps
  return (
    <textarea className="form-control json" rows={Math.min(10, Math.max(3, text.split('\n').length))} {...common(props)} value={text}
      spellCheck={false}
      onChange={(ev) => {
        setText(ev.target.value);
        onChange(parseLoose(ev.target.value));
      }} />
  );
}

function parseLoose(t) {
  if (t.trim() === '') return undefined;
  try {
    return JSON.parse(t);
  } catch {
    return t;
  }
}

const sameJSON = (a, b) => JSON.stringify(a) === JSON.stringify(b);

export const widgets = {
  template: TemplateWidget,
  tristate: TristateWidget,
  choice: ChoiceWidget,
  'number-or-string': NumberOrStringWidget,
  scalar: ScalarWidget,
  json: JsonWidget,
};

// textButton is a form button labelled in words. The form library's own buttons draw
// an icon from an icon font the console does not ship (it loads nothing from outside the
// service), so they rendered as empty pills.
function textButton(label, kind) {
  function TextButton({ id, className, onClick, disabled, title, style }) {
    return (
      <button type="button" id={id} className={['form-button', `form-button-${kind}`, className].filter(Boolean).join(' ')}
        data-form-button={kind} onClick={onClick} disabled={disabled} title={title} style={style}>{label}</button>
    );
  }
  return TextButton;
}

// buttonTemplates are the form's array and map buttons (add, remove, move, copy).
export const buttonTemplates = {
  AddButton: textButton('+ Add', 'add'),
  RemoveButton: textButton('Remove', 'remove'),
  MoveUpButton: textButton('Up', 'up'),
  MoveDownButton: textButton('Down', 'down'),
  CopyButton: textButton('Copy', 'copy'),
  ClearButton: textButton('Clear', 'clear'),
};
