// The builder's page (#/builder, #/builder/<name>): a React root in the console's page
// frame. The console polls its pages; the builder reads the session's role at each
// poll and otherwise leaves the operator's edits alone.

import { createRoot } from 'react-dom/client';
import { session, Access } from '../session.js';
import BuilderApp from './Builder.jsx';

// builderView draws the builder into root (emptied first) and answers the page's hooks.
export function builderView(name, root) {
  root.replaceChildren();
  const react = createRoot(root);
  let shown = '';
  // render draws the builder again only when what the role allows changed: a poll must
  // not redraw the forms under the operator's cursor.
  const render = () => {
    const canEdit = session.allows(Access.ADMIN), canStart = session.allows(Access.OPERATE);
    if (shown === `${canEdit}/${canStart}`) return;
    shown = `${canEdit}/${canStart}`;
    react.render(<BuilderApp name={name} canEdit={canEdit} canStart={canStart} />);
  };
  return {
    async refresh() {
      // Authoring needs the role that may store definitions (PUT /api/v1/workflows/:name
      // is admin-only); starting one needs operate. Others see the builder read-only.
      render();
      return true;
    },
    dispose() {
      react.unmount();
    },
  };
}
