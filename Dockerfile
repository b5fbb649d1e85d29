# Airlock container image: a static binary on a distroless base, run as a
# non-root user (uid 65532), ready for a read-only root filesystem.
#
#   docker build -t airlock .
#   docker run --rm --read-only -p 3128:3128 -v airlock-state:/var/lib/airlock airlock
#
# Your policy: mount it and give --config (see the README, "Docker").
# State (the generated interception CA, the session-token key) lives in
# /var/lib/airlock: make it a volume so the CA survives restarts, and so the
# root filesystem can be read-only. /ca is for `airlock ca export --out
# /ca/airlock-ca.pem --bundle /ca/ca-bundle.pem`, a volume the agent mounts
# read-only; it never holds a key.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/airlock ./cmd/airlock \
 && mkdir -p /out/state /out/ca /out/etc

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/airlock /usr/local/bin/airlock
# Owned by the runtime user, so fresh named volumes mounted here are too.
COPY --from=build --chown=65532:65532 /out/state /var/lib/airlock
COPY --from=build --chown=65532:65532 /out/ca /ca
COPY --from=build /out/etc /etc/airlock
USER 65532:65532
ENV AIRLOCK_STATE_DIR=/var/lib/airlock
VOLUME ["/var/lib/airlock"]
# 3128: the proxy. DNS (listen.dns or --dns) is off unless configured.
# The admin listener (health, metrics, reload) stays on the container's
# loopback: the agent never needs it, and HEALTHCHECK runs inside.
EXPOSE 3128
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 \
  CMD ["/usr/local/bin/airlock", "healthcheck", "--admin", "127.0.0.1:9090"]
ENTRYPOINT ["/usr/local/bin/airlock"]
CMD ["run", "--listen", "0.0.0.0:3128", "--admin", "127.0.0.1:9090"]
