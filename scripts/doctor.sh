#!/usr/bin/env bash
# doctor: what a new contributor's machine lacks for make dev, the README and make test —
# one line per thing checked, and for each thing missing the command that installs it.
# Exits 1 when something required is missing; a busy port is reported but is not
# missing (DEV_FLAGS moves dev off it).
#
# It is a shell script, not a Go command, because Go itself is one of the things it
# checks. It reads the Go version it wants from go.mod, the database from DATABASE_URL
# and the ports from PORTS (make doctor passes both).
set -uo pipefail
cd "$(dirname "$0")/.."

DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
PORTS=${PORTS:-8080 9092 9090}
NODE_MAJOR=20
SUDO=$([ "$(id -u)" -eq 0 ] || echo 'sudo ')
APT="${SUDO}apt-get install -y"

missing=0
# line STATUS ITEM DETAIL: one checked thing; STATUS is ok, missing or busy.
line() {
	printf '%-8s %-11s %s\n' "$1" "$2" "$3"
	if [ "$1" = missing ]; then missing=$((missing + 1)); fi
}

# version_at_least WANT HAVE: HAVE is WANT or newer (dotted numbers).
version_at_least() {
	[ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1)" = "$1" ]
}

echo "rendezvous doctor: what make dev, the README and make test need"

go_want=$(sed -n 's/^go \([0-9.]*\)$/\1/p' go.mod)
if ! command -v go >/dev/null 2>&1; then
	line missing go "Go $go_want or newer (go.mod): download it from https://go.dev/dl/ and put its bin/ on PATH"
else
	go_have=$(go env GOVERSION 2>/dev/null)
	go_have=${go_have#go}
	if version_at_least "$go_want" "$go_have"; then
		line ok go "$go_have (go.mod wants $go_want)"
	else
		line missing go "$go_have is older than $go_want (go.mod): download a newer one from https://go.dev/dl/"
	fi
fi

# sqlc, run through go run, parses SQL with cgo: make generate and make verify need it.
if cc=$(command -v gcc || command -v cc); then
	line ok gcc "$cc"
else
	line missing gcc "a C compiler for the pinned sqlc (cgo): $APT gcc"
fi

# make verify rebuilds the web console from its npm lockfile to check it is fresh.
if ! command -v node >/dev/null 2>&1; then
	line missing node "Node.js $NODE_MAJOR or newer, for make verify and make ui: $APT nodejs npm (Debian 13), or https://nodejs.org/en/download"
else
	node_have=$(node --version 2>/dev/null)
	node_have=${node_have#v}
	if version_at_least "$NODE_MAJOR" "$node_have"; then
		line ok node "$node_have"
	else
		line missing node "$node_have is older than $NODE_MAJOR: https://nodejs.org/en/download"
	fi
fi
if command -v npm >/dev/null 2>&1; then
	line ok npm "$(npm --version 2>/dev/null)"
else
	line missing npm "for make verify and make ui: $APT npm"
fi

# PostgreSQL: reachable, and the database usable without a password when psql can tell.
hostport=${DATABASE_URL#*://}
hostport=${hostport#*@}
hostport=${hostport%%/*}
pg_host=${hostport%:*}
pg_port=${hostport##*:}
[ "$pg_port" = "$hostport" ] && pg_port=5432
pg_fix="$APT postgresql, then ${SUDO}pg_ctlcluster --skip-systemctl-redirect \$(ls /etc/postgresql) main start and ${SUDO}-u postgres createdb test"
[ -z "$SUDO" ] && pg_fix="$APT postgresql, then pg_ctlcluster --skip-systemctl-redirect \$(ls /etc/postgresql) main start and su postgres -c 'createdb test'"
if ! timeout 3 bash -c ": >/dev/tcp/$pg_host/$pg_port" 2>/dev/null; then
	line missing postgresql "nothing answers on $pg_host:$pg_port (DATABASE_URL): $pg_fix"
elif command -v psql >/dev/null 2>&1; then
	if err=$(PGCONNECT_TIMEOUT=3 psql "$DATABASE_URL" -Atqc 'SELECT 1' 2>&1 >/dev/null); then
		line ok postgresql "$pg_host:$pg_port, DATABASE_URL connects"
	else
		line missing postgresql "$pg_host:$pg_port answers but DATABASE_URL does not connect (${err%%$'\n'*}): create the database, or let the user in without a password"
	fi
else
	line ok postgresql "$pg_host:$pg_port answers (install psql to check DATABASE_URL logs in: $APT postgresql-client)"
fi

# What the walkthrough and the tests drive, as a user would: make deps installs them.
for tool in jq kcat; do
	if command -v "$tool" >/dev/null 2>&1; then
		line ok "$tool" "$(command -v "$tool")"
	else
		line missing "$tool" "for the README and its tests: make deps (or $APT $tool)"
	fi
done
if chromium=$(command -v "${RENDEZVOUS_CHROMIUM:-chromium}" || command -v chromium-browser); then
	line ok chromium "$chromium"
else
	line missing chromium "for the web console's browser test: make deps (or $APT chromium)"
fi

# The schema registry tests' producers, clients nobody here wrote: Confluent's Python
# client with protoc for its generated classes (Debian), and kafkajs with
# @kafkajs/confluent-schema-registry (npm, locked in consumer/testdata/schemaclient).
if command -v protoc >/dev/null 2>&1; then
	line ok protoc "$(command -v protoc)"
else
	line missing protoc "for the schema registry tests: make deps (or $APT protobuf-compiler)"
fi
if /usr/bin/python3 -c 'import confluent_kafka, google.protobuf, requests' >/dev/null 2>&1; then
	line ok pyconfluent "/usr/bin/python3 has confluent_kafka, protobuf and requests"
else
	line missing pyconfluent "for the schema registry tests: make deps (or $APT python3-confluent-kafka python3-protobuf python3-requests)"
fi
if [ -d consumer/testdata/schemaclient/node_modules ]; then
	line ok schemaclient "consumer/testdata/schemaclient/node_modules"
else
	line missing schemaclient "for the schema registry tests: make deps (or npm ci in consumer/testdata/schemaclient)"
fi

# make dev's ports on 127.0.0.1: taken, dev cannot start as shipped.
for port in $PORTS; do
	if timeout 3 bash -c ": >/dev/tcp/127.0.0.1/$port" 2>/dev/null; then
		line busy "port $port" "something listens there: stop it, or give make dev other ports with DEV_FLAGS (README, Run it)"
	else
		line ok "port $port" "free"
	fi
done

if [ "$missing" -gt 0 ]; then
	echo "$missing missing: install them with the commands above."
	exit 1
fi
echo "nothing missing."
