package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Triggered executions: besides the planned executions, which the driver starts over
// HTTP, a stream of records on TriggerTopic starts executions of TriggerWorkflow through
// its Kafka trigger, across the same kills, rebalances and database faults. Every third
// record is produced a second time, later, with the same dedupe key. The promise checked:
// each key acknowledged by the broker started exactly one execution, which completed;
// a key whose produce was never acknowledged started at most one.
const (
	TriggerTopic    = "chaos.triggers"
	TriggerWorkflow = "chaos-trigger"
	// InvTriggered is the triggers' invariant.
	InvTriggered = "one execution per trigger key"
)

// TriggerLog is what the driver did with one trigger key.
type TriggerLog struct {
	Key      int `json:"key"`
	Produced int `json:"produced"`
	Acked    int `json:"acked"`
}

// ObservedTrigger is what the database holds for one trigger key.
type ObservedTrigger struct {
	Executions int
	Completed  int
}

// triggerCount is how many keys a run's trigger stream produces.
func triggerCount(cfg Config) int { return max(20, cfg.Executions/20) }

// triggerDefinition is TriggerWorkflow: started by records of TriggerTopic of type start,
// deduplicated by their key, it pauses briefly and completes.
func triggerDefinition() []byte {
	raw, _ := json.Marshal(map[string]any{
		"name":  TriggerWorkflow,
		"nodes": []any{map[string]any{"id": "pause", "type": "wait", "data": map[string]any{"for": "100ms"}}},
		"triggers": []any{map[string]any{
			"topic": TriggerTopic, "type": "start", "input": map[string]any{"key": "value.key"}, "dedupeKey": "value.key",
		}},
	})
	return raw
}

// putTriggerDefinition stores TriggerWorkflow through the first replica.
func (r *runner) putTriggerDefinition(ctx context.Context) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+r.cl.replicas[0].addr+"/api/v1/workflows/"+TriggerWorkflow,
		bytes.NewReader(triggerDefinition()))
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.http.Do(req)
	if err != nil {
		return fmt.Errorf("store definition %s: %w", TriggerWorkflow, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("store definition %s: %d %s", TriggerWorkflow, resp.StatusCode, body)
	}
	return nil
}

// driveTriggers schedules the trigger stream over the plan's spread: key i at its share
// of the spread, and every third key once more, a fifth of the spread later.
func (r *runner) driveTriggers() {
	n := triggerCount(r.cfg)
	r.triggers = make([]TriggerLog, n)
	for i := range n {
		r.triggers[i].Key = i
		at := r.t0.Add(r.plan.Spread * time.Duration(i) / time.Duration(n))
		r.at(at, func() { r.produceTrigger(i) })
		if i%3 == 0 {
			r.at(at.Add(r.plan.Spread/5), func() { r.produceTrigger(i) })
		}
	}
}

func (r *runner) produceTrigger(key int) {
	value, _ := json.Marshal(map[string]any{"type": "start", "key": key})
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	err := r.prod.ProduceSync(ctx, &kgo.Record{Topic: TriggerTopic, Value: value}).FirstErr()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.triggers[key].Produced++
	if err == nil {
		r.triggers[key].Acked++
	}
}

// collectTriggers reads, per trigger key, the executions it started.
func collectTriggers(ctx context.Context, pool *pgxpool.Pool) (map[int]ObservedTrigger, error) {
	rows, err := pool.Query(ctx, `SELECT (input->>'key')::int, count(*), count(*) FILTER (WHERE status = 'completed')
		FROM executions WHERE workflow_name = $1 GROUP BY 1`, TriggerWorkflow)
	if err != nil {
		return nil, fmt.Errorf("read triggered executions: %w", err)
	}
	defer rows.Close()
	out := map[int]ObservedTrigger{}
	for rows.Next() {
		var k int
		var o ObservedTrigger
		if err := rows.Scan(&k, &o.Executions, &o.Completed); err != nil {
			return nil, fmt.Errorf("read triggered executions: %w", err)
		}
		out[k] = o
	}
	return out, rows.Err()
}

// triggered checks the trigger stream: an acknowledged key started exactly one
// execution, which completed; an unacknowledged one at most one; no other key started
// anything.
func (c *checker) triggered() {
	produced := map[int]bool{}
	for _, tl := range c.log.Triggers {
		produced[tl.Key] = true
		o := c.obs.Triggered[tl.Key]
		c.checked(InvTriggered, 1)
		c.report.Triggers.Records += tl.Produced
		c.report.Triggers.Executions += o.Executions
		switch {
		case o.Executions > 1:
			c.violate(InvTriggered, -1, uuid.Nil, "trigger key %d (produced %d times) started %d executions", tl.Key, tl.Produced, o.Executions)
		case tl.Acked > 0 && o.Executions == 0:
			c.violate(InvTriggered, -1, uuid.Nil, "trigger key %d was acknowledged %d times and started nothing", tl.Key, tl.Acked)
		case o.Executions == 1 && o.Completed != 1:
			c.violate(InvTriggered, -1, uuid.Nil, "the execution trigger key %d started did not complete", tl.Key)
		}
	}
	for k, o := range c.obs.Triggered {
		if !produced[k] {
			c.violate(InvTriggered, -1, uuid.Nil, "trigger key %d was never produced, yet started %d executions", k, o.Executions)
		}
	}
}
