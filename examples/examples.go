// Package examples holds sample workflow definitions. They are embedded so that
// `rendezvous dev` loads them wherever the binary runs; the demo program beside them
// plays the external service of order-approval.json.
package examples

import "embed"

// Definitions are the *.json workflow definitions of this folder.
//
//go:embed *.json
var Definitions embed.FS
