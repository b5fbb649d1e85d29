# Airlock. `make test` is the command CI runs (see .ci/run).
GO      ?= go
BIN     ?= bin/airlock
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
FUZZTIME ?= 30s

.PHONY: build run test lint fuzz bench bench-micro clean

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/airlock

run:
	$(GO) run ./cmd/airlock run

# Vet, then every test with the race detector. End-to-end tests build the
# binary and drive it with curl and net/http on loopback. Last, the audit
# reader's memory bound over a generated 1 GiB log, without the race
# detector (under it the test reads 32 MiB; the gigabyte would take minutes).
test:
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...
	$(GO) test -count=1 -run '^TestSummaryMemoryIsBoundedByHostsNotLogSize$$' ./audit

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# Each fuzz target for FUZZTIME (go test -fuzz takes one target at a time).
fuzz:
	@for p in ./policy ./dnsfilter ./audit; do \
		for t in $$($(GO) test $$p -list 'Fuzz.*' | grep ^Fuzz); do \
			echo "== $$p $$t"; $(GO) test $$p -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) || exit 1; \
		done; \
	done

# The side-by-side harness (Airlock, no proxy, Squid, tinyproxy; see
# docs/BENCHMARKS.md), then the package micro-benchmarks.
bench:
	$(GO) run ./bench
	$(GO) test -run '^$$' -bench . -benchmem ./policy ./certs ./proxy ./dnsfilter ./audit

bench-micro:
	$(GO) test -run '^$$' -bench . -benchmem ./policy ./certs ./proxy ./dnsfilter ./audit

clean:
	rm -rf bin
