package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/rendezvous-run/rendezvous/server"
)

// slowestShutdownStage reads a replica's log and says which stage of its last shutdown
// took longest, and within it which loop, from the lines serve logs as it stops
// (server.LogShutdownStage): a SIGTERM exit that takes long is so explained in the report
// rather than only measured. A shutdown that never stopped (the replica was killed at
// the end of its grace period) is told by the last stage it finished: the one after it
// held the exit. It is empty when the log holds no shutdown.
func slowestShutdownStage(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	type stage struct {
		name  string
		took  time.Duration
		loops map[string]time.Duration
	}
	var last []stage
	var began, stopped bool
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		var l struct {
			Msg      string                   `json:"msg"`
			Stage    string                   `json:"stage"`
			Duration time.Duration            `json:"duration"`
			Loops    map[string]time.Duration `json:"loops"`
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue
		}
		switch l.Msg {
		case server.LogShuttingDown:
			last, began, stopped = nil, true, false
		case server.LogShutdownStage:
			last = append(last, stage{l.Stage, l.Duration, l.Loops})
		case server.LogStopped:
			stopped = true
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	switch {
	case !began:
		return "", nil
	case !stopped && len(last) == 0:
		return "unfinished, no stage done", nil
	case !stopped:
		return "unfinished after " + last[len(last)-1].name, nil
	case len(last) == 0:
		return "", nil
	}
	slowest := last[0]
	for _, s := range last[1:] {
		if s.took > slowest.took {
			slowest = s
		}
	}
	out := fmt.Sprintf("slowest %s %.1fs", slowest.name, slowest.took.Seconds())
	var loop string
	var took time.Duration
	for name, d := range slowest.loops {
		if d > took || (d == took && name < loop) {
			loop, took = name, d
		}
	}
	if loop != "" {
		out += fmt.Sprintf(", %s %.1fs", loop, took.Seconds())
	}
	return out, nil
}
