package consumer

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// StallReason says why a partition cannot advance.
type StallReason string

// Why a partition stalls. Each is a value of the reason attribute of
// rendezvous.kafka.partition.stalled, which is reported for every reason (0 or 1) of
// every partition this member owns.
const (
	// StallDeadLetter: a poison record's dead-letter write fails (the dead-letter topic
	// is missing and cannot be created, the write is refused or times out).
	StallDeadLetter StallReason = "dead_letter_write_failed"
	// StallDatabase: applying the partition's records fails in PostgreSQL (unreachable,
	// refusing every statement).
	StallDatabase StallReason = "database_error"
	// StallSchemaRegistry: the schema registry cannot be asked for a record's schema
	// (unreachable, answering 5xx, refusing the credentials). The record is not poison;
	// the partition resumes from it once the registry answers.
	StallSchemaRegistry StallReason = "schema_registry_unavailable"
)

// stallReasons lists every StallReason, in the order the gauge reports them.
var stallReasons = []StallReason{StallDeadLetter, StallDatabase, StallSchemaRegistry}

// Stall describes a partition this member owns that cannot advance.
type Stall struct {
	Topic     string      `json:"topic"`
	Partition int32       `json:"partition"`
	Reason    StallReason `json:"reason"`
	// Since is when the partition last stopped advancing.
	Since time.Time `json:"since"`
	// Offset is the first record not applied: where the partition resumes.
	Offset int64 `json:"offset"`
	// Error is the last failure, as text.
	Error string `json:"error"`
}

// hold is why a partition's records from offset on were not handled in a poll.
type hold struct {
	offset int64
	reason StallReason
	err    error
}

// partitionProgress is what this member knows of one partition it owns.
type partitionProgress struct {
	// hwm is the high watermark of the last fetch; next is the first offset not yet
	// applied (handled or dead-lettered), known once a record was fetched.
	hwm, next int64
	nextKnown bool
	stall     *Stall
}

// progress tracks, per owned partition, how far it has been applied and whether it is
// stalled: the source of the lag and stalled gauges and of /readyz's stalled list. The
// lag is the high watermark less the first offset not yet applied, so records rewound
// after a failure count as lag until they are applied, whatever the fetch position.
type progress struct {
	mu    sync.Mutex
	parts map[tp]*partitionProgress
}

func newProgress() *progress { return &progress{parts: map[tp]*partitionProgress{}} }

func (p *progress) get(k tp) *partitionProgress {
	pp := p.parts[k]
	if pp == nil {
		pp = &partitionProgress{}
		p.parts[k] = pp
	}
	return pp
}

// fetched records a poll's high watermarks, and where a partition seen for the first
// time starts.
func (p *progress) fetched(fetches kgo.Fetches) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		if len(fp.Records) == 0 {
			return
		}
		pp := p.get(tp{fp.Topic, fp.Partition})
		pp.hwm = fp.HighWatermark
		if !pp.nextKnown {
			pp.next, pp.nextKnown = fp.Records[0].Offset, true
		}
	})
}

// settled records a poll's outcome: done holds each partition's last handled record,
// held the partitions stopped and why. A partition that handled records and was not held
// advanced, and is no longer stalled.
func (p *progress) settled(done map[tp]*kgo.Record, held map[tp]hold, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, r := range done {
		pp := p.get(k)
		pp.next, pp.nextKnown = r.Offset+1, true
		if _, ok := held[k]; !ok {
			pp.stall = nil
		}
	}
	for k, h := range held {
		pp := p.get(k)
		pp.next, pp.nextKnown = h.offset, true
		msg := ""
		if h.err != nil {
			msg = h.err.Error()
		}
		if pp.stall == nil || pp.stall.Reason != h.reason || pp.stall.Offset != h.offset {
			pp.stall = &Stall{Topic: k.topic, Partition: k.partition, Reason: h.reason, Since: now}
		}
		pp.stall.Offset, pp.stall.Error = h.offset, msg
	}
}

// forget drops partitions this member no longer owns (nil: all of them).
func (p *progress) forget(partitions map[string][]int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if partitions == nil {
		clear(p.parts)
		return
	}
	for topic, ps := range partitions {
		for _, part := range ps {
			delete(p.parts, tp{topic, part})
		}
	}
}

// stalls lists the stalled partitions, by topic and partition.
func (p *progress) stalls() []Stall {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Stall
	for _, pp := range p.parts {
		if pp.stall != nil {
			out = append(out, *pp.stall)
		}
	}
	slices.SortFunc(out, func(a, b Stall) int {
		return cmp.Or(strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return out
}

// each calls fn with every known partition's lag and stall reason ("" when advancing).
func (p *progress) each(fn func(k tp, lag int64, stalled StallReason)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, pp := range p.parts {
		var reason StallReason
		if pp.stall != nil {
			reason = pp.stall.Reason
		}
		lag := int64(0)
		if pp.nextKnown {
			lag = max(pp.hwm-pp.next, 0)
		}
		fn(k, lag, reason)
	}
}
