// The validator @rjsf/core asks while it renders a form. rjsf's own validator compiles
// schemas into code at run time, which the console's CSP forbids; this one interprets them
// (@cfworker/json-schema). The form itself validates nothing: the builder checks the
// whole definition against the served schemas (schema.js) and the service, and hands
// the form the errors at its fields (extraErrors), so a field shows the same error
// whichever way the definition was edited.

import { Validator } from '@cfworker/json-schema';

const EMPTY = { errors: [], errorSchema: {} };

export const formValidator = {
  validateFormData() {
    return EMPTY;
  },
  toErrorList() {
    return [];
  },
  // isValid picks among alternatives (anyOf, oneOf) and conditions while rendering.
  isValid(schema, formData, rootSchema) {
    try {
      const v = new Validator({ ...schema, $defs: { ...(rootSchema && rootSchema.$defs), ...schema.$defs } }, '2020-12', false);
      return v.validate(formData).valid;
    } catch {
      return false;
    }
  },
  rawValidation(schema, formData) {
    const r = new Validator(schema, '2020-12', false).validate(formData);
    return { errors: r.errors };
  },
};

// errorSchemaAt builds the form's extraErrors from the definition's errors whose paths
// lie under prefix (the keys and indexes of the form's value in the definition).
export function errorSchemaAt(errors, prefix, split) {
  const out = {};
  for (const e of errors) {
    const parts = split(e.path);
    if (parts.length < prefix.length || prefix.some((p, i) => parts[i] !== p)) continue;
    let node = out;
    for (const p of parts.slice(prefix.length)) node = node[p] || (node[p] = {});
    (node.__errors || (node.__errors = [])).push(e.message);
  }
  return out;
}
