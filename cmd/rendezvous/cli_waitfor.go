package main

// --wait-for: a command that reads a status can wait for it, so that a script (or a
// person pasting the README) need not guess how long the service takes to get there.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rendezvous-run/rendezvous/vocab"
)

// waitPollInterval is how often --wait-for asks again. The API announces no status
// changes to its clients, so the command asks: a fifth of a second is quick for a person
// and a handful of indexed reads for the server.
const waitPollInterval = 200 * time.Millisecond

// The statuses --wait-for accepts, in the order the help lists them.
var (
	waitStatuses = []vocab.WaitStatus{
		vocab.WaitWaiting, vocab.WaitScheduled, vocab.WaitCompleted, vocab.WaitTimeout,
		vocab.WaitFailed, vocab.WaitCancelled, vocab.WaitResumed, vocab.WaitError,
	}
	executionStatuses = []vocab.ExecutionStatus{
		vocab.ExecRunning, vocab.ExecWaiting, vocab.ExecCompleted, vocab.ExecFailed, vocab.ExecCancelled,
	}
)

func statusList[S ~string](statuses []S) string {
	words := make([]string, len(statuses))
	for i, s := range statuses {
		words[i] = string(s)
	}
	return strings.Join(words, ", ")
}

// checkStatus refuses a --wait-for value that is not one of statuses.
func checkStatus[S ~string](want string, statuses []S) error {
	if want == "" || slices.Contains(statuses, S(want)) {
		return nil
	}
	return usagef("--wait-for: want one of %s, not %q", statusList(statuses), want)
}

// errStillWaiting is what poll's check returns while the status it waits for may still
// come: the text says where things stand, for the message when --timeout passes.
type errStillWaiting struct{ state string }

func (e errStillWaiting) Error() string { return e.state }

// poll calls check until it returns nil or an error other than errStillWaiting, or
// until --timeout has passed since the first call; the timeout's message says where
// things stood at the last answer.
func (cl *cli) poll(ctx context.Context, check func(context.Context) error) error {
	deadline, cancel := context.WithTimeout(ctx, cl.timeout)
	defer cancel()
	tick := time.NewTicker(waitPollInterval)
	defer tick.Stop()
	last := "no answer yet"
	gaveUp := func() error { return fmt.Errorf("gave up after %s (--timeout): %s", cl.timeout, last) }
	for {
		err := check(deadline)
		var still errStillWaiting
		waiting := errors.As(err, &still)
		if waiting {
			last = still.state
		}
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case deadline.Err() != nil:
			return gaveUp() // err is the request the deadline cut short
		case !waiting:
			return err
		}
		select {
		case <-deadline.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return gaveUp()
		case <-tick.C:
		}
	}
}
