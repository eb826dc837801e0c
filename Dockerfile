# syntax=docker/dockerfile:1
#
# rendezvous image: a static binary on distroless/static, run as an unprivileged user.
# `docker build -t rendezvous --build-arg VERSION=$(git describe --always --dirty) .`
# (or `make image`). cmd/rendezvous/deploy_test.go checks this file against the code:
# the build flags, the entrypoint and command, the healthcheck, the port and the user.

# The build stage follows go.mod's Go release; the toolchain fetches a newer patch
# release itself when go.mod asks for one.
FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
ARG VERSION=dev
# CGO off: the binary must run on an image without a C library.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/rendezvous ./cmd/rendezvous

# No shell, no package manager: exec-form instructions only, and the healthcheck is the
# binary's own subcommand. CA certificates (Kafka TLS, outbound https calls) and tzdata
# are part of the base image.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/rendezvous /usr/local/bin/rendezvous
# Numeric, so that Kubernetes' runAsNonRoot can verify it (a user name cannot be).
USER 65532:65532
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
    CMD ["/usr/local/bin/rendezvous", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/rendezvous"]
CMD ["serve"]
