// Who the console reads and acts as. Before every poll it asks the API (GET whoami):
// without a token, or with one the API no longer takes, the answer is 401 and the
// console asks for a token; with a token whose role may not read (sender), it says so
// and asks for another. The role it learns decides which actions the pages offer
// (allows), mirroring the API's own matrix (docs/access-control.md); the API still
// checks every request, so this only spares the operator buttons that would be refused.

import { get } from './api.js';

// SessionState is where the console stands with the API.
export const SessionState = Object.freeze({
  UNKNOWN: 'unknown',     // not asked yet, or the API did not answer
  OK: 'ok',               // the principal may read
  NEEDED: 'needed',       // the API wants a token (401)
  FORBIDDEN: 'forbidden', // the token's role may not read (403)
});

// Access names what a request needs, as the API's route table does.
export const Access = Object.freeze({ READ: 'read', OPERATE: 'operate', SEND: 'send', ADMIN: 'admin' });

// roleAllows is the API's role matrix: which role may use which access.
export function roleAllows(role, access) {
  switch (access) {
    case Access.READ: return role === 'admin' || role === 'operator' || role === 'viewer';
    case Access.OPERATE: return role === 'admin' || role === 'operator';
    case Access.SEND: return role === 'admin' || role === 'operator' || role === 'sender';
    case Access.ADMIN: return role === 'admin';
    default: return false;
  }
}

export const session = {
  state: SessionState.UNKNOWN,
  principal: null, // {kind, name, role, workflow_prefix?} from whoami, when known
  refusal: null,   // the API's problem when it refused the token

  // check asks the API who the token is; it answers the state. An API that does not
  // answer leaves what was known (the page then says the API is unreachable).
  async check() {
    const a = await get('whoami');
    if (a.ok && a.body && a.body.role) {
      this.principal = a.body;
      this.refusal = null;
      this.state = roleAllows(a.body.role, Access.READ) ? SessionState.OK : SessionState.FORBIDDEN;
    } else if (a.status === 401) {
      this.principal = null;
      this.refusal = a.problem;
      this.state = SessionState.NEEDED;
    } else if (a.status === 403) {
      this.refusal = a.problem;
      this.state = SessionState.FORBIDDEN;
    }
    return this.state;
  },

  // reset forgets what was learnt, as when the token changes.
  reset() {
    this.state = SessionState.UNKNOWN;
    this.principal = null;
    this.refusal = null;
  },

  // allows says whether the principal may use access; nothing is allowed before the
  // API has said who it is.
  allows(access) {
    return this.state === SessionState.OK && Boolean(this.principal) && roleAllows(this.principal.role, access);
  },
};
