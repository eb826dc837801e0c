package main

// Checks of deploy/k8s; see deploy_test.go.

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// intOrString is a Kubernetes IntOrString, kept as written.
type intOrString string

func (v *intOrString) UnmarshalYAML(n *yaml.Node) error {
	*v = intOrString(n.Value)
	return nil
}

type k8sMeta struct {
	Name        string            `yaml:"name"`
	Namespace   string            `yaml:"namespace"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type k8sProbe struct {
	HTTPGet *struct {
		Path string      `yaml:"path"`
		Port intOrString `yaml:"port"`
	} `yaml:"httpGet"`
	TimeoutSeconds int `yaml:"timeoutSeconds"`
}

type k8sEnvVar struct {
	Name      string  `yaml:"name"`
	Value     *string `yaml:"value"`
	ValueFrom *struct {
		FieldRef *struct {
			FieldPath string `yaml:"fieldPath"`
		} `yaml:"fieldRef"`
		SecretKeyRef *struct {
			Name     string `yaml:"name"`
			Key      string `yaml:"key"`
			Optional bool   `yaml:"optional"`
		} `yaml:"secretKeyRef"`
	} `yaml:"valueFrom"`
}

type k8sContainer struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Ports   []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	EnvFrom []struct {
		ConfigMapRef *struct {
			Name string `yaml:"name"`
		} `yaml:"configMapRef"`
		SecretRef *struct {
			Name string `yaml:"name"`
		} `yaml:"secretRef"`
	} `yaml:"envFrom"`
	Env            []k8sEnvVar `yaml:"env"`
	StartupProbe   *k8sProbe   `yaml:"startupProbe"`
	LivenessProbe  *k8sProbe   `yaml:"livenessProbe"`
	ReadinessProbe *k8sProbe   `yaml:"readinessProbe"`
	Lifecycle      *struct {
		PreStop *struct {
			Sleep *struct {
				Seconds int `yaml:"seconds"`
			} `yaml:"sleep"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
}

type k8sDeployment struct {
	Metadata k8sMeta `yaml:"metadata"`
	Spec     struct {
		Replicas int `yaml:"replicas"`
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Strategy struct {
			RollingUpdate struct {
				MaxSurge       intOrString `yaml:"maxSurge"`
				MaxUnavailable intOrString `yaml:"maxUnavailable"`
			} `yaml:"rollingUpdate"`
		} `yaml:"strategy"`
		Template struct {
			Metadata k8sMeta `yaml:"metadata"`
			Spec     struct {
				TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
				SecurityContext               struct {
					RunAsNonRoot bool  `yaml:"runAsNonRoot"`
					RunAsUser    int64 `yaml:"runAsUser"`
				} `yaml:"securityContext"`
				Containers []k8sContainer `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type k8sService struct {
	Metadata k8sMeta `yaml:"metadata"`
	Spec     struct {
		Selector map[string]string `yaml:"selector"`
		Ports    []struct {
			Port       int         `yaml:"port"`
			TargetPort intOrString `yaml:"targetPort"`
		} `yaml:"ports"`
	} `yaml:"spec"`
}

type k8sPDB struct {
	Spec struct {
		MinAvailable   *intOrString `yaml:"minAvailable"`
		MaxUnavailable *intOrString `yaml:"maxUnavailable"`
		Selector       struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
	} `yaml:"spec"`
}

// configMapGen is a kustomize configMapGenerator entry.
type configMapGen struct {
	Name     string   `yaml:"name"`
	Literals []string `yaml:"literals"`
}

type k8sObject struct {
	File, Kind string
	Meta       k8sMeta
	node       *yaml.Node
}

func (o k8sObject) decode(t *testing.T, v any) {
	t.Helper()
	require.NoError(t, o.node.Decode(v), "%s: %s %s", o.File, o.Kind, o.Meta.Name)
}

func TestKubernetesManifests(t *testing.T) {
	t.Parallel()
	bin := releaseBinary(t)
	routes := serviceRoutes(t)
	img := dockerImage(t)
	dir := filepath.Join(repoRoot, "deploy/k8s")

	// Every file parses; nothing names a namespace.
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	require.NoError(t, err)
	var objects []k8sObject
	var kustomization struct {
		Namespace    string         `yaml:"namespace"`
		Resources    []string       `yaml:"resources"`
		ConfigMapGen []configMapGen `yaml:"configMapGenerator"`
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		base := filepath.Base(f)
		if base == "kustomization.yaml" {
			require.NoError(t, yaml.Unmarshal(raw, &kustomization), base)
			require.Empty(t, kustomization.Namespace, "kustomization.yaml: namespace-agnostic")
			continue
		}
		dec := yaml.NewDecoder(strings.NewReader(string(raw)))
		for {
			var n yaml.Node
			if err := dec.Decode(&n); errors.Is(err, io.EOF) {
				break
			} else {
				require.NoError(t, err, base)
			}
			var head struct {
				APIVersion string  `yaml:"apiVersion"`
				Kind       string  `yaml:"kind"`
				Metadata   k8sMeta `yaml:"metadata"`
			}
			require.NoError(t, n.Decode(&head), base)
			require.NotEmpty(t, head.APIVersion, base)
			require.NotEmpty(t, head.Kind, base)
			require.NotEmpty(t, head.Metadata.Name, base)
			require.Empty(t, head.Metadata.Namespace, "%s: namespace-agnostic", base)
			objects = append(objects, k8sObject{File: base, Kind: head.Kind, Meta: head.Metadata, node: &n})
		}
	}

	// kustomization lists every manifest except the examples, which hold placeholders.
	var want []string
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" && !strings.HasSuffix(b, ".example.yaml") {
			want = append(want, b)
		}
	}
	got := slices.Sorted(slices.Values(kustomization.Resources))
	require.Equal(t, want, got, "kustomization.yaml resources: every manifest but *.example.yaml")

	byKind := map[string][]k8sObject{}
	for _, o := range objects {
		byKind[o.Kind] = append(byKind[o.Kind], o)
	}
	require.Len(t, byKind["Deployment"], 1)
	var dep k8sDeployment
	byKind["Deployment"][0].decode(t, &dep)
	pod := dep.Spec.Template
	require.Len(t, pod.Spec.Containers, 1)
	c := pod.Spec.Containers[0]
	where := "Deployment " + dep.Metadata.Name

	require.Equal(t, 3, dep.Spec.Replicas, where)
	for k, v := range dep.Spec.Selector.MatchLabels {
		require.Equal(t, v, pod.Metadata.Labels[k], "%s: selector matches the pod labels", where)
	}

	// The command: the image's entrypoint and a rendezvous command.
	require.True(t, len(c.Command) == 0 || slices.Equal(c.Command, img.entrypoint), "%s: command %v overrides the image's entrypoint", where, c.Command)
	args := c.Args
	if len(args) == 0 {
		args = img.cmd
	}
	require.Contains(t, commandNames(), args[0], "%s: args %v: not a rendezvous command", where, args)
	require.Equal(t, "serve", args[0], where)

	// The environment: ConfigMap literals, then env; secrets by reference only.
	var secretName string
	var secretExample map[string]string
	for _, o := range byKind["Secret"] {
		var s struct {
			StringData map[string]string `yaml:"stringData"`
		}
		o.decode(t, &s)
		require.True(t, strings.HasSuffix(o.File, ".example.yaml"), "%s: no Secret with values in the manifests", o.File)
		secretName, secretExample = o.Meta.Name, s.StringData
	}
	env := map[string]string{}
	configMapKeys := map[string]bool{}
	for _, ef := range c.EnvFrom {
		require.Nil(t, ef.SecretRef, "%s: name the secret keys one by one", where)
		require.NotNil(t, ef.ConfigMapRef, where)
		i := slices.IndexFunc(kustomization.ConfigMapGen, func(g configMapGen) bool { return g.Name == ef.ConfigMapRef.Name })
		require.GreaterOrEqual(t, i, 0, "%s: ConfigMap %s is not generated by kustomization.yaml", where, ef.ConfigMapRef.Name)
		for _, l := range kustomization.ConfigMapGen[i].Literals {
			k, v, ok := strings.Cut(l, "=")
			require.True(t, ok, "ConfigMap literal %q", l)
			env[k], configMapKeys[k] = v, true
		}
	}
	fromSecret := map[string]bool{}
	for _, e := range c.Env {
		switch {
		case e.Value != nil:
			env[e.Name] = *e.Value
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			require.Equal(t, secretName, ref.Name, "%s: %s: the Secret secret.example.yaml describes", where, e.Name)
			v, ok := secretExample[ref.Key]
			require.True(t, ok, "%s: %s reads key %q of Secret %s, which secret.example.yaml does not show", where, e.Name, ref.Key, ref.Name)
			env[e.Name], fromSecret[e.Name] = v, true
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			env[e.Name] = "rendezvous-5d4f8b7c9-x2x7q" // what metadata.name looks like
		default:
			t.Fatalf("%s: env %s: unsupported source", where, e.Name)
		}
	}
	checkEnvRead(t, where, env, readsEnv(t, bin, args[0]))
	for _, k := range secretEnv {
		require.False(t, configMapKeys[k], "%s belongs in the Secret, not the ConfigMap", k)
		if _, set := env[k]; set {
			require.True(t, fromSecret[k], "%s: %s must come from a secretKeyRef", where, k)
		}
	}
	require.True(t, fromSecret["DATABASE_URL"], "%s: DATABASE_URL from the Secret", where)
	i := slices.IndexFunc(c.Env, func(e k8sEnvVar) bool { return e.Name == "RENDEZVOUS_INSTANCE_ID" })
	require.GreaterOrEqual(t, i, 0, "%s: RENDEZVOUS_INSTANCE_ID", where)
	require.True(t, c.Env[i].ValueFrom != nil && c.Env[i].ValueFrom.FieldRef != nil, "%s: RENDEZVOUS_INSTANCE_ID from a fieldRef", where)
	require.Equal(t, "metadata.name", c.Env[i].ValueFrom.FieldRef.FieldPath, "%s: the instance id is the pod name", where)
	cfg := serveConfig(t, where, env, args[1:])

	// Ports agree: the listener, the container port, probes, Service, Prometheus.
	httpPort := port(t, cfg.HTTPAddr)
	require.Len(t, c.Ports, 1, where)
	require.Equal(t, httpPort, c.Ports[0].ContainerPort, "%s: containerPort is the --http-addr port", where)
	resolve := func(p intOrString) int {
		if n, err := strconv.Atoi(string(p)); err == nil {
			return n
		}
		require.Equal(t, c.Ports[0].Name, string(p), "%s: no container port named %q", where, p)
		return c.Ports[0].ContainerPort
	}
	probes := map[string]*k8sProbe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe}
	for name, p := range probes {
		if p == nil {
			continue
		}
		require.NotNil(t, p.HTTPGet, "%s: %s probe over HTTP", where, name)
		require.True(t, serves(routes, "GET", p.HTTPGet.Path), "%s: %s probe GETs %s, which the service does not serve (routes: %v)", where, name, p.HTTPGet.Path, routes)
		require.Equal(t, httpPort, resolve(p.HTTPGet.Port), "%s: %s probe port", where, name)
	}
	// Liveness must not depend on PostgreSQL or Kafka (an outage would restart every pod);
	// readiness must.
	require.NotNil(t, c.LivenessProbe, where)
	require.NotNil(t, c.ReadinessProbe, where)
	require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path, where)
	require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path, where)

	ann := pod.Metadata.Annotations
	require.Equal(t, "true", ann["prometheus.io/scrape"], where)
	require.Equal(t, strconv.Itoa(httpPort), ann["prometheus.io/port"], "%s: scrape port", where)
	require.True(t, serves(routes, "GET", ann["prometheus.io/path"]),
		"%s: Prometheus scrapes %s, which the service does not serve", where, ann["prometheus.io/path"])

	require.Len(t, byKind["Service"], 1)
	var svc k8sService
	byKind["Service"][0].decode(t, &svc)
	for k, v := range svc.Spec.Selector {
		require.Equal(t, v, pod.Metadata.Labels[k], "Service selector matches the pods")
	}
	require.NotEmpty(t, svc.Spec.Ports)
	for _, p := range svc.Spec.Ports {
		require.Equal(t, httpPort, resolve(p.TargetPort), "Service targetPort")
	}

	t.Run("shutdown fits the grace period", func(t *testing.T) {
		// SIGTERM comes after preStop; then HTTP drains (HTTPShutdown), then the executor
		// (ShutdownTimeout, as configured here). Between the two the consumer finishes
		// its batch in hand; its bounds are internal to package consumer, so the margin
		// for them is the manifest's (see the comment there), not computed here.
		preStop := 0
		if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
			preStop = c.Lifecycle.PreStop.Sleep.Seconds
		}
		d := cfg.WithDefaults()
		budget := time.Duration(preStop)*time.Second + d.HTTPShutdown + cfg.Executor.WithDefaults().ShutdownTimeout
		grace := time.Duration(pod.Spec.TerminationGracePeriodSeconds) * time.Second
		require.Greater(t, grace, budget, "terminationGracePeriodSeconds must exceed preStop + HTTP shutdown + --shutdown-timeout")
	})

	t.Run("migrations", func(t *testing.T) {
		// Either every pod migrates at start (advisory lock), or a Job runs `migrate`.
		if cfg.AutoMigrate {
			return
		}
		found := false
		for _, o := range byKind["Job"] {
			var job struct {
				Spec struct {
					Template struct {
						Spec struct {
							Containers []k8sContainer `yaml:"containers"`
						} `yaml:"spec"`
					} `yaml:"template"`
				} `yaml:"spec"`
			}
			o.decode(t, &job)
			for _, jc := range job.Spec.Template.Spec.Containers {
				found = found || (len(jc.Args) > 0 && jc.Args[0] == "migrate")
			}
		}
		require.True(t, found, "RENDEZVOUS_NO_MIGRATE is set, but no Job runs rendezvous migrate")
	})

	t.Run("pod", func(t *testing.T) {
		sc := pod.Spec.SecurityContext
		require.True(t, sc.RunAsNonRoot, where)
		require.Equal(t, img.uid, sc.RunAsUser, "%s: the image's user", where)
		for _, r := range []string{"cpu", "memory"} {
			require.NotEmpty(t, c.Resources.Requests[r], "%s: resources.requests.%s", where, r)
		}
		require.NotEmpty(t, c.Resources.Limits["memory"], "%s: resources.limits.memory", where)

		// During a rollout, replicas + surge pods hold a pool and a listener each.
		surge, err := strconv.Atoi(string(dep.Spec.Strategy.RollingUpdate.MaxSurge))
		require.NoError(t, err, "%s: maxSurge as a number of pods", where)
		conns := (dep.Spec.Replicas + surge) * (int(cfg.WithDefaults().DBMaxConns) + listenerConns)
		require.LessOrEqual(t, conns, postgresMaxConnectionsDefault-postgresSuperuserReserved,
			"%s: %d connections during a rollout exceed a default PostgreSQL", where, conns)
	})

	t.Run("disruption budget", func(t *testing.T) {
		require.Len(t, byKind["PodDisruptionBudget"], 1)
		var pdb k8sPDB
		byKind["PodDisruptionBudget"][0].decode(t, &pdb)
		for k, v := range pdb.Spec.Selector.MatchLabels {
			require.Equal(t, v, pod.Metadata.Labels[k], "PodDisruptionBudget selector matches the pods")
		}
		// It must allow one eviction at a time, or node drains block forever.
		switch {
		case pdb.Spec.MaxUnavailable != nil:
			n, err := strconv.Atoi(string(*pdb.Spec.MaxUnavailable))
			require.NoError(t, err)
			require.Positive(t, n)
		case pdb.Spec.MinAvailable != nil:
			n, err := strconv.Atoi(string(*pdb.Spec.MinAvailable))
			require.NoError(t, err)
			require.Less(t, n, dep.Spec.Replicas)
		default:
			t.Fatal("PodDisruptionBudget without minAvailable or maxUnavailable")
		}
	})
}
