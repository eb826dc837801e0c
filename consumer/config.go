package consumer

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/rendezvous-run/rendezvous/wireformat"
)

// Defaults for Config.
const (
	GroupDefault          = "rendezvous"
	DLQSuffixDefault      = ".dlq"
	MaxRecordBytesDefault = 1 << 20
	MaxPollRecordsDefault = 4000
	BatchSizeDefault      = 1000
	LanesDefault          = 4
	TopicRefreshDefault   = 5 * time.Second
	BackoffMinDefault     = 100 * time.Millisecond
	BackoffMaxDefault     = 10 * time.Second
	EventsTopicDefault    = "rendezvous.events"
	SessionTimeoutDefault = 45 * time.Second
	// DLQWriteTimeoutDefault bounds one dead-letter write; see Config.DLQWriteTimeout.
	DLQWriteTimeoutDefault = 5 * time.Second
	// DLQReplicationFactorMax caps the replication factor chosen for a dead-letter topic
	// when none is configured: min(3, brokers), Kafka's usual production setting.
	DLQReplicationFactorMax = 3
)

// Config configures a Consumer.
type Config struct {
	// Brokers are the seed brokers. Required.
	Brokers []string
	// Group is the consumer group every replica joins. Default GroupDefault.
	Group string
	// ClientID is this replica's client id (the instance id). Required.
	ClientID string
	// Topics are consumed in addition to the Kafka topics of stored definitions.
	Topics []string
	// EventsTopic carries events sent to an execution by type, the Kafka form of POST
	// /api/v1/executions/{id}/events: each record a JSON object {"execution_id", "type",
	// "payload", "id"}. It is always consumed, and its records are read only as such
	// (a definition naming it as the topic of a Kafka event never receives them). Default
	// EventsTopicDefault.
	EventsTopic string
	// DLQSuffix names a topic's dead-letter topic: <topic><suffix>. Default
	// DLQSuffixDefault.
	DLQSuffix string
	// SkipDLQTopicCreation turns off the creation of dead-letter topics, for clusters
	// where topics are provisioned by other means. By default (false) the consumer makes
	// sure <topic><suffix> exists for every topic it consumes, creating it through the
	// admin API with the source topic's partition count, before a poison record needs
	// it: a missing dead-letter topic stops its partition at the first poison record.
	SkipDLQTopicCreation bool
	// DLQReplicationFactor is the replication factor of the dead-letter topics the
	// consumer creates. Default 0: min(DLQReplicationFactorMax, brokers in the cluster).
	DLQReplicationFactor int
	// DLQWriteTimeout bounds one attempt to write a batch's dead letters. A write that has
	// not succeeded by then fails: its partition is rewound and retried after a backoff,
	// like a database failure, instead of holding its lane (and every partition in it)
	// for as long as the Kafka client keeps retrying. Default DLQWriteTimeoutDefault.
	DLQWriteTimeout time.Duration
	// MaxRecordBytes: a larger record value is poison. Default MaxRecordBytesDefault.
	MaxRecordBytes int
	// MaxPollRecords bounds one poll, which takes more of what is already buffered, up
	// to 2 × Lanes × MaxPollRecords, while it holds fewer than two partitions a lane
	// (see widen). Default MaxPollRecordsDefault.
	MaxPollRecords int
	// BatchSize bounds the records applied in one database transaction. Default
	// BatchSizeDefault.
	BatchSize int
	// Lanes is how many groups of partitions are applied side by side, each in its own
	// transactions. Default LanesDefault.
	Lanes int
	// SessionTimeout is how long the broker keeps a member that stopped heartbeating (a
	// replica killed without leaving the group) before handing its partitions to the
	// others. Their records wait that long, and, once a rebalance has begun, so does every
	// partition of the group: the broker waits for each member to rejoin. Brokers accept
	// 6 s to 30 min unless configured otherwise. Default SessionTimeoutDefault, the Kafka
	// client's.
	SessionTimeout time.Duration
	// TopicRefresh is how often stored definitions are re-read for new topics (a
	// definition stored through this replica is picked up at once). Default
	// TopicRefreshDefault.
	TopicRefresh time.Duration
	// BackoffMin and BackoffMax bound the pause of partitions whose records could not
	// be applied (database unavailable, dead-letter write failed). Defaults
	// BackoffMinDefault and BackoffMaxDefault.
	BackoffMin time.Duration
	BackoffMax time.Duration
	// SASLMechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; empty disables SASL.
	SASLMechanism string
	SASLUser      string
	SASLPassword  string
	// TLS enables TLS to the brokers; TLSCAFile adds a CA bundle; TLSInsecure skips
	// verification (for tests only).
	TLS         bool
	TLSCAFile   string
	TLSInsecure bool
	// SchemaRegistry is where the schemas of records in the schema registry wire format
	// (Avro, Protobuf, JSON Schema) are read. Without URLs, such a record is
	// dead-lettered as schema_unknown. Its MeterProvider is the consumer's.
	SchemaRegistry wireformat.Config
	// AllowAutoTopicCreation lets the client create missing topics (the embedded dev
	// broker); production clusters should create topics deliberately.
	AllowAutoTopicCreation bool
	// Starter starts the executions of stored definitions' triggers (the executor).
	// Without it, triggers are not consumed.
	Starter Starter
	// Definitions tells when a definition was stored through this process (the
	// executor), so that its topics are read at once rather than at the next
	// TopicRefresh. Optional.
	Definitions Definitions
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// TestSignals: steps tests wait for; inert in production.
	TestSignals TestSignals
	// TracerProvider receives the Kafka client's spans: a publish span per dead letter.
	// A fetched record gets no span of its own: the event it carries is traced in its
	// wait's trace, linked to the producer's span. Default: a no-op provider.
	TracerProvider trace.TracerProvider
	// MeterProvider receives the consumer's metrics (lag, dead letters, database errors)
	// and the Kafka client's. Default: a no-op provider.
	MeterProvider metric.MeterProvider
	// Propagator reads the trace context a record's headers announce and writes it on
	// dead letters. Default: W3C TraceContext.
	Propagator propagation.TextMapPropagator
	// Hooks are more hooks of the Kafka client, after the consumer's own instruments:
	// a way to observe its records as it buffers and hands them over (the bench times
	// the client's buffer with one). Optional.
	Hooks []kgo.Hook
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Group == "" {
		c.Group = GroupDefault
	}
	if c.EventsTopic == "" {
		c.EventsTopic = EventsTopicDefault
	}
	if c.DLQSuffix == "" {
		c.DLQSuffix = DLQSuffixDefault
	}
	if c.DLQWriteTimeout <= 0 {
		c.DLQWriteTimeout = DLQWriteTimeoutDefault
	}
	if c.MaxRecordBytes <= 0 {
		c.MaxRecordBytes = MaxRecordBytesDefault
	}
	if c.MaxPollRecords <= 0 {
		c.MaxPollRecords = MaxPollRecordsDefault
	}
	if c.BatchSize <= 0 {
		c.BatchSize = BatchSizeDefault
	}
	if c.Lanes <= 0 {
		c.Lanes = LanesDefault
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = SessionTimeoutDefault
	}
	if c.TopicRefresh <= 0 {
		c.TopicRefresh = TopicRefreshDefault
	}
	if c.BackoffMin <= 0 {
		c.BackoffMin = BackoffMinDefault
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = BackoffMaxDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = tracenoop.NewTracerProvider()
	}
	if c.MeterProvider == nil {
		c.MeterProvider = metricnoop.NewMeterProvider()
	}
	if c.Propagator == nil {
		c.Propagator = propagation.TraceContext{}
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("kafka.brokers: must not be empty"))
	}
	if c.ClientID == "" {
		errs = append(errs, errors.New("kafka.client_id: must not be empty"))
	}
	switch strings.ToUpper(c.SASLMechanism) {
	case "", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
	default:
		errs = append(errs, fmt.Errorf("kafka.sasl_mechanism: %q is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", c.SASLMechanism))
	}
	if c.DLQReplicationFactor < 0 || c.DLQReplicationFactor > 32767 {
		errs = append(errs, fmt.Errorf("kafka.dlq_replication_factor: %d is not between 1 and 32767 (0: min(3, brokers))", c.DLQReplicationFactor))
	}
	if c.SASLMechanism != "" && c.SASLUser == "" {
		errs = append(errs, errors.New("kafka.sasl_user: required with a SASL mechanism"))
	}
	return errors.Join(errs...)
}

// clientOpts are the connection options shared by the consumer and its producer.
func (c Config) clientOpts() ([]kgo.Opt, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...), kgo.ClientID(c.ClientID)}
	if c.AllowAutoTopicCreation {
		opts = append(opts, kgo.AllowAutoTopicCreation())
	}
	var mech sasl.Mechanism
	switch strings.ToUpper(c.SASLMechanism) {
	case "PLAIN":
		mech = plain.Auth{User: c.SASLUser, Pass: c.SASLPassword}.AsMechanism()
	case "SCRAM-SHA-256":
		mech = scram.Auth{User: c.SASLUser, Pass: c.SASLPassword}.AsSha256Mechanism()
	case "SCRAM-SHA-512":
		mech = scram.Auth{User: c.SASLUser, Pass: c.SASLPassword}.AsSha512Mechanism()
	}
	if mech != nil {
		opts = append(opts, kgo.SASL(mech))
	}
	if c.TLS || c.TLSCAFile != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.TLSInsecure} //nolint:gosec // opt-in for tests
		if c.TLSCAFile != "" {
			pem, err := os.ReadFile(c.TLSCAFile)
			if err != nil {
				return nil, fmt.Errorf("kafka.tls_ca_file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, errors.New("kafka.tls_ca_file: no certificates found")
			}
			tc.RootCAs = pool
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	return opts, nil
}
