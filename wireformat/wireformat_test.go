package wireformat_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bufbuild/protocompile"
	"github.com/hamba/avro/v2"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/rendezvous-run/rendezvous/internal/jsonnum"
	"github.com/rendezvous-run/rendezvous/wireformat"
	"github.com/rendezvous-run/rendezvous/workflow"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The schemas every test registers: an Avro record whose nested record is a named type
// of another subject (a reference), a Protobuf file importing another, a JSON Schema.
const (
	avroMoney = `{"type":"record","name":"Money","namespace":"shop","fields":[
		{"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":20,"scale":4}},
		{"name":"currency","type":{"type":"enum","name":"Currency","symbols":["EUR","USD"]}}]}`
	avroOrder = `{"type":"record","name":"Order","namespace":"shop","fields":[
		{"name":"order_id","type":"long"},
		{"name":"execution_id","type":"string"},
		{"name":"total","type":"shop.Money"},
		{"name":"note","type":["null","string"]},
		{"name":"qty","type":["string","long"]},
		{"name":"blob","type":"bytes"},
		{"name":"digest","type":{"type":"fixed","name":"Digest","size":2}},
		{"name":"placed_at","type":{"type":"long","logicalType":"timestamp-millis"}},
		{"name":"day","type":{"type":"int","logicalType":"date"}},
		{"name":"ratio","type":"double"},
		{"name":"tags","type":{"type":"array","items":"string"}},
		{"name":"attrs","type":{"type":"map","values":"int"}}]}`
	protoCommon = `syntax = "proto3";
package shop.common;
enum Status { STATUS_UNSPECIFIED = 0; PAID = 1; SHIPPED = 2; }
message Address { string city = 1; }
`
	protoOrder = `syntax = "proto3";
package shop;
import "common.proto";
import "google/protobuf/timestamp.proto";
message Ignored { string x = 1; }
message Shipment {
  int64 order_id = 1;
  string execution_id = 2;
  shop.common.Status status = 3;
  bytes blob = 4;
  google.protobuf.Timestamp shipped_at = 5;
  oneof destination {
    shop.common.Address address = 6;
    string pickup_point = 7;
  }
  optional string note = 8;
  repeated uint64 parcels = 9;
  map<string, double> weights = 10;
  shop.common.Address billing = 11;
  message Inner { sint32 n = 1; }
}
`
	jsonSchemaOrder = `{"type":"object","required":["order_id"],"properties":{
		"order_id":{"type":"integer"},"customer":{"$ref":"customer.json"}}}`
	jsonSchemaCustomer = `{"type":"object","required":["name"],"properties":{"name":{"type":"string"}}}`
)

type bundle struct {
	reg      *srfake.Registry
	r        *wireformat.Registry
	requests *atomic.Int64
	ids      map[string]int
}

func setup(t *testing.T, cfg wireformat.Config) *bundle {
	t.Helper()
	b := &bundle{reg: srfake.New(), requests: new(atomic.Int64), ids: map[string]int{}}
	t.Cleanup(b.reg.Close)
	b.reg.Intercept(func(_ http.ResponseWriter, req *http.Request) bool {
		if req.Method == http.MethodGet {
			b.requests.Add(1)
		}
		return false
	})
	register := func(subject string, s sr.Schema) int {
		id, _, err := b.reg.RegisterSchema(subject, s)
		require.NoError(t, err)
		b.ids[subject] = id
		return id
	}
	register("shop.Money", sr.Schema{Schema: avroMoney, Type: sr.TypeAvro})
	register("orders-value", sr.Schema{Schema: avroOrder, Type: sr.TypeAvro,
		References: []sr.SchemaReference{{Name: "shop.Money", Subject: "shop.Money", Version: 1}}})
	register("common.proto", sr.Schema{Schema: protoCommon, Type: sr.TypeProtobuf})
	register("shipments-value", sr.Schema{Schema: protoOrder, Type: sr.TypeProtobuf,
		References: []sr.SchemaReference{{Name: "common.proto", Subject: "common.proto", Version: 1}}})
	register("customer.json", sr.Schema{Schema: jsonSchemaCustomer, Type: sr.TypeJSON})
	register("json-value", sr.Schema{Schema: jsonSchemaOrder, Type: sr.TypeJSON,
		References: []sr.SchemaReference{{Name: "customer.json", Subject: "customer.json", Version: 1}}})
	cfg.URLs = []string{b.reg.URL()}
	r, err := wireformat.New(cfg)
	require.NoError(t, err)
	t.Cleanup(r.Close)
	b.r = r
	return b
}

// frame writes the wire format's header, by franz-go's encoder of it.
func frame(t testing.TB, id int, index []int, payload []byte) []byte {
	t.Helper()
	var h sr.ConfluentHeader
	b, err := h.AppendEncode(nil, id, index)
	require.NoError(t, err)
	return append(b, payload...)
}

// avroOrderBytes is an Order encoded by hamba's encoder.
func avroOrderBytes(t testing.TB, id int) []byte {
	t.Helper()
	cache := &avro.SchemaCache{}
	_, err := avro.ParseWithCache(avroMoney, "", cache)
	require.NoError(t, err)
	s, err := avro.ParseWithCache(avroOrder, "", cache)
	require.NoError(t, err)
	amount, _ := new(big.Rat).SetString("12345678901234.5678")
	payload, err := avro.Marshal(s, map[string]any{
		"order_id":     int64(9007199254740993),
		"execution_id": "7f1c1a9e-8c55-4a7e-9f57-0d6f4b0e2a11",
		"total":        map[string]any{"amount": amount, "currency": "USD"},
		"note":         nil,
		"qty":          map[string]any{"long": int64(3)},
		"blob":         []byte{0xde, 0xad, 0xbe, 0xef},
		"digest":       [2]byte{1, 2},
		"placed_at":    time.Date(2026, 12, 7, 13, 45, 1, 250e6, time.UTC),
		"day":          time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC),
		"ratio":        0.1,
		"tags":         []any{"a", "b"},
		"attrs":        map[string]any{"k": 7},
	})
	require.NoError(t, err)
	return frame(t, id, nil, payload)
}

// shipmentBytes is a Shipment encoded by the Protobuf runtime, from its JSON form.
func shipmentBytes(t testing.TB, id int, js string) []byte {
	t.Helper()
	c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(map[string]string{"order.proto": protoOrder, "common.proto": protoCommon})})}
	files, err := c.Compile(context.Background(), "order.proto")
	require.NoError(t, err)
	md := files[0].Messages().ByName("Shipment")
	msg := dynamicpb.NewMessage(md)
	require.NoError(t, protojson.Unmarshal([]byte(js), msg))
	payload, err := proto.Marshal(msg)
	require.NoError(t, err)
	return frame(t, id, []int{1}, payload) // Shipment is the file's second message
}

func decodeJSON(t *testing.T, r *wireformat.Registry, value []byte) (wireformat.Record, map[string]any) {
	t.Helper()
	rec, err := r.Decode(context.Background(), value)
	require.NoError(t, err)
	got, err := jsonnum.Decode(rec.JSON)
	require.NoError(t, err)
	require.True(t, jsonnum.DeepEqual(rec.Value, got), "JSON and Value say the same")
	return rec, got.(map[string]any)
}

func TestAvroValueModel(t *testing.T) {
	t.Parallel()
	b := setup(t, wireformat.Config{})
	rec, got := decodeJSON(t, b.r, avroOrderBytes(t, b.ids["orders-value"]))
	require.Equal(t, workflow.FormatAvro, rec.Format)
	require.Equal(t, b.ids["orders-value"], rec.SchemaID)
	want, err := jsonnum.Decode([]byte(`{
		"order_id": 9007199254740993,
		"execution_id": "7f1c1a9e-8c55-4a7e-9f57-0d6f4b0e2a11",
		"total": {"amount": 12345678901234.5678, "currency": "USD"},
		"note": null,
		"qty": 3,
		"blob": "3q2+7w==",
		"digest": "AQI=",
		"placed_at": "2026-12-07T13:45:01.25Z",
		"day": "2026-12-07",
		"ratio": 0.1,
		"tags": ["a", "b"],
		"attrs": {"k": 7}}`))
	require.NoError(t, err)
	require.True(t, jsonnum.DeepEqual(want, got), "got %s", rec.JSON)
	// Exact, not rounded through a float: 2^53+1 and the decimal's 18 digits.
	require.Contains(t, string(rec.JSON), `"order_id":9007199254740993`)
	require.Contains(t, string(rec.JSON), `"amount":12345678901234.5678`)
}

func TestProtobufValueModel(t *testing.T) {
	t.Parallel()
	b := setup(t, wireformat.Config{})
	value := shipmentBytes(t, b.ids["shipments-value"], `{"orderId":"9223372036854775807","executionId":"e1","status":"SHIPPED",
		"blob":"AAE=","shippedAt":"2026-12-07T10:00:00.5Z","pickupPoint":"P-7","parcels":["18446744073709551615"],"weights":{"a":1.5}}`)
	rec, got := decodeJSON(t, b.r, value)
	require.Equal(t, workflow.FormatProtobuf, rec.Format)
	want, err := jsonnum.Decode([]byte(`{
		"order_id": 9223372036854775807, "execution_id": "e1", "status": "SHIPPED", "blob": "AAE=",
		"shipped_at": "2026-12-07T10:00:00.5Z", "pickup_point": "P-7", "note": null,
		"parcels": [18446744073709551615], "weights": {"a": 1.5}, "billing": null}`))
	require.NoError(t, err)
	require.True(t, jsonnum.DeepEqual(want, got), "got %s", rec.JSON)

	// The other member of the oneof, and fields at their defaults.
	_, got = decodeJSON(t, b.r, shipmentBytes(t, b.ids["shipments-value"], `{"address":{"city":"Lyon"},"note":""}`))
	require.Equal(t, map[string]any{"city": "Lyon"}, got["address"])
	require.NotContains(t, got, "pickup_point")
	require.NotContains(t, got, "destination")
	require.Equal(t, "STATUS_UNSPECIFIED", got["status"])
	require.Equal(t, json.Number("0"), got["order_id"])
	require.Equal(t, "", got["note"], "an optional field set to its default is present")
}

// TestProtobufDescriptorSchema reads a schema registered as a base64 FileDescriptorProto,
// as Confluent's Python client registers it.
func TestProtobufDescriptorSchema(t *testing.T) {
	t.Parallel()
	b := setup(t, wireformat.Config{})
	c := protocompile.Compiler{Resolver: &protocompile.SourceResolver{Accessor: protocompile.SourceAccessorFromMap(map[string]string{"p.proto": protoCommon + "message Parcel { shop.common.Status status = 1; int64 weight = 2; }\n"})}}
	files, err := c.Compile(context.Background(), "p.proto")
	require.NoError(t, err)
	fdp := protodesc.ToFileDescriptorProto(files[0])
	for _, m := range fdp.MessageType {
		for _, f := range m.Field {
			f.JsonName = nil // as the Python client's descriptors come: without JSON names
		}
	}
	raw, err := proto.Marshal(fdp)
	require.NoError(t, err)
	id, _, err := b.reg.RegisterSchema("parcels-value", sr.Schema{Schema: base64.StdEncoding.EncodeToString(raw), Type: sr.TypeProtobuf})
	require.NoError(t, err)
	msg := dynamicpb.NewMessage(files[0].Messages().ByName("Parcel"))
	msg.Set(msg.Descriptor().Fields().ByName("weight"), protoreflect.ValueOfInt64(-5))
	payload, err := proto.Marshal(msg)
	require.NoError(t, err)
	_, got := decodeJSON(t, b.r, frame(t, id, []int{1}, payload))
	require.Equal(t, map[string]any{"status": "STATUS_UNSPECIFIED", "weight": json.Number("-5")}, got)
}

func TestJSONSchema(t *testing.T) {
	t.Parallel()
	b := setup(t, wireformat.Config{})
	id := b.ids["json-value"]
	rec, got := decodeJSON(t, b.r, frame(t, id, nil, []byte(`{"order_id": 18014398509481985, "customer": {"name": "Ada"}}`)))
	require.Equal(t, workflow.FormatJSONSchema, rec.Format)
	require.Equal(t, json.Number("18014398509481985"), got["order_id"])

	// The reference is checked too: a customer without a name does not hold the schema.
	_, err := b.r.Decode(context.Background(), frame(t, id, nil, []byte(`{"order_id": 1, "customer": {}}`)))
	require.ErrorIs(t, err, wireformat.ErrDecodeFailed)
	require.Contains(t, err.Error(), "at /customer")
	_, err = b.r.Decode(context.Background(), frame(t, id, nil, []byte(`{"order_id": `)))
	require.ErrorIs(t, err, wireformat.ErrDecodeFailed)
}

func TestFailures(t *testing.T) {
	t.Parallel()
	b := setup(t, wireformat.Config{})
	ctx := context.Background()

	before := b.requests.Load()
	for range 50 {
		_, err := b.r.Decode(ctx, frame(t, 4242, nil, []byte{1, 2}))
		require.ErrorIs(t, err, wireformat.ErrSchemaUnknown)
	}
	require.Equal(t, before+1, b.requests.Load(), "a run of records naming an unknown id costs one request")
	var err error

	// Avro bytes cut short, a Protobuf index naming no message.
	full := avroOrderBytes(t, b.ids["orders-value"])
	for _, cut := range []int{1, 9} {
		_, err = b.r.Decode(ctx, full[:len(full)-cut])
		require.ErrorIs(t, err, wireformat.ErrDecodeFailed, "cut by %d", cut)
	}
	_, err = b.r.Decode(ctx, append(full[:len(full):len(full)], 2))
	require.ErrorIs(t, err, wireformat.ErrDecodeFailed, "a byte after the value")
	_, err = b.r.Decode(ctx, frame(t, b.ids["shipments-value"], []int{7}, nil))
	require.ErrorIs(t, err, wireformat.ErrDecodeFailed)

	// The registry answering 503: not the record's fault, and nothing is cached; once it
	// answers, the same value decodes.
	var down atomic.Bool
	down.Store(true)
	b.reg.Intercept(func(w http.ResponseWriter, _ *http.Request) bool {
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	value := frame(t, b.ids["json-value"], nil, []byte(`{"order_id": 1}`))
	_, err = b.r.Decode(ctx, value)
	require.ErrorIs(t, err, wireformat.ErrRegistryUnavailable)
	down.Store(false)
	_, err = b.r.Decode(ctx, value)
	require.NoError(t, err)

	// No registry configured: a framed value cannot be read, and says why.
	none, err := wireformat.New(wireformat.Config{})
	require.NoError(t, err)
	defer none.Close()
	_, err = none.Decode(ctx, value)
	require.ErrorIs(t, err, wireformat.ErrSchemaUnknown)
	require.Contains(t, err.Error(), "--schema-registry-url")
}

// TestOneRequestPerSchema decodes 1 000 records of one schema, from 8 goroutines at
// once: the registry is asked once for the schema and once for its reference.
func TestOneRequestPerSchema(t *testing.T) {
	t.Parallel()
	b := setup(t, wireformat.Config{})
	value := avroOrderBytes(t, b.ids["orders-value"])
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < 1000; i += 8 {
				_, err := b.r.Decode(context.Background(), value)
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, int64(2), b.requests.Load(), "one request for the schema, one for its reference")
}

func TestCacheBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, wireformat.Config{CacheSize: 1})
	ctx := context.Background()
	j := frame(t, b.ids["json-value"], nil, []byte(`{"order_id": 1}`))
	a := avroOrderBytes(t, b.ids["orders-value"])
	for _, v := range [][]byte{j, j, a, a, j} {
		_, err := b.r.Decode(ctx, v)
		require.NoError(t, err)
	}
	// j (2 requests), a (2), j again after a pushed it out (2).
	require.Equal(t, int64(6), b.requests.Load())
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	_, err := wireformat.New(wireformat.Config{URLs: []string{"registry:8081"}, BearerToken: "x", BasicUser: "u"})
	require.Error(t, err)
	for _, field := range []string{"schema_registry.urls", "schema_registry.bearer_token"} {
		require.Contains(t, err.Error(), field)
	}
	_, err = wireformat.New(wireformat.Config{URLs: []string{"http://r"}, TLSCAFile: "/nonexistent"})
	require.ErrorContains(t, err, "schema_registry.tls_ca_file")
}

func TestFramed(t *testing.T) {
	t.Parallel()
	require.False(t, wireformat.Framed([]byte(`{"a":1}`)))
	require.False(t, wireformat.Framed([]byte{0, 0, 0, 1}))
	require.True(t, wireformat.Framed([]byte{0, 0, 0, 1, 2}))
	require.Equal(t, 258, wireformat.SchemaID([]byte{0, 0, 0, 1, 2}))
}

// FuzzDecode feeds registry-framed bytes under each kind of schema: whatever the bytes,
// Decode returns a value whose JSON reads back as it, or one of the record's errors —
// never a panic, never the registry's error.
func FuzzDecode(f *testing.F) {
	b := setup(&testing.T{}, wireformat.Config{})
	defer b.reg.Close()
	defer b.r.Close()
	f.Add(avroOrderBytes(f, b.ids["orders-value"]))
	f.Add(shipmentBytes(f, b.ids["shipments-value"], `{"orderId":"1","address":{"city":"x"},"weights":{"k":2}}`))
	f.Add(frame(f, b.ids["json-value"], nil, []byte(`{"order_id": 1, "customer": {"name": "n"}}`)))
	f.Add(frame(f, b.ids["shipments-value"], []int{1, 0}, []byte{8, 1}))
	f.Add([]byte{0, 0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, value []byte) {
		if !wireformat.Framed(value) {
			return
		}
		rec, err := b.r.Decode(context.Background(), value)
		if err != nil {
			if !errors.Is(err, wireformat.ErrDecodeFailed) && !errors.Is(err, wireformat.ErrSchemaUnknown) {
				t.Fatalf("unexpected error class: %v", err)
			}
			return
		}
		back, err := jsonnum.Decode(rec.JSON)
		if err != nil || !jsonnum.DeepEqual(back, rec.Value) {
			t.Fatalf("JSON %s does not read back as the value: %v", rec.JSON, err)
		}
		if strings.TrimSpace(string(rec.JSON)) == "" {
			t.Fatal("empty JSON")
		}
	})
}

// BenchmarkDecode reads one Order record per iteration: Avro through a warm cache, and,
// for comparison, the JSON it becomes read as the consumer reads a JSON record.
func BenchmarkDecode(b *testing.B) {
	t := &testing.T{}
	bn := setup(t, wireformat.Config{})
	defer bn.reg.Close()
	defer bn.r.Close()
	value := avroOrderBytes(b, bn.ids["orders-value"])
	rec, err := bn.r.Decode(context.Background(), value)
	require.NoError(b, err)
	b.Run("avro", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := bn.r.Decode(context.Background(), value); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := jsonnum.Decode(rec.JSON); err != nil {
				b.Fatal(err)
			}
		}
	})
}
