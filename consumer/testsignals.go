package consumer

import "github.com/rendezvous-run/rendezvous/internal/testsignal"

// TopicPartition names one partition of a topic.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// TestSignals are the internal steps of the consumer that a test may wait for exactly
// (Config.TestSignals); inert unless a test initialises them.
type TestSignals struct {
	// Committed: per partition, the offset last committed for the group — the next
	// record it will read, Kafka's convention — set once the commit succeeded. Every
	// poll commits, so it keeps the latest value rather than a queue of commits.
	Committed testsignal.Marks[TopicPartition]
}
