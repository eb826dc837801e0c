package consumer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/rendezvous-run/rendezvous/consumer"
	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/harness/pgproxy"
	"github.com/rendezvous-run/rendezvous/harness/testkit"
	"github.com/rendezvous-run/rendezvous/server"
	"github.com/rendezvous-run/rendezvous/vocab"
	"github.com/rendezvous-run/rendezvous/wireformat"
	"github.com/rendezvous-run/rendezvous/workflow"
)

// The records of these tests are written by clients nobody here wrote: kafkajs with
// @kafkajs/confluent-schema-registry (Avro, JSON Schema) and Confluent's Python client
// (Protobuf, whose serializer registers order.proto with its reference common.proto).
// Both live in testdata/schemaclient; make deps installs them.
const clientDir = "testdata/schemaclient"

// registryEnv is a test's bundle with an embedded schema registry (franz-go's srfake),
// reached by the replicas through a proxy the test can cut, and by the clients directly.
type registryEnv struct {
	*env
	reg   *srfake.Registry
	proxy *pgproxy.Proxy
}

func setupRegistry(t *testing.T) *registryEnv {
	t.Helper()
	e := &registryEnv{env: setup(t), reg: srfake.New()}
	t.Cleanup(e.reg.Close)
	e.proxy = dbtest.StartProxy(t, strings.TrimPrefix(e.reg.URL(), "http://"))
	return e
}

// startReplica runs a replica reading its schemas through the proxy.
func (e *registryEnv) startReplica(t *testing.T, id string) *svc {
	t.Helper()
	return e.start(t, id, func(c *server.Config) {
		c.Kafka.SchemaRegistry = wireformat.Config{URLs: []string{"http://" + e.proxy.Addr()}, Timeout: 2 * time.Second}
	})
}

// nodeClient runs produce.mjs with plan; it installs the client's locked packages first
// when they are missing (make deps does it once).
var npmOnce sync.Once

func (e *registryEnv) nodeClient(t *testing.T, plan obj) map[string]int {
	t.Helper()
	npmOnce.Do(func() {
		if _, err := os.Stat(filepath.Join(clientDir, "node_modules")); err == nil {
			return
		}
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = clientDir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "npm ci: %s", out)
	})
	plan["brokers"], plan["registry"] = e.cluster.ListenAddrs(), e.reg.URL()
	return runClient(t, exec.Command("node", "produce.mjs"), plan)
}

// pythonClient generates the Python classes of order.proto with protoc, then runs
// produce_proto.py with plan under Debian's Python (the one its packages are for).
func (e *registryEnv) pythonClient(t *testing.T, plan obj) map[string]int {
	t.Helper()
	gen := t.TempDir()
	protoc := exec.Command("protoc", "--python_out="+gen, "order.proto", "common.proto")
	protoc.Dir = clientDir
	out, err := protoc.CombinedOutput()
	require.NoError(t, err, "protoc: %s", out)
	plan["brokers"], plan["registry"], plan["generated"] = strings.Join(e.cluster.ListenAddrs(), ","), e.reg.URL(), gen
	return runClient(t, exec.Command("/usr/bin/python3", "produce_proto.py"), plan)
}

func runClient(t *testing.T, cmd *exec.Cmd, plan obj) map[string]int {
	t.Helper()
	raw, err := json.Marshal(plan)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
	c.Dir = clientDir
	c.Stdin = bytes.NewReader(raw)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	require.NoError(t, c.Run(), "%s: %s", cmd.Args, stderr.String())
	var res struct {
		IDs map[string]int `json:"ids"`
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &res), "%s printed %s", cmd.Args, stdout.String())
	return res.IDs
}

// formatCase is one format's schema and client.
type formatCase struct {
	format workflow.RecordFormat
	// produce writes the records with the format's client; it returns the schema id.
	produce func(t *testing.T, e *registryEnv, topic string, records []obj) int
}

// orderValue is the value every format's record carries.
func orderValue(execID, corrID, orderID, kind string) obj {
	return obj{"execution_id": execID, "correlation_id": corrID, "order_id": orderID, "kind": kind,
		"total": obj{"units": 1250, "currency": "EUR"}}
}

const avroOrderEvent = `{"type":"record","name":"OrderEvent","namespace":"shop","fields":[
	{"name":"execution_id","type":"string"},{"name":"correlation_id","type":"string"},
	{"name":"order_id","type":"string"},{"name":"kind","type":"string"},
	{"name":"total","type":{"type":"record","name":"Money","fields":[
		{"name":"units","type":"long"},
		{"name":"currency","type":{"type":"enum","name":"Currency","symbols":["EUR","USD"]}}]}}]}`

const jsonSchemaOrderEvent = `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object",
	"required":["order_id","kind"],"properties":{"execution_id":{"type":"string"},"correlation_id":{"type":"string"},
	"order_id":{"type":"string"},"kind":{"type":"string"},
	"total":{"type":"object","properties":{"units":{"type":"integer"},"currency":{"type":"string"}}}}}`

// nodeProduce produces records with the Node client under one schema of type kind.
func nodeProduce(kind, schema string) func(t *testing.T, e *registryEnv, topic string, records []obj) int {
	return func(t *testing.T, e *registryEnv, topic string, records []obj) int {
		subject := topic + "-value"
		for _, r := range records {
			r["topic"], r["subject"] = topic, subject
		}
		ids := e.nodeClient(t, obj{"schemas": []obj{{"subject": subject, "type": kind, "schema": schema}}, "records": records})
		return ids[subject]
	}
}

func pythonProduce(t *testing.T, e *registryEnv, topic string, records []obj) int {
	for _, r := range records {
		r["topic"] = topic
	}
	return e.pythonClient(t, obj{"records": records})[topic+"-value"]
}

var formatCases = map[string]formatCase{
	"avro":       {format: workflow.FormatAvro, produce: nodeProduce("AVRO", avroOrderEvent)},
	"jsonschema": {format: workflow.FormatJSONSchema, produce: nodeProduce("JSON", jsonSchemaOrderEvent)},
	"protobuf":   {format: workflow.FormatProtobuf, produce: pythonProduce},
}

func TestAvroRecords(t *testing.T)       { testFormat(t, "avro") }
func TestProtobufRecords(t *testing.T)   { testFormat(t, "protobuf") }
func TestJSONSchemaRecords(t *testing.T) { testFormat(t, "jsonschema") }

// testFormat: records written by a real client in one format resume a wait by their
// ids and another by payload match, start an execution through a trigger, and, when
// their bytes do not decode or name a schema the registry does not know, are
// dead-lettered with the reason and the schema id; the partition moves on. A plain JSON
// record on a topic declared in that format is dead-lettered as format_mismatch.
func testFormat(t *testing.T, name string) {
	t.Parallel()
	limit(t)
	fc := formatCases[name]
	e := setupRegistry(t)
	s := e.startReplica(t, "r1")
	topic := "orders." + name
	e.put(t, s, e.definition("by-id", obj{"kafkaEvent": obj{"topic": topic, "format": fc.format}, "timeout": 600}))
	e.put(t, s, e.definition("by-match", obj{"events": []obj{{"name": "shipped", "source": "kafka", "topic": topic, "format": fc.format,
		"match": obj{"left": "order_id", "op": "eq", "right": "input.order_id"}}}, "timeout": 600}))
	e.put(t, s, triggered("started", obj{"topic": topic, "format": fc.format, "filter": obj{"kind": "start"},
		"input": obj{"order": "value.order_id", "currency": "value.total.currency"}, "dedupeKey": "value.order_id"}))

	byID := e.startExecution(t, s, "by-id", obj{})
	corr := e.correlationID(t, s, byID)
	byMatch := e.startExecution(t, s, "by-match", obj{"order_id": "O-2"})
	e.correlationID(t, s, byMatch) // its wait is registered: the record may come

	id := fc.produce(t, e, topic, []obj{
		{"value": orderValue(byID, corr, "O-1", "pay")},
		{"value": orderValue("", "", "O-2", "ship")},
		{"value": orderValue("", "", "O-3", "start")},
		{"value": orderValue("", "", "O-4", "pay"), "corrupt": true},
	})
	require.Positive(t, id)
	e.nodeClient(t, obj{"records": []obj{
		{"topic": topic, "value": orderValue("", "", "O-5", "pay"), "schema_id": 9999},
		{"topic": topic, "value": orderValue("", "", "O-6", "start")},
	}})

	v := e.waitStatus(t, s, byID, vocab.ExecCompleted)
	got := waitOutput(t, v)["kafkaEvent"].(map[string]any)
	require.Equal(t, "O-1", got["order_id"])
	require.Equal(t, map[string]any{"units": float64(1250), "currency": "EUR"}, got["total"], "decoded fields by the same paths as JSON's")
	v = e.waitStatus(t, s, byMatch, vocab.ExecCompleted)
	require.Equal(t, "ship", waitOutput(t, v)["shipped"].(map[string]any)["kind"])

	require.Eventually(t, func() bool {
		return e.count(t, `SELECT count(*) FROM executions WHERE workflow_name = 'started'`) == 1
	}, waitTimeout, 20*time.Millisecond, "the trigger started one execution")
	require.Equal(t, 1, e.count(t, `SELECT count(*) FROM executions WHERE workflow_name = 'started'
		AND input->>'order' = 'O-3' AND input->>'currency' = 'EUR'`), "its input read from the decoded value")

	dead := e.deadLetters(t, topic+".dlq", 3)
	reasons := map[string]string{}
	for _, d := range dead {
		reason, _ := headerValue(d, consumer.HeaderReason)
		schemaID, _ := headerValue(d, consumer.HeaderSchemaID)
		reasons[strings.SplitN(reason, ":", 2)[0]] = schemaID
		t.Logf("dead letter at %s: %s (schema id %q)", mustHeader(t, d, consumer.HeaderOffset), reason, schemaID)
	}
	require.Equal(t, map[string]string{"decode_failed": strconv.Itoa(id), "schema_unknown": "9999", "format_mismatch": ""}, reasons)
	e.waitCommitted(t, s, topic, 0, 6, "every record handled: the partition moved past the dead letters")
	counts := s.Consumer.Counts()
	require.Equal(t, int64(3), counts[string(consumer.ReasonPoison)], "%v", counts)
}

func mustHeader(t *testing.T, r *kgoRecord, key string) string {
	t.Helper()
	v, ok := headerValue(r, key)
	require.True(t, ok, "header %s", key)
	return v
}

// TestRegistryOutage: while the schema registry cannot be reached (a proxy cut in front
// of it), records of a schema the replica has not cached are not dead-lettered: their
// partition stalls, reported by the stalled gauge and /readyz, and retries; once the
// registry answers, it drains by itself, every record applied once.
func TestRegistryOutage(t *testing.T) {
	t.Parallel()
	limit(t)
	const n = 20
	e := setupRegistry(t)
	s := e.startReplica(t, "r1")
	topic := "orders.outage"
	e.put(t, s, e.definition("by-id", obj{"kafkaEvent": obj{"topic": topic, "format": "avro"}, "timeout": 600}))
	var execIDs []string
	var records []obj
	for range n {
		id := e.startExecution(t, s, "by-id", obj{})
		execIDs = append(execIDs, id)
		records = append(records, obj{"value": orderValue(id, e.correlationID(t, s, id), "O", "pay")})
	}

	e.proxy.Cut()
	schemaID := formatCases["avro"].produce(t, e, topic, records)
	// The partition stalls at its first record, for the registry.
	var stall consumer.Stall
	require.Eventually(t, func() bool {
		for _, st := range s.Consumer.Stalled() {
			if st.Topic == topic && st.Reason == consumer.StallSchemaRegistry {
				stall = st
				return true
			}
		}
		return false
	}, waitTimeout, 20*time.Millisecond, "the partition reports its stall")
	require.Equal(t, int64(0), stall.Offset, "it waits at its first record")
	require.Contains(t, stall.Error, fmt.Sprintf("schema id %d", schemaID))

	status, body := e.do(t, http.MethodGet, "http://"+s.Addr()+"/readyz", nil)
	require.Equal(t, http.StatusOK, status, "a stalled partition leaves the replica ready: %s", body)
	var ready struct {
		Stalled []consumer.Stall `json:"kafka_stalled_partitions"`
	}
	require.NoError(t, json.Unmarshal(body, &ready))
	require.Len(t, ready.Stalled, 1, "%s", body)
	require.Equal(t, consumer.StallSchemaRegistry, ready.Stalled[0].Reason)
	t.Logf("/readyz while the registry is cut: %s", body)
	gauge := false
	for _, m := range testkit.Scrape(t, s.Addr()) {
		if m.Name == "rendezvous_kafka_partition_stalled" && m.Labels["topic"] == topic && m.Labels["reason"] == string(consumer.StallSchemaRegistry) && m.Value == 1 {
			gauge = true
		}
	}
	require.True(t, gauge, "rendezvous_kafka_partition_stalled{reason=\"schema_registry_unavailable\"} reads 1")
	require.Zero(t, e.applied(t), "nothing applied meanwhile")
	require.Empty(t, e.committed(t, topic), "nothing committed meanwhile")

	e.proxy.Restore()
	e.requireResumedOnce(t, execIDs, 1)
	e.waitCommitted(t, s, topic, 0, n)
	require.Empty(t, s.Consumer.Stalled(), "no longer stalled")
	require.Zero(t, s.Consumer.Counts()[string(consumer.ReasonPoison)], "nothing dead-lettered")
}

// TestFramedKey: a trigger that reads the key gets a key written by a key serializer
// decoded under its own schema (Avro here, beside a JSON value), in its input, its
// dedupe key and _record; a record produced again with the same key starts nothing.
func TestFramedKey(t *testing.T) {
	t.Parallel()
	limit(t)
	e := setupRegistry(t)
	s := e.startReplica(t, "r1")
	const topic = "orders.keyed"
	e.put(t, s, triggered("keyed", obj{"topic": topic, "input": obj{"k": "key", "order": "value.order_id"}, "dedupeKey": "key"}))
	keySchema := `{"type":"record","name":"OrderKey","fields":[{"name":"region","type":"string"},{"name":"n","type":"long"}]}`
	e.nodeClient(t, obj{
		"schemas": []obj{{"subject": topic + "-key", "type": "AVRO", "schema": keySchema}},
		"records": []obj{
			{"topic": topic, "key_subject": topic + "-key", "key": obj{"region": "eu", "n": 7}, "value": obj{"order_id": "O-1"}},
			{"topic": topic, "key_subject": topic + "-key", "key": obj{"region": "eu", "n": 7}, "value": obj{"order_id": "O-1-again"}},
			{"topic": topic, "key_subject": topic + "-key", "key": obj{"region": "us", "n": 7}, "value": obj{"order_id": "O-2"}},
		},
	})
	e.waitCommitted(t, s, topic, 0, 3)
	require.Equal(t, 2, e.count(t, `SELECT count(*) FROM executions WHERE workflow_name = 'keyed'`), "one execution per key")
	var raw []byte
	require.NoError(t, e.direct.QueryRow(t.Context(), `SELECT input FROM executions WHERE input->>'order' = 'O-1'`).Scan(&raw))
	var in map[string]any
	require.NoError(t, json.Unmarshal(raw, &in))
	require.Equal(t, map[string]any{"region": "eu", "n": float64(7)}, in["k"])
	rec := in["_record"].(map[string]any)
	require.Equal(t, in["k"], rec["key"])
	require.Equal(t, `k:{"n":7,"region":"eu"}`, rec["dedupe_key"])
}

// TestOneRegistryCallPerSchema: a thousand records of one schema, written by the Node
// client, cost the replica one request for their schema, counted at the registry.
func TestOneRegistryCallPerSchema(t *testing.T) {
	t.Parallel()
	limit(t)
	const n = 1000
	e := setupRegistry(t)
	var fetches atomic.Int64
	e.reg.Intercept(func(_ http.ResponseWriter, req *http.Request) bool {
		if req.Method == http.MethodGet && strings.HasPrefix(req.URL.Path, "/schemas/ids/") && req.UserAgent() == "rendezvous" {
			fetches.Add(1)
		}
		return false
	})
	s := e.startReplica(t, "r1")
	const topic = "orders.many"
	e.put(t, s, triggered("many", obj{"topic": topic, "format": "avro", "filter": obj{"kind": "start"}}))
	records := make([]obj, n)
	for i := range records {
		records[i] = obj{"value": orderValue("", "", fmt.Sprintf("O-%d", i), "pay")}
	}
	formatCases["avro"].produce(t, e, topic, records)
	e.waitCommitted(t, s, topic, 0, n)
	require.Equal(t, int64(n), s.Consumer.Counts()[string(consumer.ReasonMissingID)], "every record decoded and read")
	require.Equal(t, int64(1), fetches.Load(), "one request for the schema")
}
