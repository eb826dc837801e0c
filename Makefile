# rendezvous — build, generate, test, bench.
#
# sqlc is pinned and run through `go run`, so a fresh machine needs nothing but Go and a
# C compiler (sqlc's parser uses cgo); the first run builds it (about 90 s), later runs
# reuse the Go build cache.
SQLC_VERSION := v1.31.1
SQLC := go run github.com/sqlc-dev/sqlc/cmd/sqlc@$(SQLC_VERSION)
DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/test?sslmode=disable
# VERSION is stamped into the binaries (rendezvous version, /healthz, metrics) and the image.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
# BIN is where build puts the binaries.
BIN ?= bin

.PHONY: all build deps doctor generate ui verify vet test dev run bench chaos fuzz clean image compose-up compose-down

all: build

build:
	go build -ldflags '$(LDFLAGS)' -o $(BIN)/rendezvous ./cmd/rendezvous
	go build -ldflags '$(LDFLAGS)' -o $(BIN)/rendezvous-bench ./cmd/rendezvous-bench

## generate: regenerate db/dbsqlc from db/queries and db/migrations
generate:
	$(SQLC) generate

## ui: build the web console from server/console/web (npm, esbuild) into server/console/static,
## which is committed and embedded; needs Node.js 20 and npm
UI_WEB := server/console/web
ui:
	cd $(UI_WEB) && npm ci --no-audit --no-fund --prefer-offline >/dev/null && node build.mjs ../static

## verify: fail when generated code (sqlc, the web console's bundle) is stale or Go files are unformatted
verify:
	$(SQLC) diff
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@command -v node >/dev/null || { echo "verify: node is needed to check server/console/static (Node.js 20 and npm)"; exit 1; }
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	(cd $(UI_WEB) && npm ci --no-audit --no-fund --prefer-offline >/dev/null && node build.mjs "$$tmp") && \
	diff -r "$$tmp" server/console/static >/dev/null || { echo "server/console/static is stale: run make ui and commit it"; exit 1; }

vet:
	go vet ./...

## deps: system packages the tests need that Go cannot fetch: Chromium, which drives the
## web view's end-to-end test, and jq and kcat, which the README's walkthrough and the
## multi-replica recipe use (their tests run them as written; kcat is a Kafka client that
## is not franz-go). The schema registry tests produce their records with clients nobody
## here wrote: Confluent's Python client (with protoc for its generated classes) from
## Debian, and kafkajs with @kafkajs/confluent-schema-registry from npm, at the versions
## locked in consumer/testdata/schemaclient. Installed once; a no-op when present.
DEPS := chromium jq kcat
DEBS := python3-confluent-kafka python3-protobuf python3-requests protobuf-compiler
SCHEMA_CLIENT := consumer/testdata/schemaclient
deps:
	@missing=$$(for p in $(DEPS); do command -v $$p >/dev/null 2>&1 || echo $$p; done; \
	  for p in $(DEBS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing" $$missing "(browser test, README walkthrough test, schema registry tests)"; \
	  SUDO=$$( [ "$$(id -u)" -eq 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi
	@[ -d $(SCHEMA_CLIENT)/node_modules ] || (cd $(SCHEMA_CLIENT) && npm ci --no-audit --no-fund --prefer-offline >/dev/null)

## doctor: what this machine lacks for make dev, the README and make test — Go, gcc,
## Node.js and npm, PostgreSQL at DATABASE_URL, jq, kcat, Chromium, the schema registry
## tests' clients, and whether the PORTS make dev listens on are free — with the command
## that installs each; fails when something is missing.
PORTS ?= 8080 9092 9090 8081
doctor:
	@DATABASE_URL='$(DATABASE_URL)' PORTS='$(PORTS)' bash scripts/doctor.sh

## test: what CI runs — system deps, generated-code freshness (verify, which also installs
## the console's npm packages the browser tests read), then vet beside the whole suite with
## the race detector (the suite waits on PostgreSQL as much as on the CPU), and the ten
## slowest tests. Two packages at a time (-p 2): every
## package's tests open connections to the one local PostgreSQL, so each takes a share of
## it first (a slot; all of them for the few that run several replicas, harness/testkit's
## NeedsWholeServer). gotestsum runs go test and keeps its events for the slowest-tests
## list (bin/test-events.json).
GOTESTSUM := go run gotest.tools/gotestsum@v1.13.0
TEST_EVENTS := $(BIN)/test-events.json
test: deps verify
	@mkdir -p $(BIN)
	@$(MAKE) --no-print-directory vet > $(BIN)/checks.log 2>&1 & checks=$$!; \
	$(GOTESTSUM) --format standard-quiet --jsonfile $(TEST_EVENTS) -- -race -count=1 -p 2 -timeout 12m ./...; rc=$$?; \
	echo; echo "The ten slowest tests:"; $(GOTESTSUM) tool slowest --jsonfile $(TEST_EVENTS) --num 10; \
	if wait $$checks; then echo "vet: ok"; else echo "vet: FAILED"; cat $(BIN)/checks.log; rc=1; fi; exit $$rc

## dev: everything in one process — embedded Kafka broker, local PostgreSQL, examples.
## The binary is built, then run by exec (go run would exit 1 on the signal). Ctrl-C in
## the terminal reaches it alone — it makes itself the terminal's foreground — so it
## exits 0 and make reports no error. A script without a terminal sends SIGINT to dev's
## pid, which its banner prints, or to the group of a make started with SIGINT ignored
## (trap '' INT): GNU make that receives a SIGINT itself kills itself with it once the
## recipe ends (exit 130), whatever the recipe did. DEV_FLAGS passes more flags, other
## ports among them (rendezvous dev --help lists them).
DEV_FLAGS ?=
dev:
	@go build -ldflags '$(LDFLAGS)' -o $(BIN)/rendezvous ./cmd/rendezvous
	exec $(BIN)/rendezvous dev --database-url '$(DATABASE_URL)' $(DEV_FLAGS)

## run: one replica (no Kafka) against the local PostgreSQL, on 127.0.0.1:8080. serve
## refuses to start without credentials: with RENDEZVOUS_BOOTSTRAP_TOKEN in the
## environment every API call needs that token, without it the replica runs with no
## authentication (--insecure-no-auth, a WARN at start), which is why it listens on
## loopback. RUN_FLAGS passes more flags (rendezvous serve --help lists them).
RUN_FLAGS ?=
run:
	@go build -ldflags '$(LDFLAGS)' -o $(BIN)/rendezvous ./cmd/rendezvous
	exec $(BIN)/rendezvous serve --database-url '$(DATABASE_URL)' --log-format text --http-addr 127.0.0.1:8080 $(if $(RENDEZVOUS_BOOTSTRAP_TOKEN),,--insecure-no-auth) $(RUN_FLAGS)

## bench: the performance figures in one run — (a) versioned-UPDATE baseline, (b) Kafka records/s,
## (c) callbacks/s, (d) latency at half of each path's maximum, (e) 100 000 deadlines at
## once, (f) (b) with 1 000 000 waiting rows, (m) payload matching, (p) the peers DBOS and
## Temporal (whose runner, harness/bench/temporal, is built first) — as a table with each
## path's floor, the peers and the targets, and as JSON in BENCH_JSON. BENCH_FLAGS passes sizes and --only (rendezvous-bench -h lists them).
BENCH_JSON ?= bench-results.json
BENCH_FLAGS ?=
bench:
	go run ./cmd/rendezvous-bench --database-url '$(DATABASE_URL)' --json '$(BENCH_JSON)' $(BENCH_FLAGS)

## chaos: the long seeded chaos run — three replicas, the broker and a fake service as
## real processes, kills, rebalances and one real restart of the PostgreSQL cluster behind
## DATABASE_URL — then every invariant counted in the database. It prints its seed first;
## SEED=… replays a schedule. A short version (proxy cut, no restart) is part of make test.
CHAOS_EXECUTIONS ?= 5000
chaos:
	go run ./cmd/rendezvous-chaos --database-url '$(DATABASE_URL)' --executions $(CHAOS_EXECUTIONS) --pg-restart ctl $(if $(SEED),--seed $(SEED)) --json chaos-report.json

## fuzz: run every fuzz target for FUZZTIME each (default 30s). Targets are found by name
## (func FuzzXxx in a _test.go file), so a new one is fuzzed without editing this list;
## `go test ./...` (make test, CI) runs each target's seed corpus once.
FUZZTIME ?= 30s
fuzz:
	@set -e; grep -rHo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*' . | sort | \
	while IFS=: read -r file fn; do \
	  name=$${fn#func }; dir=$$(dirname "$$file"); \
	  echo "== $$dir $$name ($(FUZZTIME))"; \
	  go test "$$dir" -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME); \
	done

clean:
	rm -rf bin

## image: the container image (Dockerfile), tagged rendezvous and stamped with the git version
image:
	docker build --build-arg VERSION=$(VERSION) -t rendezvous .

## compose-up: PostgreSQL, Kafka, migrations, three replicas (localhost:8081-8083) and the examples
compose-up:
	docker compose -f deploy/docker-compose.yml up --build

## compose-down: stop it and drop its volumes
compose-down:
	docker compose -f deploy/docker-compose.yml down -v
