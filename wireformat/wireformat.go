// Package wireformat reads Kafka records written in the schema registry wire format
// (Confluent's: a zero magic byte, a 4-byte big-endian schema id, for Protobuf the
// message indexes, then the encoded value) into the value model JSON records have:
// map[string]any, []any, string, bool, nil and json.Number, numbers exact. Avro is
// decoded by github.com/hamba/avro/v2, Protobuf by dynamic messages compiled from the
// registry's schema text by github.com/bufbuild/protocompile, JSON Schema records are
// JSON validated against their schema; schemas are fetched through franz-go's pkg/sr
// client, references included, once per id, and kept in a bounded cache.
//
// It owns the mapping from each format to the value model (see the Value rules on
// Decode) and the classification of a failure: the record's own (ErrSchemaUnknown,
// ErrDecodeFailed) or the registry's (ErrRegistryUnavailable). What a consumer does with
// either — dead-letter the record, stall its partition — is the consumer's.
package wireformat

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"golang.org/x/sync/singleflight"

	"github.com/rendezvous-run/rendezvous/workflow"
)

// Errors that decide what becomes of a record. Each error Decode returns wraps one, and
// begins with its text: the record's two are the words a dead letter's reason starts with.
var (
	// ErrSchemaUnknown: the registry does not know the record's schema id (or no
	// registry is configured). The record's fault: it cannot be read, now or later.
	ErrSchemaUnknown = errors.New("schema_unknown")
	// ErrDecodeFailed: the bytes do not decode under their schema, or the schema itself
	// cannot be compiled. The record's fault.
	ErrDecodeFailed = errors.New("decode_failed")
	// ErrRegistryUnavailable: the registry could not be asked (unreachable, 5xx, refused
	// credentials, timed out). Not the record's fault: ask again later.
	ErrRegistryUnavailable = errors.New("schema registry unavailable")
)

// Defaults for Config.
const (
	CacheSizeDefault = 1000
	TimeoutDefault   = 5 * time.Second
	// NotFoundTTL is how long the registry's answer that it does not know a schema id
	// is believed before it is asked again.
	NotFoundTTL = 10 * time.Second
	// MaxReferenceDepthMax bounds how deep references may nest (a schema that
	// references one that references …).
	MaxReferenceDepthMax = 16
)

// Config configures a Registry.
type Config struct {
	// URLs are the registry's base URLs, tried in order. Empty: no registry; every
	// record in the wire format is ErrSchemaUnknown.
	URLs []string
	// BasicUser and BasicPassword authenticate with HTTP basic auth; BearerToken with a
	// bearer token. At most one of the two.
	BasicUser     string
	BasicPassword string
	BearerToken   string
	// TLSCAFile adds a CA bundle to trust for https URLs. Optional.
	TLSCAFile string
	// CacheSize bounds the schemas kept compiled, by id; the least recently used goes
	// first. Default CacheSizeDefault.
	CacheSize int
	// Timeout bounds one request to the registry. Default TimeoutDefault.
	Timeout time.Duration
	// MeterProvider receives the registry's metrics. Default: a no-op provider.
	MeterProvider metric.MeterProvider
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.CacheSize <= 0 {
		c.CacheSize = CacheSizeDefault
	}
	if c.Timeout <= 0 {
		c.Timeout = TimeoutDefault
	}
	if c.MeterProvider == nil {
		c.MeterProvider = metricnoop.NewMeterProvider()
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	for _, u := range c.URLs {
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			errs = append(errs, fmt.Errorf("schema_registry.urls: %q is not an http:// or https:// URL", u))
		}
	}
	if c.BearerToken != "" && (c.BasicUser != "" || c.BasicPassword != "") {
		errs = append(errs, errors.New("schema_registry.bearer_token: not with basic auth (schema_registry.basic_user)"))
	}
	if c.BasicPassword != "" && c.BasicUser == "" {
		errs = append(errs, errors.New("schema_registry.basic_user: required with a password"))
	}
	return errors.Join(errs...)
}

// Registry reads records in the wire format, asking a schema registry for their
// schemas. It is safe for concurrent use: records of one schema decoded at once make
// one request.
type Registry struct {
	cfg    Config
	cl     *sr.Client // nil without URLs
	cache  *cache
	flight singleflight.Group

	fetches   metric.Int64Counter
	cachedReg metric.Registration
}

// scope names the package's meter.
const scope = "github.com/rendezvous-run/rendezvous/wireformat"

// Outcomes of a registry request: the outcome attribute of
// rendezvous.schema_registry.requests.
const (
	outcomeOK          = "ok"
	outcomeNotFound    = "not_found"
	outcomeUnavailable = "unavailable"
)

// New builds a Registry.
func New(cfg Config) (*Registry, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &Registry{cfg: cfg, cache: newCache(cfg.CacheSize)}
	if len(cfg.URLs) > 0 {
		opts := []sr.ClientOpt{sr.URLs(cfg.URLs...), sr.HTTPClient(&http.Client{Timeout: cfg.Timeout}), sr.UserAgent("rendezvous")}
		if cfg.BasicUser != "" {
			opts = append(opts, sr.BasicAuth(cfg.BasicUser, cfg.BasicPassword))
		}
		if cfg.BearerToken != "" {
			opts = append(opts, sr.BearerToken(cfg.BearerToken))
		}
		if cfg.TLSCAFile != "" {
			pem, err := os.ReadFile(cfg.TLSCAFile)
			if err != nil {
				return nil, fmt.Errorf("schema_registry.tls_ca_file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, errors.New("schema_registry.tls_ca_file: no certificates found")
			}
			opts = append(opts, sr.DialTLSConfig(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}))
		}
		cl, err := sr.NewClient(opts...)
		if err != nil {
			return nil, fmt.Errorf("schema registry client: %w", err)
		}
		r.cl = cl
	}
	m := cfg.MeterProvider.Meter(scope)
	var err error
	if r.fetches, err = m.Int64Counter("rendezvous.schema_registry.requests",
		metric.WithDescription("Schemas asked of the schema registry (each schema id once, while it stays cached; a reference is one more request), by outcome: ok, not_found (the record is dead-lettered as schema_unknown), unavailable (the partition stalls and retries).")); err != nil {
		return nil, err
	}
	cached, err := m.Int64ObservableGauge("rendezvous.schema_registry.cached_schemas",
		metric.WithDescription("Schemas kept compiled, by id; at most --schema-registry-cache-size."))
	if err != nil {
		return nil, err
	}
	if r.cachedReg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(cached, int64(r.cache.len()))
		return nil
	}, cached); err != nil {
		return nil, err
	}
	return r, nil
}

// Close releases the registry's metric callback.
func (r *Registry) Close() { _ = r.cachedReg.Unregister() }

// Configured reports whether a registry URL was given.
func (r *Registry) Configured() bool { return r != nil && r.cl != nil }

// Framed reports whether value is in the wire format: a zero magic byte and a schema
// id. No JSON text begins with a zero byte, so a value that is not framed is read as
// JSON.
func Framed(value []byte) bool { return len(value) >= 5 && value[0] == 0 }

// SchemaID is the schema id of a framed value, 0 for any other.
func SchemaID(value []byte) int {
	if !Framed(value) {
		return 0
	}
	return int(binary.BigEndian.Uint32(value[1:5]))
}

// Record is a framed value, decoded.
type Record struct {
	// Value is the value in the JSON value model.
	Value any
	// JSON is Value's JSON text.
	JSON []byte
	// Format is the kind of the record's schema: workflow.FormatAvro, FormatProtobuf
	// or FormatJSONSchema.
	Format workflow.RecordFormat
	// SchemaID is the id the record named.
	SchemaID int
}

// Decode reads a framed value (see Framed) under the schema its id names, asking the
// registry for it unless it is cached. The value rules, one per case:
//
//   - Integers of any width are exact JSON numbers (json.Number), beyond 2^53 too.
//     Floating-point numbers are their shortest exact decimal; NaN and the infinities,
//     which JSON cannot write, are the strings "NaN", "Infinity", "-Infinity".
//   - Avro decimals (bytes or fixed) are JSON numbers with exactly their scale's digits.
//   - Bytes (Avro bytes and fixed, Protobuf bytes) are standard base64 text.
//   - Enums are their symbol's name (a Protobuf number no value names: the number).
//   - Avro timestamps (millis, micros, local or not) and google.protobuf.Timestamp are
//     RFC 3339 text in UTC; an Avro date is YYYY-MM-DD, a time of day HH:MM:SS.ffffff;
//     google.protobuf.Duration is its JSON form ("1.5s").
//   - An Avro union is the value of the branch the record holds, unwrapped (null for the
//     null branch): {"amount": 12.5}, not {"amount": {"double": 12.5}}.
//   - A Protobuf message is an object keyed by the fields' names as declared (not
//     lowerCamelCase). Every field is present, at its default when not set, except: of a
//     oneof only the member set appears, under its own name (the oneof's name does not
//     appear); a message field or an optional field that is not set is null. Map keys
//     are their text. Wrapper types are their value; Struct, Value, ListValue, Any and
//     the other well-known types their canonical JSON form.
//   - JSON Schema records are their JSON, validated against the schema.
func (r *Registry) Decode(ctx context.Context, value []byte) (Record, error) {
	id := SchemaID(value)
	if !Framed(value) {
		return Record{}, fmt.Errorf("%w: the value is not in the schema registry wire format", ErrDecodeFailed)
	}
	s, err := r.schema(ctx, id)
	if err != nil {
		return Record{SchemaID: id}, err
	}
	v, err := safeDecode(s, value[5:])
	if err != nil {
		return Record{SchemaID: id, Format: s.format()}, fmt.Errorf("%w: schema %d (%s): %w", ErrDecodeFailed, id, s.format(), err)
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return Record{SchemaID: id, Format: s.format()}, fmt.Errorf("%w: schema %d: %w", ErrDecodeFailed, id, err)
	}
	return Record{Value: v, JSON: raw, Format: s.format(), SchemaID: id}, nil
}

// safeDecode decodes b under s, a panic of the decoding library becoming the record's
// decode failure: the Protobuf runtime panics on some malformed map entries of dynamic
// messages (found by FuzzDecode), and one record must not stop the consumer.
func safeDecode(s compiled, b []byte) (v any, err error) {
	defer func() {
		if p := recover(); p != nil {
			v, err = nil, fmt.Errorf("the %s decoder failed on the value: %v", s.format(), p)
		}
	}()
	return s.decode(b)
}

// compiled is a schema ready to decode values.
type compiled interface {
	format() workflow.RecordFormat
	decode(b []byte) (any, error)
}

// schema returns the compiled schema of id: cached, or fetched once however many
// callers ask for it at the same time.
func (r *Registry) schema(ctx context.Context, id int) (compiled, error) {
	if r.cl == nil {
		return nil, fmt.Errorf("%w: schema id %d: no schema registry is configured (--schema-registry-url)", ErrSchemaUnknown, id)
	}
	if s, err, ok := r.cache.get(id, time.Now()); ok {
		return s, err
	}
	v, err, _ := r.flight.Do(fmt.Sprint(id), func() (any, error) {
		if s, err, ok := r.cache.get(id, time.Now()); ok {
			return s, err
		}
		s, err := r.fetch(ctx, id)
		switch {
		case errors.Is(err, ErrRegistryUnavailable):
			return nil, err // asked again by the retry
		case errors.Is(err, ErrSchemaUnknown):
			// Remembered for a while, so that a run of records naming an unknown id
			// costs one request, and then asked again: the id may have been registered
			// meanwhile (a record produced before its schema reached this registry).
			r.cache.put(id, nil, err, time.Now().Add(NotFoundTTL))
			return nil, err
		case err != nil:
			// A schema that does not compile stays so: remembered, not fetched again.
			r.cache.put(id, nil, err, time.Time{})
			return nil, err
		}
		r.cache.put(id, s, nil, time.Time{})
		return s, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(compiled), nil
}

// fetch asks the registry for schema id and its references, and compiles it.
func (r *Registry) fetch(ctx context.Context, id int) (compiled, error) {
	s, err := r.cl.SchemaByID(ctx, id)
	if err != nil {
		return nil, r.classify(ctx, fmt.Sprintf("schema id %d", id), err)
	}
	r.count(ctx, outcomeOK)
	var refs []reference
	if err := r.references(ctx, s.References, &refs, map[string]bool{}, 0); err != nil {
		return nil, err
	}
	var c compiled
	switch s.Type {
	case sr.TypeAvro:
		c, err = compileAvro(s.Schema, refs)
	case sr.TypeProtobuf:
		c, err = compileProtobuf(id, s.Schema, refs)
	case sr.TypeJSON:
		c, err = compileJSONSchema(id, s.Schema, refs)
	default:
		err = fmt.Errorf("schema type %s is not supported", s.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: schema %d does not compile: %w", ErrDecodeFailed, id, err)
	}
	return c, nil
}

// reference is a schema another names: its name (what the schema imports or names)
// and its text.
type reference struct{ name, text string }

// references fetches refs and theirs, each once, a reference's own references before it
// (the order Avro needs to parse them).
func (r *Registry) references(ctx context.Context, refs []sr.SchemaReference, into *[]reference, seen map[string]bool, depth int) error {
	if depth > MaxReferenceDepthMax {
		return fmt.Errorf("%w: references nested deeper than %d", ErrDecodeFailed, MaxReferenceDepthMax)
	}
	for _, ref := range refs {
		if seen[ref.Name] {
			continue
		}
		seen[ref.Name] = true
		ss, err := r.cl.SchemaByVersion(ctx, ref.Subject, ref.Version)
		if err != nil {
			return r.classify(ctx, fmt.Sprintf("reference %s (subject %s version %d)", ref.Name, ref.Subject, ref.Version), err)
		}
		r.count(ctx, outcomeOK)
		if err := r.references(ctx, ss.References, into, seen, depth+1); err != nil {
			return err
		}
		*into = append(*into, reference{name: ref.Name, text: ss.Schema.Schema})
	}
	return nil
}

// classify turns a registry error into ErrSchemaUnknown (the registry answered that it
// does not have it) or ErrRegistryUnavailable (anything else: it could not answer, or
// refused this client, which no record can fix).
func (r *Registry) classify(ctx context.Context, what string, err error) error {
	var re *sr.ResponseError
	if errors.As(err, &re) && re.StatusCode == http.StatusNotFound {
		r.count(ctx, outcomeNotFound)
		return fmt.Errorf("%w: %s: %w", ErrSchemaUnknown, what, err)
	}
	r.count(ctx, outcomeUnavailable)
	return fmt.Errorf("%w: %s: %w", ErrRegistryUnavailable, what, err)
}

func (r *Registry) count(ctx context.Context, outcome string) {
	r.fetches.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", outcome)))
}
