package main

// Checks of deploy/docker-compose.yml; see deploy_test.go.

import (
	"encoding/json"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/rendezvous-run/rendezvous/examples"
	"github.com/rendezvous-run/rendezvous/server"
)

// stringList is a compose value that may be a string or a list of strings.
type stringList []string

func (l *stringList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*l = strings.Fields(n.Value)
		return nil
	}
	var s []string
	err := n.Decode(&s)
	*l = s
	return err
}

// envMap is a compose environment: a mapping, or a list of KEY=value.
type envMap map[string]string

func (m *envMap) UnmarshalYAML(n *yaml.Node) error {
	*m = envMap{}
	if n.Kind == yaml.SequenceNode {
		var list []string
		if err := n.Decode(&list); err != nil {
			return err
		}
		for _, kv := range list {
			k, v, _ := strings.Cut(kv, "=")
			(*m)[k] = v
		}
		return nil
	}
	var raw map[string]string
	err := n.Decode(&raw)
	*m = raw
	return err
}

type composeService struct {
	Image string `yaml:"image"`
	Build *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Command     stringList `yaml:"command"`
	Entrypoint  stringList `yaml:"entrypoint"`
	Environment envMap     `yaml:"environment"`
	Ports       []string   `yaml:"ports"`
	Volumes     []string   `yaml:"volumes"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck *struct {
		Test    []string `yaml:"test"`
		Disable bool     `yaml:"disable"`
	} `yaml:"healthcheck"`
}

func TestComposeFile(t *testing.T) {
	t.Parallel()
	bin := releaseBinary(t)
	routes := serviceRoutes(t)
	img := dockerImage(t)
	raw, err := os.ReadFile(filepath.Join(repoRoot, "deploy/docker-compose.yml"))
	require.NoError(t, err)
	var file struct {
		Services map[string]composeService `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &file))
	services := file.Services
	commands := commandNames()

	// Containers of our image, by the command they run.
	type ours struct {
		name    string
		svc     composeService
		command []string
		env     map[string]string
	}
	var replicas []ours
	var migrate *ours
	for name, svc := range services {
		if svc.Build == nil {
			continue
		}
		where := "compose service " + name
		require.FileExists(t, filepath.Join(repoRoot, "deploy", svc.Build.Context, svc.Build.Dockerfile), "%s: build context and Dockerfile", where)
		require.Equal(t, filepath.Clean(repoRoot), filepath.Clean(filepath.Join(repoRoot, "deploy", svc.Build.Context)), "%s: the build context is the repository", where)
		require.Empty(t, svc.Entrypoint, "%s: keep the image's entrypoint", where)
		command := []string(svc.Command)
		if len(command) == 0 {
			command = img.cmd
		}
		require.Contains(t, commands, command[0], "%s: command %v is not a rendezvous command", where, command)
		o := ours{name: name, svc: svc, command: command, env: svc.Environment}
		runs := []string{command[0]}
		if hc := svc.Healthcheck; command[0] == "serve" && (hc == nil || !hc.Disable) {
			runs = append(runs, "healthcheck")
		}
		checkEnvRead(t, where, o.env, readsEnv(t, bin, runs...))
		switch command[0] {
		case "serve":
			replicas = append(replicas, o)
		case "migrate":
			require.Nil(t, migrate, "one migrate service")
			migrate = &o
		}
	}
	slices.SortFunc(replicas, func(a, b ours) int { return strings.Compare(a.name, b.name) })
	require.Len(t, replicas, 3, "three rendezvous replicas")

	// The broker: the service advertising the address replicas connect to.
	advertised := map[string]string{} // host:port -> service
	for name, svc := range services {
		for l := range strings.SplitSeq(svc.Environment["KAFKA_ADVERTISED_LISTENERS"], ",") {
			if _, addr, ok := strings.Cut(l, "://"); ok {
				advertised[addr] = name
			}
		}
	}

	hostPorts := map[string]string{}
	instanceIDs := map[string]string{}
	var cfgs []server.Config
	for _, r := range replicas {
		where := "compose service " + r.name
		cfg := serveConfig(t, where, r.env, r.command[1:])
		cfgs = append(cfgs, cfg)
		httpPort := port(t, cfg.HTTPAddr)

		require.NotEmpty(t, cfg.InstanceID, "%s: set RENDEZVOUS_INSTANCE_ID (container hostnames are random)", where)
		require.Empty(t, instanceIDs[cfg.InstanceID], "%s: instance id %q already used by %s", where, cfg.InstanceID, instanceIDs[cfg.InstanceID])
		instanceIDs[cfg.InstanceID] = r.name

		for _, p := range r.svc.Ports {
			f := strings.Split(p, ":")
			require.GreaterOrEqual(t, len(f), 2, "%s: port %q: publish host:container", where, p)
			require.Equal(t, strconv.Itoa(httpPort), f[len(f)-1], "%s: publishes %q, but listens on %d", where, p, httpPort)
			host := strings.Join(f[:len(f)-1], ":")
			require.Empty(t, hostPorts[host], "%s: host port %s already published by %s", where, host, hostPorts[host])
			hostPorts[host] = r.name
		}

		// Healthcheck: compose's own, else the image's.
		test := append([]string{"CMD"}, img.healthcheck...)
		if hc := r.svc.Healthcheck; hc != nil && len(hc.Test) > 0 {
			test = hc.Test
		}
		require.Equal(t, "CMD", test[0], "%s: healthcheck in exec form: the image has no shell", where)
		require.Equal(t, img.entrypoint[0], test[1], "%s: healthcheck runs the image's binary", where)
		require.Equal(t, "healthcheck", test[2], where)
		target := healthcheckTarget(t, where, r.env, test[3:])
		require.True(t, serves(routes, "GET", target.Path), "%s: healthcheck GETs %s, which the service does not serve", where, target)
		require.Equal(t, httpPort, port(t, target.Host), "%s: healthcheck port", where)

		// Dependencies are reachable where the replica looks for them.
		dbURL, err := url.Parse(cfg.DatabaseURL)
		require.NoError(t, err, where)
		pg, ok := services[dbURL.Hostname()]
		require.True(t, ok, "%s: DATABASE_URL host %q is no service", where, dbURL.Hostname())
		require.Equal(t, "5432", dbURL.Port(), where)
		pass, _ := dbURL.User.Password()
		require.Equal(t, pg.Environment["POSTGRES_USER"], dbURL.User.Username(), "%s: database user", where)
		require.Equal(t, pg.Environment["POSTGRES_PASSWORD"], pass, "%s: database password", where)
		require.Equal(t, pg.Environment["POSTGRES_DB"], strings.TrimPrefix(dbURL.Path, "/"), "%s: database name", where)
		require.NotEmpty(t, cfg.Kafka.Brokers, "%s: KAFKA_BROKERS", where)
		for _, b := range cfg.Kafka.Brokers {
			broker, ok := advertised[b]
			require.True(t, ok, "%s: broker %s is not an advertised listener of any service (%v)", where, b, advertised)
			require.Equal(t, strings.Split(b, ":")[0], broker, "%s: broker address names the broker service", where)
			require.True(t, dependsOn(services, r.name, broker), "%s: starts after %s", where, broker)
		}

		// Migrations: applied once by the migrate service, or by the replica itself.
		if !cfg.AutoMigrate {
			require.NotNil(t, migrate, "%s: RENDEZVOUS_NO_MIGRATE without a migrate service", where)
			require.Equal(t, "service_completed_successfully", r.svc.DependsOn[migrate.name].Condition, "%s: starts after the migrations", where)
			require.Equal(t, cfg.DatabaseURL, migrate.env["DATABASE_URL"], "%s: migrate targets the same database", where)
			require.True(t, dependsOn(services, migrate.name, dbURL.Hostname()), "%s starts after %s", migrate.name, dbURL.Hostname())
		}
	}

	t.Run("topics", func(t *testing.T) {
		// The example definitions' topics, every replica's extra topics, and each one's
		// dead-letter topic, created before any replica starts.
		consumed := exampleTopics(t)
		for _, cfg := range cfgs {
			consumed = append(consumed, cfg.Kafka.Topics...)
			consumed = append(consumed, cfg.Kafka.WithDefaults().EventsTopic)
		}
		want := map[string]bool{}
		for _, topic := range consumed {
			want[topic] = true
			for _, cfg := range cfgs {
				want[topic+cfg.Kafka.DLQSuffix] = true
			}
		}
		var creator string
		for name, svc := range services {
			if _, ok := svc.Environment["TOPICS"]; ok {
				creator = name
			}
		}
		require.NotEmpty(t, creator, "a service creating the topics (TOPICS, PARTITIONS)")
		env := services[creator].Environment
		for topic := range want {
			require.Contains(t, strings.Fields(env["TOPICS"]), topic, "topic %s is not created", topic)
		}
		partitions, err := strconv.Atoi(env["PARTITIONS"])
		require.NoError(t, err)
		require.GreaterOrEqual(t, partitions, len(replicas), "partitions ≥ replicas, or some replicas consume nothing")
		require.Contains(t, advertised, env["BOOTSTRAP"], "topics are created on the broker")
		for _, r := range replicas {
			require.Equal(t, "service_completed_successfully", r.svc.DependsOn[creator].Condition, "%s starts after the topics exist", r.name)
		}
	})

	t.Run("pools fit PostgreSQL", func(t *testing.T) {
		maxConns := postgresMaxConnectionsDefault
		dbURL, err := url.Parse(cfgs[0].DatabaseURL)
		require.NoError(t, err)
		for _, w := range services[dbURL.Hostname()].Command { // postgres -c max_connections=N
			if v, ok := strings.CutPrefix(w, "max_connections="); ok {
				maxConns, err = strconv.Atoi(v)
				require.NoError(t, err)
			}
		}
		total := 0
		for _, cfg := range cfgs {
			total += int(cfg.WithDefaults().DBMaxConns) + listenerConns
		}
		require.LessOrEqual(t, total, maxConns-postgresSuperuserReserved,
			"replicas' pools (+ listener) exceed PostgreSQL's max_connections %d", maxConns)
	})

	t.Run("example loader", func(t *testing.T) {
		var loader string
		for name, svc := range services {
			if strings.Contains(strings.Join(svc.Command, " "), "/api/v1/") {
				loader = name
			}
		}
		require.NotEmpty(t, loader, "a service storing the example definitions through the API")
		svc := services[loader]
		script := strings.Join(svc.Command, " ")
		require.True(t, slices.ContainsFunc(svc.Volumes, func(v string) bool {
			src, _, _ := strings.Cut(v, ":")
			return filepath.Clean(filepath.Join(repoRoot, "deploy", src)) == filepath.Join(repoRoot, "examples")
		}), "%s mounts ../examples", loader)
		method := "GET"
		if m := regexp.MustCompile(`-X\s+([A-Z]+)`).FindStringSubmatch(script); m != nil {
			method = m[1]
		}
		urls := regexp.MustCompile(`https?://([A-Za-z0-9_.-]+):(\d+)(/[^\s"']*)`).FindAllStringSubmatch(script, -1)
		require.NotEmpty(t, urls)
		for _, u := range urls {
			i := slices.IndexFunc(replicas, func(r ours) bool { return r.name == u[1] })
			require.GreaterOrEqual(t, i, 0, "%s calls %s, which is not a replica", loader, u[1])
			require.Equal(t, strconv.Itoa(port(t, cfgs[i].HTTPAddr)), u[2], "%s: port of %s", loader, u[1])
			require.True(t, serves(routes, method, u[3]), "%s: %s %s is not a route", loader, method, u[3])
			require.Equal(t, "service_healthy", svc.DependsOn[u[1]].Condition, "%s waits for %s", loader, u[1])
		}
	})

	t.Run("make compose-up", func(t *testing.T) {
		mk, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
		require.NoError(t, err)
		for _, target := range []string{"compose-up", "compose-down"} {
			m := regexp.MustCompile(`(?m)^` + target + `:.*\n\t(.*)`).FindSubmatch(mk)
			require.NotNil(t, m, "Makefile target %s", target)
			require.Contains(t, string(m[1]), "-f deploy/docker-compose.yml", "make %s uses this file", target)
		}
	})
}

// dependsOn reports whether service from starts after service to, directly or through
// other services' depends_on.
func dependsOn(services map[string]composeService, from, to string) bool {
	seen := map[string]bool{}
	next := []string{from}
	for len(next) > 0 {
		name := next[0]
		next = next[1:]
		for dep := range services[name].DependsOn {
			if dep == to {
				return true
			}
			if !seen[dep] {
				seen[dep] = true
				next = append(next, dep)
			}
		}
	}
	return false
}

// exampleTopics are the Kafka topics of the embedded example definitions: kafkaEvent's
// and those of events with source kafka.
func exampleTopics(t *testing.T) []string {
	t.Helper()
	files, err := fs.Glob(examples.Definitions, "*.json")
	require.NoError(t, err)
	var topics []string
	for _, f := range files {
		raw, err := fs.ReadFile(examples.Definitions, f)
		require.NoError(t, err)
		var def struct {
			Nodes []struct {
				Type string `json:"type"`
				Data struct {
					KafkaEvent *struct {
						Topic string `json:"topic"`
					} `json:"kafkaEvent"`
					Events []struct {
						Source string `json:"source"`
						Topic  string `json:"topic"`
					} `json:"events"`
				} `json:"data"`
			} `json:"nodes"`
		}
		require.NoError(t, json.Unmarshal(raw, &def), f)
		for _, n := range def.Nodes {
			if n.Type != "wait_events" {
				continue
			}
			if n.Data.KafkaEvent != nil && !slices.Contains(topics, n.Data.KafkaEvent.Topic) {
				topics = append(topics, n.Data.KafkaEvent.Topic)
			}
			for _, e := range n.Data.Events {
				if e.Source == "kafka" && !slices.Contains(topics, e.Topic) {
					topics = append(topics, e.Topic)
				}
			}
		}
	}
	require.NotEmpty(t, topics, "sanity: the examples include a Kafka wait")
	return topics
}
