package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Redrives during the run: an operator, with an operator token, redrives executions whose
// wait failed (RedrivePlan), through the replicas' API while replicas are killed and the
// database goes away. This file is the driver's side; check_redrive.go checks them.

// OperatorToken names the operator token the driver creates (with the bootstrap admin
// token) and redrives with; the audit log names it as the principal.
const OperatorToken = "chaos-operator"

// RedriveLog is what the driver did to redrive one execution.
type RedriveLog struct {
	// Before is the execution as the operator found it, just before redriving.
	Before *RedriveSnapshot `json:"before,omitempty"`
	// Attempts are the redrive requests (Send 0, and 1 for the concurrent one); Outcome
	// is "redriven" for 200, and the execution_status a 409 names.
	Attempts []Attempt `json:"attempts,omitempty"`
	// Reopened is the wait as the redrive reopened it: its new deadlines. Nil when no
	// redrive took effect.
	Reopened *WaitInfo `json:"reopened,omitempty"`
	// Callback is the held-back callback: sent racing the redrive (Racing) and again
	// after it, the same body each time.
	Callback EventLog `json:"callback"`
	// Err says why the driver could not redrive.
	Err string `json:"err,omitempty"`
}

// RedriveSnapshot is a failed (or finished) execution and its wait before the redrive:
// what the first life of the wait ended with. The reopen resets the wait's timed-out
// events and deadlines, so this is the only record of them.
type RedriveSnapshot struct {
	At       time.Time    `json:"at"`
	Status   string       `json:"status"`
	WaitNode string       `json:"wait_node"`
	Wait     ObservedWait `json:"wait"`
}

// createOperatorToken makes the token the driver redrives with, as an admin would.
func (r *runner) createOperatorToken(ctx context.Context) error {
	body, _ := json.Marshal(map[string]any{"name": OperatorToken, "role": "operator"})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+r.cl.replicas[0].addr+"/api/v1/tokens", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.http.Do(req)
	if err != nil {
		return fmt.Errorf("create the operator token: %w", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var created struct {
		Token string `json:"token"`
	}
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(raw, &created) != nil || created.Token == "" {
		return fmt.Errorf("create the operator token: %d %s", resp.StatusCode, raw)
	}
	r.operatorToken = created.Token
	return nil
}

// redrive is the operator's part for one execution: once its wait has ended and the
// execution shows failed or completed, read it as it stands, redrive it (twice at once
// when planned, with the held-back callback racing when planned), read the reopened
// wait's deadlines and send the callback into it.
func (r *runner) redrive(e *execRun) {
	rd := e.plan.Redrive
	lg := &RedriveLog{}
	defer func() {
		e.mu.Lock()
		e.log.Redrive = lg
		e.mu.Unlock()
	}()
	e.mu.Lock()
	id := e.log.ID
	e.mu.Unlock()
	before, err := r.finished(id)
	if err != nil {
		lg.Err = err.Error()
		r.note("execution %d: not redriven: %v", e.plan.Index, err)
		return
	}
	lg.Before = before

	var payload []byte
	var headers http.Header
	if rd.HoldBack {
		payload, headers = r.callbackBody(e, before.Wait.CorrelationID)
		lg.Callback = EventLog{Name: EventAPI, Mode: "redrive", Payload: payload, Key: Key(payload)}
	}
	path := "/api/v1/executions/" + id.String() + "/redrive"
	var mu sync.Mutex
	var wg sync.WaitGroup
	sends := 1
	if rd.Concurrent {
		sends = 2
	}
	for s := range sends {
		wg.Go(func() {
			atts := r.redrivePost(s, rd.Replicas[s], path)
			mu.Lock()
			lg.Attempts = append(lg.Attempts, atts...)
			mu.Unlock()
		})
	}
	if rd.HoldBack && rd.Racing {
		wg.Go(func() {
			atts := r.post(0, rd.Replicas[1], "/api/internal/callbacks/chaos", payload, headers)
			mu.Lock()
			lg.Callback.Attempts = append(lg.Callback.Attempts, atts...)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.SortFunc(lg.Attempts, func(a, b Attempt) int { return a.Start.Compare(b.Start) })

	reopened, err := r.reopenedWait(id)
	if err != nil {
		lg.Err = err.Error()
		return
	}
	lg.Reopened = reopened
	if reopened == nil || !rd.HoldBack {
		return
	}
	// The callback the service was owed, sent again into the reopened wait (a producer
	// retrying): recorded now if the racing one was late, a duplicate if it was not.
	reopenedAt := reopened.Expires.Add(-e.def.Timeout)
	deadline := reopened.Deadlines[EventAPI]
	at := reopenedAt.Add(time.Duration(rd.Frac * float64(deadline.Sub(reopenedAt))))
	if !r.sleep(time.Until(at)) {
		return
	}
	lg.Callback.Planned = at
	atts := r.post(1, r.liveReplica(rd.Replicas[0]), "/api/internal/callbacks/chaos", payload, headers)
	lg.Callback.Attempts = append(lg.Callback.Attempts, atts...)
	r.delivered.Add(1)
}

// callbackBody is the callback of execution e's wait, as callback would send it.
func (r *runner) callbackBody(e *execRun, corr uuid.UUID) ([]byte, http.Header) {
	ep := e.plan.Events[slices.IndexFunc(e.plan.Events, func(ep EventPlan) bool { return ep.Name == EventAPI })]
	e.mu.Lock()
	body := map[string]any{"decision": "approved", "chaos": chaosBlock(e, corr, EventAPI)}
	execID := e.log.ID
	e.mu.Unlock()
	headers := http.Header{"Content-Type": {"application/json"}}
	if ep.IDsInHeaders {
		headers.Set("X-Execution-Id", execID.String())
		headers.Set("X-Correlation-Id", corr.String())
	} else {
		body["execution_id"], body["correlation_id"] = execID.String(), corr.String()
	}
	payload, _ := json.Marshal(body)
	return payload, headers
}

// finished waits until the execution is failed or completed, as an operator looking at
// the list would, and reads it with its wait. Faults may hold the sweeper back for a
// while; a database that is away is asked again.
func (r *runner) finished(id uuid.UUID) (*RedriveSnapshot, error) {
	deadline := time.Now().Add(2 * time.Minute)
	last := "not read"
	for time.Now().Before(deadline) {
		s, err := r.snapshot(id)
		switch {
		case err != nil:
			last = err.Error()
		case s.Status == "failed" || s.Status == "completed":
			return s, nil
		default:
			last = "status " + s.Status
		}
		if !r.sleep(250 * time.Millisecond) {
			break
		}
	}
	return nil, fmt.Errorf("the execution did not fail or complete within 2 minutes of its deadline (%s)", last)
}

func (r *runner) snapshot(id uuid.UUID) (*RedriveSnapshot, error) {
	ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
	defer cancel()
	s := &RedriveSnapshot{At: time.Now()}
	var received, timedOut []byte
	err := r.pool.QueryRow(ctx, `SELECT e.status, coalesce(n.status, ''), w.correlation_id, w.status, w.version,
			w.received_events, w.timed_out_events, w.resumed_at, coalesce(w.resumed_by, '')
		FROM executions e JOIN execution_wait_states w ON w.execution_id = e.id AND w.node_id = 'wait'
		LEFT JOIN node_executions n ON n.execution_id = e.id AND n.node_id = 'wait'
		WHERE e.id = $1`, id).Scan(&s.Status, &s.WaitNode, &s.Wait.CorrelationID, &s.Wait.Status, &s.Wait.Version,
		&received, &timedOut, &s.Wait.ResumedAt, &s.Wait.ResumedBy)
	if err != nil {
		return nil, err
	}
	s.Wait.ExecutionID = id
	if err := json.Unmarshal(received, &s.Wait.Received); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(timedOut, &s.Wait.TimedOut); err != nil {
		return nil, err
	}
	return s, nil
}

// reopenedWait reads the wait's deadlines once the redrive requests have their answers;
// nil when the execution was never redriven (only a redrive moves redrive_count).
func (r *runner) reopenedWait(id uuid.UUID) (*WaitInfo, error) {
	var lastErr error
	for range 60 {
		ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
		var count int
		var expected []byte
		w := WaitInfo{Deadlines: map[string]time.Time{}}
		err := r.pool.QueryRow(ctx, `SELECT e.redrive_count, w.correlation_id, w.created_at, w.expires_at, w.expected_events
			FROM executions e JOIN execution_wait_states w ON w.execution_id = e.id AND w.node_id = 'wait' WHERE e.id = $1`, id).
			Scan(&count, &w.CorrelationID, &w.Created, &w.Expires, &expected)
		cancel()
		if err == nil {
			if count == 0 {
				return nil, nil
			}
			var ev []expectedEvent
			if err := json.Unmarshal(expected, &ev); err != nil {
				return nil, err
			}
			for _, x := range ev {
				w.Deadlines[x.Name] = w.Expires
				if x.DeadlineAt != nil {
					w.Deadlines[x.Name] = *x.DeadlineAt
				}
			}
			return &w, nil
		}
		lastErr = err
		if !r.sleep(500 * time.Millisecond) {
			break
		}
	}
	return nil, fmt.Errorf("read the reopened wait: %w", lastErr)
}

// redrivePost sends one redrive until a definite answer (anything but a network error or
// a 5xx), moving to the next live replica after each failure, with the operator token. A
// retry after an answer that was lost may find the execution redriven by it: 409 naming
// its new status.
func (r *runner) redrivePost(s, replica int, path string) []Attempt {
	headers := http.Header{"Authorization": {"Bearer " + r.operatorToken}}
	return r.postUntilDefinite(s, replica, path, nil, headers, func(a *Attempt, body []byte) {
		switch a.Status {
		case http.StatusOK:
			a.Outcome = "redriven"
		case http.StatusConflict:
			var answer struct {
				Status string `json:"execution_status"`
			}
			_ = json.Unmarshal(body, &answer)
			a.Outcome = answer.Status
		default:
			a.Err = string(body)
		}
	})
}
