// The builder's page (#/builder, #/builder/<name>): a React root in the console's page
// frame. The console polls its pages; the builder reads the session's role at each
// poll and otherwise leaves the operator's edits alone.

import { createRoot } from 'react-dom/client';
import { h } from '../dom.js';
import { session, Access } from '../session.js';
import BuilderApp from './Builder.jsx';

export function builderView(name) {
  const root = h('div', { class: 'builder-page', id: 'builder' });
  const react = createRoot(root);
  const render = () => react.render(
    <BuilderApp name={name} canEdit={session.allows(Access.ADMIN)} canStart={session.allows(Access.OPERATE)} />,
  );
  return {
    root,
    title: name ? `Builder · ${name}` : 'Builder',
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
