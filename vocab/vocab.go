// Package execstate declares, once, the states an execution, its nodes and its waits move
// through, what a wait waits for, and the kinds of work the run queue holds — the
// vocabulary the executor (which owns executions) and the aggregator (which owns waits
// and finishes the node of a wait that ends) share, as it is stored in
// executions.status, node_executions.status, execution_wait_states.status and wait_type,
// and run_queue.kind. The transitions are drawn in DESIGN.md ("States").
//
// Each word list is a named type, so the compiler refuses a wait status where an
// execution status is expected. The types live here, in a package that imports nothing
// of ours, because the generated queries (db/dbsqlc, configured in sqlc.yaml) carry them
// in their columns, and package aggregator imports db/dbsqlc: a wait's statuses
// declared in aggregator could not be named there. The definition's vocabulary
// (strategies, onTimeout, event sources, buffer modes) is workflow's, which
// imports no package of ours that touches the database either.
package vocab

// ExecutionStatus is an execution's state (executions.status).
type ExecutionStatus string

// Execution statuses.
const (
	ExecRunning   ExecutionStatus = "running"
	ExecWaiting   ExecutionStatus = "waiting" // every unfinished node waits for events or a timer
	ExecCompleted ExecutionStatus = "completed"
	ExecFailed    ExecutionStatus = "failed"
	ExecCancelled ExecutionStatus = "cancelled"
)

// ExecFinished reports whether an execution status is final.
func ExecFinished(status ExecutionStatus) bool {
	return status == ExecCompleted || status == ExecFailed || status == ExecCancelled
}

// NodeStatus is a node's state in one execution (node_executions.status).
type NodeStatus string

// Node statuses.
const (
	NodePending   NodeStatus = "pending"
	NodeRunning   NodeStatus = "running"
	NodeWaiting   NodeStatus = "waiting_for_events"
	NodeCompleted NodeStatus = "completed"
	NodeFailed    NodeStatus = "failed"
	NodeSkipped   NodeStatus = "skipped"
	NodeCancelled NodeStatus = "cancelled"
)

// RunKind is the kind of a run-queue row (run_queue.kind).
type RunKind string

// Kinds of run-queue work.
const (
	// KindRun runs a node.
	KindRun RunKind = "run"
	// KindResume continues an execution whose wait ended.
	KindResume RunKind = "resume"
)

// WaitStatus is a wait's state (execution_wait_states.status). An event wait is waiting,
// then completed, timeout, failed or cancelled; a timer (a wait node) is scheduled, then
// resumed, cancelled or error.
type WaitStatus string

// Wait statuses.
const (
	WaitWaiting   WaitStatus = "waiting"
	WaitCompleted WaitStatus = "completed"
	WaitTimeout   WaitStatus = "timeout"
	WaitFailed    WaitStatus = "failed"
	WaitCancelled WaitStatus = "cancelled"
	WaitScheduled WaitStatus = "scheduled"
	WaitResumed   WaitStatus = "resumed"
	WaitError     WaitStatus = "error"
)

// WaitType is what a wait waits for (execution_wait_states.wait_type).
type WaitType string

// Wait types.
const (
	WaitTypeEvents WaitType = "events" // events of a wait_events node
	WaitTypeTimer  WaitType = "timer"  // a wait node's time
)

// Strategy is an aggregation strategy: it decides when a wait_events node is
// satisfied. A wait row stores its node's (execution_wait_states.aggregation_strategy).
type Strategy string

// Aggregation strategies.
const (
	StrategyAll          Strategy = "all"           // every enabled event arrived
	StrategyAny          Strategy = "any"           // the first enabled event arrived
	StrategyRequiredOnly Strategy = "required_only" // every enabled event with required:true arrived
	StrategyCustom       Strategy = "custom"        // every event in RequiredEvents arrived
)

// OnTimeout is what a timed-out wait_events node does; a wait row stores its node's
// (execution_wait_states.on_timeout).
type OnTimeout string

// OnTimeout policies.
const (
	OnTimeoutFail                OnTimeout = "fail"
	OnTimeoutContinue            OnTimeout = "continue"
	OnTimeoutContinueWithPartial OnTimeout = "continue_with_partial"
)
