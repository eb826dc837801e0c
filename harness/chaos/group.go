package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// GroupSample is the consumer group as the broker described it at one moment.
type GroupSample struct {
	At      time.Time     `json:"at"`
	State   string        `json:"state"`
	Members []GroupMember `json:"members"`
}

// GroupMember is one member of the consumer group; ClientID is the replica's instance id.
// Partitions are its partitions of Topic, Sent those of SentTopic.
type GroupMember struct {
	ClientID   string  `json:"client_id"`
	MemberID   string  `json:"member_id"`
	Partitions []int32 `json:"partitions"`
	Sent       []int32 `json:"sent_partitions"`
}

func (s GroupSample) key() string {
	var b strings.Builder
	b.WriteString(s.State)
	for _, m := range s.Members {
		fmt.Fprintf(&b, "|%s/%s:%v%v", m.ClientID, m.MemberID, m.Partitions, m.Sent)
	}
	return b.String()
}

// GroupStats summarises how the consumer group fared.
type GroupStats struct {
	// Changes counts the samples whose state or membership differed from the one before.
	Changes int `json:"changes"`
	// Unstable is the time the group spent outside Stable; Longest the longest stretch.
	Unstable time.Duration `json:"unstable_ns"`
	Longest  time.Duration `json:"longest_unstable_ns"`
	// Final is the last sample.
	Final GroupSample `json:"final"`
}

// watchGroup samples the consumer group every interval until stop closes, keeping each
// sample that differs from the one before.
func (r *runner) watchGroup(stop <-chan struct{}, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var last string
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s, err := r.cl.sampleGroup(ctx)
		cancel()
		if err != nil {
			s = GroupSample{At: time.Now(), State: "unknown: " + err.Error()}
		}
		key := s.key()
		r.mu.Lock()
		if key != last {
			r.group = append(r.group, s)
			last = key
		}
		r.lastGroup = s
		r.mu.Unlock()
		if err == nil {
			r.evictZombies(s)
		}
	}
}

func (c *cluster) sampleGroup(ctx context.Context) (GroupSample, error) {
	groups, err := c.adm.DescribeGroups(ctx, c.group)
	if err != nil {
		return GroupSample{}, err
	}
	g, ok := groups[c.group]
	if !ok || g.Err != nil {
		return GroupSample{}, fmt.Errorf("describe group %s: %v", c.group, g.Err)
	}
	s := GroupSample{At: time.Now(), State: g.State}
	for _, m := range g.Members {
		gm := GroupMember{ClientID: m.ClientID, MemberID: m.MemberID, Partitions: []int32{}, Sent: []int32{}}
		if a, ok := m.Assigned.AsConsumer(); ok {
			for _, t := range a.Topics {
				switch t.Topic {
				case Topic:
					gm.Partitions = append(gm.Partitions, t.Partitions...)
				case SentTopic:
					gm.Sent = append(gm.Sent, t.Partitions...)
				}
			}
		}
		slices.Sort(gm.Partitions)
		slices.Sort(gm.Sent)
		s.Members = append(s.Members, gm)
	}
	slices.SortFunc(s.Members, func(a, b GroupMember) int { return strings.Compare(a.ClientID+a.MemberID, b.ClientID+b.MemberID) })
	return s, nil
}

// membersOf returns the member ids of the replica with this client id.
func (s GroupSample) membersOf(clientID string) []string {
	var out []string
	for _, m := range s.Members {
		if m.ClientID == clientID {
			out = append(out, m.MemberID)
		}
	}
	return out
}

// evictMargin is how long past the replicas' session timeout a dead member still in the
// group is evicted by the driver: by then a broker must have dropped it.
const evictMargin = 10 * time.Second

// Eviction is a dead member the broker kept past its session timeout, which the driver
// removed with a LeaveGroup naming it — as the session timeout should have.
type Eviction struct {
	ClientID   string    `json:"client_id"`
	MemberID   string    `json:"member_id"`
	Partitions []int32   `json:"partitions"`
	DiedAt     time.Time `json:"died_at"`
	EvictedAt  time.Time `json:"evicted_at"`
	Err        string    `json:"err,omitempty"`
}

// evictZombies removes dead members that outlived their session in the latest sample.
// The embedded broker (kfake) never expires a member whose process died while its first
// JoinGroup was pending: the member is added without a session timer, and the timer is
// only started when the join response is delivered — which a dead connection never
// takes. Such a member stays in a Stable group holding partitions nobody consumes. Real
// Kafka expires it after the session timeout; the driver does the same, says so in the
// report, and the records on those partitions are then consumed by the live replicas.
func (r *runner) evictZombies(s GroupSample) {
	r.mu.Lock()
	var due []Eviction
	for _, d := range r.dead {
		if time.Since(d.At) < r.cfg.SessionTimeout+evictMargin || slices.ContainsFunc(r.evicted, func(e Eviction) bool { return e.MemberID == d.MemberID }) {
			continue
		}
		for _, m := range s.Members {
			if m.MemberID == d.MemberID {
				due = append(due, Eviction{ClientID: m.ClientID, MemberID: m.MemberID, Partitions: m.Partitions, DiedAt: d.At})
			}
		}
	}
	r.mu.Unlock()
	for _, e := range due {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := r.cl.leaveGroup(ctx, e.MemberID)
		cancel()
		e.EvictedAt = time.Now()
		if err != nil {
			e.Err = err.Error()
		}
		r.mu.Lock()
		r.evicted = append(r.evicted, e)
		r.mu.Unlock()
		r.note("the broker kept dead member %s (%s, partitions %v) %.0fs after it died; evicted it: %v",
			e.MemberID, e.ClientID, e.Partitions, e.EvictedAt.Sub(e.DiedAt).Seconds(), errOrOK(err))
	}
}

func errOrOK(err error) string {
	if err != nil {
		return err.Error()
	}
	return "ok"
}

// leaveGroup removes a member from the group by id (LeaveGroup v3+).
func (c *cluster) leaveGroup(ctx context.Context, memberID string) error {
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = c.group
	m := kmsg.NewLeaveGroupRequestMember()
	m.MemberID = memberID
	req.Members = append(req.Members, m)
	resp, err := req.RequestWith(ctx, c.admCl)
	if err != nil {
		return err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return err
	}
	for _, rm := range resp.Members {
		if err := kerr.ErrorForCode(rm.ErrorCode); err != nil {
			return err
		}
	}
	return nil
}

// sampleInterval is how often the group is described.
const sampleInterval = 500 * time.Millisecond

// DeadMember is a group member whose process was killed (or did not leave the group
// when stopped): its partitions wait until the group evicts it.
type DeadMember struct {
	MemberID string    `json:"member_id"`
	At       time.Time `json:"at"`
}

// disturbances derives, from what the run observed, when Kafka delivery to which
// partitions was not bounded by Config.KafkaLatency: every partition while the group
// was not Stable (and a settling time after), the partitions of a dead member until the
// group evicted it, and every partition during a database outage (consumers pause
// failing partitions with a backoff of up to 10 s).
func disturbances(log RunLog) []Interval {
	var out []Interval
	for _, f := range log.Faults {
		if f.Kind == FaultDatabase {
			out = append(out, Interval{From: f.Start, To: f.End.Add(10*time.Second + settle), Reason: "database outage"})
		}
	}
	for i, s := range log.Group {
		next := log.End
		if i+1 < len(log.Group) {
			next = log.Group[i+1].At
		}
		if s.State != "Stable" {
			out = append(out, Interval{From: s.At.Add(-sampleInterval), To: next.Add(settle), Reason: "consumer group " + s.State})
		}
		for _, d := range log.Dead {
			for _, m := range s.Members {
				if m.MemberID == d.MemberID && next.After(d.At) {
					out = append(out, Interval{From: maxTime(d.At, s.At), To: next.Add(sampleInterval + settle), Partitions: m.Partitions,
						Sent: m.Sent, Reason: "partitions of a dead member " + m.ClientID})
				}
			}
		}
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// groupStats derives the summary from the kept samples; until is the end of the run.
func groupStats(samples []GroupSample, final GroupSample, until time.Time) GroupStats {
	st := GroupStats{Final: final}
	if len(samples) == 0 {
		return st
	}
	st.Changes = len(samples) - 1
	var since time.Time
	for i, s := range samples {
		stable := s.State == "Stable"
		switch {
		case !stable && since.IsZero():
			since = s.At
		case stable && !since.IsZero():
			d := s.At.Sub(since)
			st.Unstable += d
			st.Longest = max(st.Longest, d)
			since = time.Time{}
		}
		if i == len(samples)-1 && !since.IsZero() {
			d := until.Sub(since)
			st.Unstable += d
			st.Longest = max(st.Longest, d)
		}
	}
	return st
}
