# Airlock container image: a static binary on a distroless base, run as a
# non-root user. Build: docker build -t airlock .
# Run:   docker run --rm -p 3128:3128 airlock
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/airlock ./cmd/airlock

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/airlock /usr/local/bin/airlock
USER nonroot:nonroot
EXPOSE 3128
# Inside a container the proxy must listen on all interfaces; mount a policy
# and add `--config /etc/airlock/airlock.yaml` to use your own.
ENTRYPOINT ["/usr/local/bin/airlock"]
CMD ["run", "--listen", "0.0.0.0:3128"]
