package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/rendezvous-run/rendezvous/consumer"
)

// dlq runs `rendezvous dlq replay`: the consumer's dead-letter topics are Kafka's, so
// draining one back talks to the brokers, not to the HTTP API.
func dlq(ctx context.Context, args []string, stdout io.Writer) error {
	// replay is the one subcommand; "dlq -h" shows its flags.
	if len(args) > 0 && args[0] == "replay" {
		args = args[1:]
	} else if len(args) == 0 || (args[0] != "-h" && args[0] != "--help") {
		return errors.New(`usage: rendezvous dlq replay --topic TOPIC.dlq [--since 2h|RFC3339] [--dry-run] [--kafka-brokers …]`)
	}
	cfg, err := dlqReplayOptions(args, stdout)
	if err != nil {
		return err
	}
	rep, err := consumer.ReplayDeadLetters(ctx, cfg)
	verb := "replayed"
	if cfg.DryRun {
		verb = "would replay"
	}
	for _, r := range rep.Records {
		from := fmt.Sprintf("%s/%d/%d", cfg.Topic, r.Partition, r.Offset)
		if r.Skipped != "" {
			fmt.Fprintf(stdout, "skipped       %s: %s\n", from, r.Skipped)
			continue
		}
		fmt.Fprintf(stdout, "%-13s %s -> %s (dead-lettered %s: %s)\n", verb, from, r.SourceTopic,
			r.Timestamp.UTC().Format(time.RFC3339), r.Reason)
	}
	fmt.Fprintf(stdout, "%s %d records of %s, skipped %d\n", verb, rep.Replayed, cfg.Topic, rep.Skipped)
	return err
}

// dlqReplayOptions reads the flags of dlq replay: what to replay, and how to reach the
// brokers (the serve command's Kafka connection options).
func dlqReplayOptions(args []string, help io.Writer) (consumer.ReplayConfig, error) {
	var cfg consumer.ReplayConfig
	var since string
	o := newOptions("dlq replay")
	o.help = help
	o.summary = `Re-produces the records of a dead-letter topic to the topic each came from, once the
cause is fixed, and reports how many it replayed and skipped.`
	o.examples = []string{"rendezvous dlq replay --topic shipments.events.dlq --since 2h --kafka-brokers 127.0.0.1:9092 --dry-run"}
	o.String(&cfg.Topic, "topic", "", "", "the dead-letter topic to drain, e.g. shipments.events.dlq (required)")
	o.String(&since, "since", "", "", "only records dead-lettered since: a duration back from now (2h) or an RFC 3339 time")
	o.Bool(&cfg.DryRun, "dry-run", "", false, "print what would be replayed; produce nothing")
	o.Duration(&cfg.Timeout, "timeout", "", time.Minute, "give up after this long")
	o.Strings(&cfg.Kafka.Brokers, "kafka-brokers", "KAFKA_BROKERS", "Kafka seed brokers (required)")
	o.String(&cfg.Kafka.SASLMechanism, "kafka-sasl-mechanism", "RENDEZVOUS_KAFKA_SASL_MECHANISM", "", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
	o.String(&cfg.Kafka.SASLUser, "kafka-sasl-user", "RENDEZVOUS_KAFKA_SASL_USER", "", "SASL user")
	o.String(&cfg.Kafka.SASLPassword, "kafka-sasl-password", "RENDEZVOUS_KAFKA_SASL_PASSWORD", "", "SASL password")
	o.Bool(&cfg.Kafka.TLS, "kafka-tls", "RENDEZVOUS_KAFKA_TLS", false, "connect to the brokers with TLS")
	o.String(&cfg.Kafka.TLSCAFile, "kafka-tls-ca-file", "RENDEZVOUS_KAFKA_TLS_CA_FILE", "", "PEM CA bundle for the brokers' certificates")
	if err := o.parse(args); err != nil {
		return cfg, err
	}
	if cfg.Topic == "" {
		return cfg, errors.New("--topic: required")
	}
	if len(cfg.Kafka.Brokers) == 0 {
		return cfg, errors.New("--kafka-brokers: required")
	}
	if since != "" {
		if d, err := parseDuration(since); err == nil && d > 0 {
			cfg.Since = time.Now().Add(-d)
		} else if t, err := time.Parse(time.RFC3339, since); err == nil {
			cfg.Since = t
		} else {
			return cfg, fmt.Errorf("--since: %q is neither a duration (2h, PT2H, \"2 hours\") nor an RFC 3339 time", since)
		}
	}
	return cfg, nil
}
