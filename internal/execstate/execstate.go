// Package execstate declares, once, the states an execution and its nodes move through
// and the kinds of work the run queue holds — the vocabulary the executor (which owns
// executions) and the aggregator (which finishes the node of a wait that ends) share, as
// it is stored in executions.status, node_executions.status and run_queue.kind. The
// transitions are drawn in DESIGN.md ("States"). A wait's own states are the
// aggregator's (aggregator.StatusWaiting and the rest); the definition's vocabulary
// (strategies, onTimeout, event sources) is internal/workflow's.
package execstate

// Execution statuses.
const (
	ExecRunning   = "running"
	ExecWaiting   = "waiting" // every unfinished node waits for events or a timer
	ExecCompleted = "completed"
	ExecFailed    = "failed"
	ExecCancelled = "cancelled"
)

// ExecFinished reports whether an execution status is final.
func ExecFinished(status string) bool {
	return status == ExecCompleted || status == ExecFailed || status == ExecCancelled
}

// Node statuses.
const (
	NodePending   = "pending"
	NodeRunning   = "running"
	NodeWaiting   = "waiting_for_events"
	NodeCompleted = "completed"
	NodeFailed    = "failed"
	NodeSkipped   = "skipped"
	NodeCancelled = "cancelled"
)

// Kinds of run-queue work.
const (
	// KindRun runs a node.
	KindRun = "run"
	// KindResume continues an execution whose wait ended.
	KindResume = "resume"
)
