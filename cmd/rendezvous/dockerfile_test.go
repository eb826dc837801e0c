package main

// Checks of the Dockerfile; see deploy_test.go.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/server"
)

type dockerStage struct {
	From, Name string
	Instr      [][2]string // keyword (upper case), arguments
}

func parseDockerfile(t *testing.T) []*dockerStage {
	t.Helper()
	stages, err := readDockerfile()
	require.NoError(t, err)
	return stages
}

// readDockerfile splits the Dockerfile into stages of instructions, joining continued
// lines and dropping comments (which Docker also drops inside continuations).
func readDockerfile() ([]*dockerStage, error) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		return nil, err
	}
	var stages []*dockerStage
	var cur strings.Builder
	for line := range strings.SplitSeq(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if rest, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(rest + " ")
			continue
		}
		cur.WriteString(line)
		keyword, args, _ := strings.Cut(cur.String(), " ")
		cur.Reset()
		keyword, args = strings.ToUpper(keyword), strings.TrimSpace(args)
		if keyword == "FROM" {
			f := strings.Fields(args)
			st := &dockerStage{From: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.Name = f[2]
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) == 0 {
			if keyword == "ARG" {
				continue
			}
			return nil, fmt.Errorf("Dockerfile: %s before FROM", keyword)
		}
		st := stages[len(stages)-1]
		st.Instr = append(st.Instr, [2]string{keyword, args})
	}
	return stages, nil
}

func (s *dockerStage) all(keyword string) []string {
	var out []string
	for _, in := range s.Instr {
		if in[0] == keyword {
			out = append(out, in[1])
		}
	}
	return out
}

// last is the effective value of a keyword Docker takes the last of (CMD, USER, …).
func (s *dockerStage) last(keyword string) string {
	all := s.all(keyword)
	if len(all) == 0 {
		return ""
	}
	return all[len(all)-1]
}

// execForm parses a JSON-array instruction argument. The runtime image has no shell,
// so the shell form would not run at all.
func execForm(t *testing.T, what, args string) []string {
	t.Helper()
	var out []string
	require.NoError(t, json.Unmarshal([]byte(args), &out), "%s must be in exec form (JSON array): the runtime image has no shell; got %s", what, args)
	require.NotEmpty(t, out, what)
	return out
}

// dockerBuild is the build stage's go build command.
type dockerBuild struct {
	stage       string
	env         []string // assignments before `go`
	args        []string // after `go`, VERSION substituted
	output      string   // -o
	outputIndex int
	ldflags     string
}

// dockerfileBuild finds the one RUN that runs go build and splits it into words.
func dockerfileBuild() (dockerBuild, error) {
	stages, err := readDockerfile()
	if err != nil {
		return dockerBuild{}, err
	}
	var b dockerBuild
	found := 0
	for _, st := range stages {
		for _, run := range st.all("RUN") {
			if !strings.Contains(run, "go build") {
				continue
			}
			found++
			if strings.ContainsAny(run, ";|") || strings.Contains(run, "&&") {
				return b, fmt.Errorf("Dockerfile: keep the build RUN a single go build command: %s", run)
			}
			words, err := shellWords(strings.ReplaceAll(strings.ReplaceAll(run, "${VERSION}", releaseVersion), "$VERSION", releaseVersion))
			if err != nil {
				return b, err
			}
			b.stage = st.Name
			i := 0
			for i < len(words) && strings.HasPrefix(words[i], "--") { // RUN --mount=…
				i++
			}
			for i < len(words) && strings.Contains(words[i], "=") { // CGO_ENABLED=0 …
				b.env = append(b.env, words[i])
				i++
			}
			if i+1 >= len(words) || words[i] != "go" || words[i+1] != "build" {
				return b, fmt.Errorf("Dockerfile: want [VAR=value…] go build …, got %s", run)
			}
			b.args = words[i+1:]
		}
	}
	if found != 1 {
		return b, fmt.Errorf("Dockerfile: want exactly one RUN with go build, found %d", found)
	}
	for i, w := range b.args {
		switch w {
		case "-o":
			if i+1 < len(b.args) {
				b.output, b.outputIndex = b.args[i+1], i+1
			}
		case "-ldflags":
			if i+1 < len(b.args) {
				b.ldflags = b.args[i+1]
			}
		}
	}
	if b.output == "" {
		return b, errors.New("Dockerfile: go build has no -o")
	}
	return b, nil
}

// shellWords splits a command line the way sh does for the simple cases a Dockerfile
// RUN uses: blanks separate words, double and single quotes group them.
func shellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated quote in %s", s)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

// runtimeImage is what the final stage of the Dockerfile runs.
type runtimeImage struct {
	entrypoint  []string
	cmd         []string
	healthcheck []string // CMD of HEALTHCHECK, without "CMD"
	uid         int64
	port        int
}

func dockerImage(t *testing.T) runtimeImage {
	t.Helper()
	stages := parseDockerfile(t)
	final := stages[len(stages)-1]
	var img runtimeImage
	img.entrypoint = execForm(t, "ENTRYPOINT", final.last("ENTRYPOINT"))
	img.cmd = execForm(t, "CMD", final.last("CMD"))
	hc := final.last("HEALTHCHECK")
	_, cmd, ok := strings.Cut(hc, "CMD ")
	require.True(t, ok, "HEALTHCHECK must run a command: %q", hc)
	img.healthcheck = execForm(t, "HEALTHCHECK CMD", cmd)
	user, _, _ := strings.Cut(final.last("USER"), ":")
	uid, err := strconv.ParseInt(user, 10, 64)
	require.NoError(t, err, "USER must be numeric so that Kubernetes' runAsNonRoot can verify it, got %q", final.last("USER"))
	img.uid = uid
	exposed := final.all("EXPOSE")
	require.Len(t, exposed, 1, "EXPOSE the HTTP port, once")
	img.port, err = strconv.Atoi(strings.TrimSuffix(exposed[0], "/tcp"))
	require.NoError(t, err)
	return img
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	bin := releaseBinary(t) // built with the Dockerfile's own go build line
	routes := serviceRoutes(t)
	stages := parseDockerfile(t)
	require.GreaterOrEqual(t, len(stages), 2, "multi-stage: a build stage and a runtime stage")
	final := stages[len(stages)-1]
	b := release.build

	t.Run("build stage", func(t *testing.T) {
		var build *dockerStage
		for _, st := range stages {
			if st.Name != "" && st.Name == b.stage {
				build = st
			}
		}
		require.NotNil(t, build, "the go build stage must be named (FROM … AS name) for COPY --from")
		require.NotSame(t, final, build)
		gomod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
		require.NoError(t, err)
		goLine := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
		require.NotNil(t, goLine)
		require.Equal(t, "golang:"+string(goLine[1]), build.From, "the build stage follows go.mod's Go release")
		require.Contains(t, b.env, "CGO_ENABLED=0", "a static binary: the runtime image has no C library")
		require.Contains(t, b.args, "-trimpath")
		require.Equal(t, "./cmd/rendezvous", b.args[len(b.args)-1])
		require.Contains(t, build.all("ARG"), "VERSION=dev", "VERSION is a build argument with a default")
		require.Contains(t, strings.Fields(b.ldflags), "main.version="+releaseVersion, "-ldflags must set main.version from VERSION: %q", b.ldflags)
		out, err := exec.Command(bin, "version").Output()
		require.NoError(t, err)
		require.Equal(t, releaseVersion, strings.TrimSpace(string(out)), "the version stamped by the Dockerfile's -ldflags")
	})

	t.Run("runtime stage", func(t *testing.T) {
		require.True(t, final.From == "scratch" || strings.HasPrefix(final.From, "gcr.io/distroless/static"),
			"runtime image: distroless/static or scratch, not %s", final.From)
		img := dockerImage(t)
		require.NotZero(t, img.uid, "the runtime user must not be root")

		copied := ""
		for _, c := range final.all("COPY") {
			f := strings.Fields(c)
			if len(f) == 3 && f[0] == "--from="+b.stage && f[1] == b.output {
				copied = f[2]
			}
		}
		require.NotEmpty(t, copied, "COPY --from=%s %s <path> into the runtime image", b.stage, b.output)
		require.Equal(t, []string{copied}, img.entrypoint, "ENTRYPOINT is the copied binary alone; CMD names the command")
		require.Contains(t, commandNames(), img.cmd[0], "CMD %v: not a rendezvous command", img.cmd)
		commandHelp(t, bin, img.cmd[0]) // the binary accepts it

		require.Equal(t, copied, img.healthcheck[0], "HEALTHCHECK runs the image's binary")
		require.Equal(t, "healthcheck", img.healthcheck[1])
		commandHelp(t, bin, img.healthcheck[1]) // the binary accepts it
		target := healthcheckTarget(t, "HEALTHCHECK", nil, img.healthcheck[2:])
		require.True(t, serves(routes, "GET", target.Path), "HEALTHCHECK GETs %s, which the service does not serve (routes: %v)", target, routes)
		require.Equal(t, port(t, server.HTTPAddrDefault), img.port, "EXPOSE the default --http-addr port")
		require.Equal(t, img.port, port(t, target.Host), "HEALTHCHECK checks the exposed port")
	})
}
