// Drafts: the builder keeps what is being edited in the browser's localStorage, one
// draft per workflow (a new workflow's under its own key), so that a reload, a closed
// tab or Back and Forward lose nothing. A draft is written at every change that leaves
// the document different from the version it started from, and removed when the
// document is that version again (saved, or the changes discarded).

const PREFIX = 'rendezvous.builder.draft:';
// NEW is the key part of a workflow not stored yet.
const NEW = '(new)';

const keyOf = (name) => PREFIX + (name || NEW);

// readDraft returns the draft kept for a workflow ('' for a new one), or null:
// {doc, json (the JSON tab's text when it was not JSON), at (ms), version (the stored
// version it was made on, 0 for none)}.
export function readDraft(name) {
  try {
    const raw = localStorage.getItem(keyOf(name));
    if (!raw) return null;
    const d = JSON.parse(raw);
    return d && d.doc && typeof d.doc === 'object' ? d : null;
  } catch {
    return null; // storage unavailable, or not a draft of ours: nothing to restore
  }
}

export function writeDraft(name, draft) {
  try {
    localStorage.setItem(keyOf(name), JSON.stringify(draft));
  } catch {
    // Storage full or refused: the beforeunload prompt still guards the edit.
  }
}

export function dropDraft(name) {
  try {
    localStorage.removeItem(keyOf(name));
  } catch {
    // nothing kept
  }
}
