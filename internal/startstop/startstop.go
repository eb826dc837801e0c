// Package startstop gives every background loop of a rendezvous process one lifecycle:
// Start runs it in a goroutine of its own, Started is closed once it runs, Stop ends it
// and returns when it has returned. The service starts its loops (the sweeper, the
// janitor, the executor's workers, outbox, notifier, listener and retention, the Kafka
// consumer) through this one interface and stops them in the order shutdown needs,
// instead of each loop's owner inventing its own goroutine, context and done channel.
//
// It owns the lifecycle only; what a loop does, and how it drains its work when its
// context ends, is the loop's.
package startstop

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Service is a background loop.
type Service interface {
	// Name says what the loop is, for logs.
	Name() string
	// Start runs the loop until ctx ends or Stop is called. Starting a loop twice is an
	// error.
	Start(ctx context.Context) error
	// Started is closed once the loop runs.
	Started() <-chan struct{}
	// Stop ends the loop and waits for it to return; it does nothing to a loop never
	// started, and may be called more than once.
	Stop()
}

// ErrStarted is returned by Start on a loop already started.
var ErrStarted = errors.New("startstop: already started")

// Loop is a Service that runs one function until its context ends.
type Loop struct {
	name string
	run  func(ctx context.Context)

	mu      sync.Mutex
	cancel  context.CancelFunc
	started chan struct{}
	done    chan struct{}
}

// NewLoop returns a Loop named name that runs run; run must return once its context
// ends.
func NewLoop(name string, run func(ctx context.Context)) *Loop {
	return &Loop{name: name, run: run, started: make(chan struct{})}
}

// Name implements Service.
func (l *Loop) Name() string { return l.name }

// Start implements Service.
func (l *Loop) Start(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done != nil {
		return ErrStarted
	}
	ctx, l.cancel = context.WithCancel(ctx)
	l.done = make(chan struct{})
	done := l.done
	go func() {
		defer close(done)
		close(l.started)
		l.run(ctx)
	}()
	return nil
}

// Started implements Service.
func (l *Loop) Started() <-chan struct{} { return l.started }

// Stop implements Service.
func (l *Loop) Stop() {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if done == nil {
		return
	}
	cancel()
	<-done
}

// Every returns a loop body that calls round after first, then every interval, until
// its context ends: the shape of the periodic maintenance loops (the janitor, the
// retention pass). A round that overruns the interval delays the next one; rounds never
// overlap.
func Every(first, interval time.Duration, round func(ctx context.Context)) func(ctx context.Context) {
	return func(ctx context.Context) {
		t := time.NewTimer(first)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			round(ctx)
			t.Reset(interval)
		}
	}
}

// StartAll starts services in order; should one fail to start, the ones started are
// stopped again and its error returned.
func StartAll(ctx context.Context, services ...Service) error {
	for i, s := range services {
		if err := s.Start(ctx); err != nil {
			StopAll(services[:i]...)
			return err
		}
	}
	return nil
}

// StopAll stops services together — each drains its own work meanwhile, so the slowest
// bounds the whole — and returns once every one has returned, with how long each took,
// in the order given: a shutdown that outlasts its grace period is told by which loop
// held it. Where one must end before another (the Kafka consumer before the executor),
// call StopAll once for each.
func StopAll(services ...Service) []Stopped {
	stopped := make([]Stopped, len(services))
	var wg sync.WaitGroup
	for i, s := range services {
		wg.Go(func() {
			start := time.Now()
			s.Stop()
			stopped[i] = Stopped{Name: s.Name(), Took: time.Since(start)}
		})
	}
	wg.Wait()
	return stopped
}

// Stopped is how long one service took to stop.
type Stopped struct {
	Name string
	Took time.Duration
}
