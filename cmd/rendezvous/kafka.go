package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/rendezvous-run/rendezvous/consumer"
	"github.com/rendezvous-run/rendezvous/examples"
	"github.com/rendezvous-run/rendezvous/internal/gctune"
	"github.com/rendezvous-run/rendezvous/server"
	"github.com/rendezvous-run/rendezvous/wireformat"
)

// bindKafka binds the Kafka options onto cfg; the function it returns finishes the
// conversions after parsing.
func bindKafka(o *options, cfg *consumer.Config) (after func()) {
	o.Strings(&cfg.Brokers, "kafka-brokers", "KAFKA_BROKERS", "Kafka seed brokers; empty disables the consumer")
	o.String(&cfg.Group, "kafka-group", "RENDEZVOUS_KAFKA_GROUP", consumer.GroupDefault, "consumer group shared by all replicas")
	o.Strings(&cfg.Topics, "kafka-topics", "RENDEZVOUS_KAFKA_TOPICS", "topics consumed besides those of stored definitions")
	o.String(&cfg.EventsTopic, "kafka-events-topic", "RENDEZVOUS_KAFKA_EVENTS_TOPIC", consumer.EventsTopicDefault, "topic of events sent to executions by type (the Kafka form of POST /api/v1/executions/{id}/events), always consumed")
	o.Duration(&cfg.SessionTimeout, "kafka-session-timeout", "RENDEZVOUS_KAFKA_SESSION_TIMEOUT", consumer.SessionTimeoutDefault, "how long the broker keeps a replica that died without leaving the group before its partitions go to the others")
	o.Int(&cfg.MaxRecordBytes, "kafka-max-record-bytes", "RENDEZVOUS_KAFKA_MAX_RECORD_BYTES", consumer.MaxRecordBytesDefault, "larger record values are dead-lettered")
	o.String(&cfg.DLQSuffix, "kafka-dlq-suffix", "RENDEZVOUS_KAFKA_DLQ_SUFFIX", consumer.DLQSuffixDefault, "dead-letter topic of <topic> is <topic><suffix>")
	var createDLQ bool
	o.Bool(&createDLQ, "kafka-create-dlq-topics", "RENDEZVOUS_KAFKA_CREATE_DLQ_TOPICS", true, "create each consumed topic's dead-letter topic (source topic's partition count) when it is missing; false where topics are provisioned by other means")
	o.Int(&cfg.DLQReplicationFactor, "kafka-dlq-replication-factor", "RENDEZVOUS_KAFKA_DLQ_REPLICATION_FACTOR", 0, "replication factor of the dead-letter topics created (0: min(3, brokers))")
	o.Duration(&cfg.DLQWriteTimeout, "kafka-dlq-write-timeout", "RENDEZVOUS_KAFKA_DLQ_WRITE_TIMEOUT", consumer.DLQWriteTimeoutDefault, "a dead-letter write not acknowledged by then fails, and its partition retries after a backoff")
	o.String(&cfg.SASLMechanism, "kafka-sasl-mechanism", "RENDEZVOUS_KAFKA_SASL_MECHANISM", "", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
	o.String(&cfg.SASLUser, "kafka-sasl-user", "RENDEZVOUS_KAFKA_SASL_USER", "", "SASL user")
	o.String(&cfg.SASLPassword, "kafka-sasl-password", "RENDEZVOUS_KAFKA_SASL_PASSWORD", "", "SASL password")
	o.Bool(&cfg.TLS, "kafka-tls", "RENDEZVOUS_KAFKA_TLS", false, "connect to the brokers with TLS")
	o.String(&cfg.TLSCAFile, "kafka-tls-ca-file", "RENDEZVOUS_KAFKA_TLS_CA_FILE", "", "PEM CA bundle for the brokers' certificates")
	o.inSection("Schema registry")
	sr := &cfg.SchemaRegistry
	o.Strings(&sr.URLs, "schema-registry-url", "RENDEZVOUS_SCHEMA_REGISTRY_URL", "schema registry base URLs (Confluent's REST API: Confluent, Redpanda, Apicurio, Karapace), tried in order; records in its wire format (Avro, Protobuf, JSON Schema) are decoded under their schemas. Empty: such records are dead-lettered as schema_unknown")
	o.String(&sr.BasicUser, "schema-registry-user", "RENDEZVOUS_SCHEMA_REGISTRY_USER", "", "schema registry basic-auth user")
	o.String(&sr.BasicPassword, "schema-registry-password", "RENDEZVOUS_SCHEMA_REGISTRY_PASSWORD", "", "schema registry basic-auth password")
	o.String(&sr.BearerToken, "schema-registry-token", "RENDEZVOUS_SCHEMA_REGISTRY_TOKEN", "", "schema registry bearer token (instead of basic auth)")
	o.String(&sr.TLSCAFile, "schema-registry-tls-ca-file", "RENDEZVOUS_SCHEMA_REGISTRY_TLS_CA_FILE", "", "PEM CA bundle for the schema registry's certificate")
	o.Int(&sr.CacheSize, "schema-registry-cache-size", "RENDEZVOUS_SCHEMA_REGISTRY_CACHE_SIZE", wireformat.CacheSizeDefault, "schemas kept compiled, by id; each is fetched once while it stays")
	o.Duration(&sr.Timeout, "schema-registry-timeout", "RENDEZVOUS_SCHEMA_REGISTRY_TIMEOUT", wireformat.TimeoutDefault, "bound of one request to the schema registry")
	return func() { cfg.SkipDLQTopicCreation = !createDLQ }
}

// startBroker starts the embedded Kafka-protocol broker (kfake) on 127.0.0.1:port.
func startBroker(port int) (*kfake.Cluster, error) {
	c, err := kfake.NewCluster(
		kfake.Ports(port),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			return net.Listen(network, "127.0.0.1:"+strconv.Itoa(port))
		}),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(3),
	)
	if err != nil {
		return nil, fmt.Errorf("start embedded broker on 127.0.0.1:%d: %w", port, err)
	}
	// A topic is created on first use whoever asks: the dev command's own client allows
	// it, but serve processes (dev-kafka's replicas) do not, nor do most producers by
	// default, and a topic nobody created would leave a definition's waits unanswered.
	c.ControlKey(int16(kmsg.Metadata), func(req kmsg.Request) (kmsg.Response, error, bool) {
		req.(*kmsg.MetadataRequest).AllowAutoTopicCreation = true
		return nil, nil, false
	})
	return c, nil
}

// startRegistry serves an embedded schema registry (franz-go's srfake, in memory) on
// 127.0.0.1:port, for trying records in the schema registry wire format with dev's
// broker. It returns its URL and what stops it.
func startRegistry(port int) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return "", nil, fmt.Errorf("start embedded schema registry on 127.0.0.1:%d: %w", port, err)
	}
	srv := &http.Server{Handler: srfake.NewRegistry().Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// devKafka runs the embedded broker alone, for setups with several serve processes.
func devKafka(ctx context.Context, args []string, stdout io.Writer) error {
	o := newOptions("dev-kafka")
	o.help = stdout
	o.summary = "Runs the embedded Kafka broker alone, for several serve processes on one machine."
	o.examples = []string{"rendezvous dev-kafka --port 9092"}
	var port int
	o.Int(&port, "port", "RENDEZVOUS_DEV_KAFKA_PORT", 9092, "port of the embedded broker on 127.0.0.1")
	if err := o.parse(args); err != nil {
		return err
	}
	c, err := startBroker(port)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Fprintf(stdout, "embedded Kafka broker listening on %s (Ctrl-C to stop)\n", strings.Join(c.ListenAddrs(), ","))
	<-ctx.Done()
	return nil
}

// dev runs everything in one process: embedded broker, migrations, example
// definitions, and a replica.
func dev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	// Ctrl-C is for dev alone, so that `make dev` ends with dev's own exit status.
	defer takeTerminal()()
	var cfg server.Config
	var c common
	var noMigrate bool
	o := serveOptions(&cfg, &c, &noMigrate)
	d := devOptions(o, stdout)
	if err := o.parse(args); err != nil {
		return err
	}
	if c.databaseURL == "" {
		c.databaseURL = localDatabaseURL
	}
	logger, err := c.logger(stderr)
	if err != nil {
		return err
	}
	logger.Debug("garbage collector", gctune.Apply().LogAttrs()...)
	auth, err := devAuth(&cfg)
	if err != nil {
		return err
	}
	broker, err := startBroker(d.kafkaPort)
	if err != nil {
		return err
	}
	defer broker.Close()
	registryURL, stopRegistry, err := startRegistry(d.registryPort)
	if err != nil {
		return err
	}
	defer stopRegistry()
	if len(cfg.Kafka.SchemaRegistry.URLs) == 0 {
		cfg.Kafka.SchemaRegistry.URLs = []string{registryURL}
	}
	cfg.DatabaseURL = c.databaseURL
	cfg.AutoMigrate = true
	cfg.Logger = logger
	cfg.Version = buildVersion()
	cfg.Kafka.Brokers = broker.ListenAddrs()
	cfg.Kafka.AllowAutoTopicCreation = true
	if d.exampleAddr != "" {
		// The example service listens on loopback, which the egress policy refuses
		// unless allowed; the replica's own listeners stay refused.
		cfg.Executor.Outbound.Allow = append(cfg.Executor.Outbound.Allow, "127.0.0.0/8", "::1")
	}
	s, err := server.New(ctx, cfg)
	if err != nil {
		return err
	}
	serviceURL := ""
	if d.exampleAddr != "" {
		example, err := startExampleService(d.exampleAddr, "http://"+displayAddr(s.Addr()), logger)
		if err != nil {
			s.Close()
			return err
		}
		defer example.Close()
		serviceURL = example.URL()
	}
	loaded, err := loadExamples(ctx, s, serviceURL)
	if err != nil {
		s.Close()
		return err
	}
	printDevBanner(stdout, devBanner{addr: displayAddr(s.Addr()), brokers: broker.ListenAddrs(), databaseURL: c.databaseURL,
		loaded: loaded, auth: auth, cliAuth: devCLIAuth(cfg), serviceURL: serviceURL, registries: cfg.Kafka.SchemaRegistry.URLs})
	return s.Run(ctx)
}

// devFlags are the flags dev has beside serve's.
type devFlags struct {
	kafkaPort, registryPort int
	exampleAddr             string
}

// devOptions turns serve's options into dev's: its own flags, and defaults for a person
// trying the examples on this machine.
func devOptions(o *options, stdout io.Writer) *devFlags {
	o.name = "dev"
	o.summary = `Runs everything in one process for trying rendezvous out: an embedded Kafka broker,
migrations, the example definitions and a replica, against a local PostgreSQL.`
	o.examples = []string{
		"rendezvous dev",
		"rendezvous dev --database-url 'postgres://postgres@127.0.0.1:5432/mydb?sslmode=disable' --http-addr 127.0.0.1:9080 --kafka-port 9093 --example-service-addr 127.0.0.1:9091",
	}
	o.help = stdout
	o.inSection("Development")
	d := &devFlags{}
	o.Int(&d.kafkaPort, "kafka-port", "RENDEZVOUS_DEV_KAFKA_PORT", 9092, "port of the embedded broker on 127.0.0.1")
	o.Int(&d.registryPort, "schema-registry-port", "RENDEZVOUS_DEV_SCHEMA_REGISTRY_PORT", 8081, "port of the embedded schema registry on 127.0.0.1, used unless --schema-registry-url names another")
	o.String(&d.exampleAddr, "example-service-addr", "RENDEZVOUS_DEV_EXAMPLE_SERVICE_ADDR", exampleServiceAddrDefault, "listen address of the stand-in for the external service the examples call (empty: none)")
	// dev logs for a person watching one replica try the examples: as text, and at
	// debug, every step of every execution.
	o.setDefault("log-format", "text")
	o.setDefault("log-level", "debug")
	// dev listens on loopback only: without a bootstrap token or an OIDC issuer it runs
	// without authentication, and only this machine can reach it.
	o.setDefault("http-addr", devHTTPAddr)
	o.setDefault("database-url", localDatabaseURL)
	return d
}

// devAuth turns authentication off when no token or issuer is set — refusing then to
// listen beyond loopback — and says which it is, for the banner.
func devAuth(cfg *server.Config) (string, error) {
	if cfg.Auth.BootstrapToken == "" && cfg.Auth.OIDC.Issuer == "" {
		cfg.Auth.Insecure = true
	}
	if !cfg.Auth.Insecure {
		return "bearer tokens (RENDEZVOUS_BOOTSTRAP_TOKEN or OIDC)", nil
	}
	for _, addr := range []string{cfg.HTTPAddr, cfg.AdminAddr} {
		if addr != "" && !loopback(addr) {
			return "", fmt.Errorf("--http-addr/--admin-addr %s: dev runs without authentication, so it listens on loopback only (127.0.0.1:PORT); set RENDEZVOUS_BOOTSTRAP_TOKEN to listen elsewhere", addr)
		}
	}
	return "OFF: no token needed, loopback only (set RENDEZVOUS_BOOTSTRAP_TOKEN to turn it on)", nil
}

// devCLIAuth is what the banner's commands carry to authenticate: the bootstrap token by
// name, never by value (the terminal may be shared or recorded).
func devCLIAuth(cfg server.Config) string {
	if !cfg.Auth.Insecure && cfg.Auth.BootstrapToken != "" {
		return "RENDEZVOUS_TOKEN=$RENDEZVOUS_BOOTSTRAP_TOKEN "
	}
	return ""
}

// devBanner is what dev prints once it is ready.
type devBanner struct {
	addr, databaseURL, auth, cliAuth, serviceURL string
	brokers, loaded, registries                  []string
}

func printDevBanner(w io.Writer, b devBanner) {
	fmt.Fprintf(w, `
rendezvous dev
  HTTP API and callbacks   http://%[1]s   (OpenAPI: /openapi.json)
  authentication           %[5]s
  web console              http://%[1]s/ui/
  Kafka broker (embedded)  %[2]s
  schema registry          %[9]s
  PostgreSQL               %[3]s
  definitions loaded       %[4]s
  example service          %[7]s
  stop                     Ctrl-C, or kill -INT %[8]d (exits 0)

Try it (the README's walkthrough has more):
  %[6]sbin/rendezvous executions start shipment-kafka --input '{"shipment":"S-1"}' --server http://%[1]s
  %[6]sbin/rendezvous waits list --server http://%[1]s
`, b.addr, strings.Join(b.brokers, ","), redact(b.databaseURL), strings.Join(b.loaded, ", "), b.auth, b.cliAuth, orNone(b.serviceURL), os.Getpid(),
		strings.Join(b.registries, ","))
}

const localDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// devHTTPAddr is where dev listens by default: loopback only.
const devHTTPAddr = "127.0.0.1:8080"

// loopback reports whether addr names a loopback host ("localhost", 127.0.0.0/8, ::1);
// an empty host (":8080") means every interface, which is not.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func orNone(s string) string {
	if s == "" {
		return "none (--example-service-addr is empty)"
	}
	return s + "   (stands in for what the examples call)"
}

// loadExamples stores the example definitions. Those that call an external service
// (vars.serviceUrl) are pointed at serviceURL, the stand-in, when it listens elsewhere
// than they expect; as shipped they are stored unchanged.
func loadExamples(ctx context.Context, s *server.Service, serviceURL string) ([]string, error) {
	files, err := fs.Glob(examples.Definitions, "*.json")
	if err != nil {
		return nil, err
	}
	var loaded []string
	for _, f := range files {
		raw, err := fs.ReadFile(examples.Definitions, f)
		if err != nil {
			return nil, err
		}
		name := strings.TrimSuffix(f, ".json")
		if raw, err = pointAt(raw, serviceURL); err != nil {
			return nil, fmt.Errorf("load example %s: %w", f, err)
		}
		stored, err := s.Exec.PutWorkflow(ctx, name, raw)
		if err != nil {
			return nil, fmt.Errorf("load example %s: %w", f, err)
		}
		loaded = append(loaded, fmt.Sprintf("%s v%d", stored.Name, stored.Version))
	}
	return loaded, nil
}

// pointAt sets vars.serviceUrl of a definition that has one to serviceURL, unless that is
// empty or what it holds already.
func pointAt(raw []byte, serviceURL string) ([]byte, error) {
	var def map[string]any
	if err := json.Unmarshal(raw, &def); err != nil {
		return nil, err
	}
	vars, _ := def["vars"].(map[string]any)
	if cur, ok := vars["serviceUrl"].(string); !ok || serviceURL == "" || cur == serviceURL {
		return raw, nil
	}
	vars["serviceUrl"] = serviceURL
	return json.MarshalIndent(def, "", "  ")
}

func displayAddr(addr string) string {
	if strings.HasPrefix(addr, "[::]:") || strings.HasPrefix(addr, "0.0.0.0:") {
		return "127.0.0.1:" + addr[strings.LastIndex(addr, ":")+1:]
	}
	return addr
}

func redact(url string) string {
	if i := strings.Index(url, "://"); i >= 0 {
		if at := strings.Index(url[i+3:], "@"); at >= 0 {
			cred := url[i+3 : i+3+at]
			if colon := strings.Index(cred, ":"); colon >= 0 {
				return url[:i+3] + cred[:colon] + ":***" + url[i+3+at:]
			}
		}
	}
	return url
}
