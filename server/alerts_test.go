package server_test

import (
	"context"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.yaml.in/yaml/v3"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/harness/testkit"
	"github.com/rendezvous-run/rendezvous/server"
)

// series is what one metric family exports: its label names and the values seen.
type series map[string]map[string]bool

// scrape reads /metrics of a running replica into family → label → values.
func scrape(t *testing.T, addr string) map[string]series {
	t.Helper()
	out := map[string]series{}
	for _, s := range testkit.Scrape(t, addr) {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			// A histogram's samples also count as the family itself.
			if base, ok := strings.CutSuffix(s.Name, suffix); ok && out[base] == nil {
				out[base] = series{}
			}
		}
		if out[s.Name] == nil {
			out[s.Name] = series{}
		}
		for k, v := range s.Labels {
			if out[s.Name][k] == nil {
				out[s.Name][k] = map[string]bool{}
			}
			out[s.Name][k][v] = true
		}
	}
	return out
}

// promqlWords are the PromQL functions, aggregations and keywords the rules may use;
// every other identifier in an expression must be a metric the service exports.
var promqlWords = []string{"sum", "max", "min", "avg", "count", "rate", "increase", "irate", "by", "without",
	"and", "or", "unless", "on", "ignoring", "group_left", "group_right", "histogram_quantile", "bool", "offset"}

// TestAlertRules: the rules file in deploy/ uses only metrics (and label values) that a
// real replica exports at /metrics — so the alerts cannot silently watch nothing.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../deploy/prometheus/alerts.yaml")
	require.NoError(t, err)
	var file struct {
		Groups []struct {
			Name  string
			Rules []struct {
				Alert, Expr, For string
				Labels           map[string]string
				Annotations      map[string]string
			}
		}
	}
	require.NoError(t, yaml.Unmarshal(raw, &file))
	require.NotEmpty(t, file.Groups)

	s := startServices(t, dbtest.NewSchema(t).URL, 1)[0]
	exported := scrape(t, s.Addr())
	// The Kafka alerts watch metrics only a consumer exports, and a failed dead-letter
	// write only once one failed: a second replica consumes a topic whose dead-letter
	// topic refuses writes, and meets a poison record.
	maps.Copy(exported, scrapeStalledConsumer(t))

	matcher := regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}`)
	labelMatch := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	grouping := regexp.MustCompile(`\b(by|without|on|ignoring)\s*\([^)]*\)`)
	ident := regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	var alerts []string
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			require.NotEmpty(t, r.Expr, r.Alert)
			require.NotEmpty(t, r.Annotations["summary"], r.Alert)
			require.Contains(t, []string{"warning", "critical"}, r.Labels["severity"], r.Alert)
			// Label matchers name labels the metric has, with values it exports.
			for _, m := range matcher.FindAllStringSubmatch(r.Expr, -1) {
				fam, ok := exported[m[1]]
				require.True(t, ok, "%s: %s is not exported", r.Alert, m[1])
				for _, lm := range labelMatch.FindAllStringSubmatch(m[2], -1) {
					require.Contains(t, fam, lm[1], "%s: %s has no label %s", r.Alert, m[1], lm[1])
					if lm[2] == "=" {
						require.True(t, fam[lm[1]][lm[3]], "%s: %s{%s} never takes the value %q", r.Alert, m[1], lm[1], lm[3])
					}
				}
			}
			// Every other word is a PromQL word or an exported metric.
			expr := matcher.ReplaceAllString(r.Expr, "$1")
			expr = grouping.ReplaceAllString(expr, "$1")
			expr = regexp.MustCompile(`\[[^\]]*\]`).ReplaceAllString(expr, "")
			metrics := 0
			for _, w := range ident.FindAllString(expr, -1) {
				if slices.Contains(promqlWords, w) {
					continue
				}
				_, ok := exported[w]
				require.True(t, ok, "%s: %s is neither PromQL nor a metric the service exports", r.Alert, w)
				require.True(t, strings.HasPrefix(w, "rendezvous_"), "%s: %s is not the service's own metric", r.Alert, w)
				metrics++
			}
			require.Positive(t, metrics, "%s watches no metric", r.Alert)
		}
	}
	// The documented alerts, each present.
	require.ElementsMatch(t, []string{"RendezvousHighTimeoutRate", "RendezvousStaleWaits",
		"RendezvousWaitsWithoutEvents", "RendezvousReplicaSilent",
		"RendezvousResumeConflictRate", "RendezvousDatabaseErrors",
		"RendezvousKafkaPartitionStalled", "RendezvousDeadLetterWriteFailures", "RendezvousSchemaRegistryUnavailable"}, alerts)
}

// scrapeStalledConsumer runs a replica whose one partition is stalled by a failing
// dead-letter write, and scrapes it once the failure is counted.
func scrapeStalledConsumer(t *testing.T) map[string]series {
	t.Helper()
	const topic = "alerts.events"
	cluster, prod := startKafka(t)
	cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic + ".dlq", Err: kerr.InvalidRecord, Count: -1})
	cfg := kafkaConfig(cluster)
	cfg.Topics = []string{topic}
	svc := runService(t, server.Config{DatabaseURL: dbtest.NewSchema(t).URL, InstanceID: "alerts", AutoMigrate: true, Kafka: cfg})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("not json")}).FirstErr())
	var got map[string]series
	require.Eventually(t, func() bool {
		got = scrape(t, svc.Addr())
		return got["rendezvous_dead_letter_write_failures_total"] != nil &&
			got["rendezvous_kafka_partition_stalled"]["reason"]["dead_letter_write_failed"]
	}, 20*time.Second, 50*time.Millisecond, "the failed dead-letter write is counted and the partition reported stalled")
	return got
}
