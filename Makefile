# fairway — run `make help` for the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

GO        ?= go
PKGS      ?= ./...
SERVICES  := scripts/dev-services.sh
ENVFILE   := .dev/services.env
# Load the addresses scripts/dev-services.sh wrote (DATABASE_URL, CLICKHOUSE_ADDR).
WITH_ENV  := set -a; . ./$(ENVFILE); set +a;
BENCHTIME ?= 2s
BENCH     ?= .

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: services
services: ## Make PostgreSQL and ClickHouse reachable (installs/starts private servers in .dev/ if needed)
	@bash $(SERVICES)

.PHONY: services-stop
services-stop: ## Stop the private servers `make services` started
	@bash scripts/stop-services.sh

.PHONY: nats
nats: ## Install nats-server (go.mod's version) into bin/ and run it with deploy/nats/single.conf on 127.0.0.1:14222; prints each command's NATS_URL
	@bash scripts/nats.sh start

.PHONY: nats-stop
nats-stop: ## Stop the nats-server `make nats` started (its data stays in .dev/nats/)
	@bash scripts/nats.sh stop

.PHONY: demo
demo: services ## Build bin/fairway (stamped like `make build`) and run the whole pipeline in one process (a noisy tenant, many small ones) until all is applied
	@GO=$(GO) bash scripts/build.sh bin/fairway ./cmd/fairway
	@$(WITH_ENV) bin/fairway demo $(DEMO_ARGS); status=$$?; echo; bash scripts/stop-services.sh --list; exit $$status

.PHONY: test
test: services ## Run every test (real PostgreSQL, ClickHouse, embedded JetStream; systemd-analyze verify when installed) with -race, then each fuzz target briefly
	@$(GO) vet $(PKGS)
	@$(WITH_ENV) $(GO) test -race -count=1 -timeout 20m $(PKGS)
	@bash scripts/fuzz.sh $(or $(FUZZTIME_TEST),5s)

.PHONY: chaos
chaos: services ## Kill dispatchers and sinks (-9) FAIRWAY_CHAOS_KILLS times (default 100) under load, then account for every event
	@$(WITH_ENV) FAIRWAY_CHAOS_KILLS=$(or $(FAIRWAY_CHAOS_KILLS),100) $(GO) test -race -count=1 -timeout 60m -run '^TestProcessKills$$' -v ./internal/faults/kills/

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (default 1m)
	@bash scripts/fuzz.sh $(or $(FUZZTIME),1m)

.PHONY: bench
bench: services ## Run the benchmarks (BENCH, default all) against the real servers and write .bench/results.md; fails if one fails
	@mkdir -p .bench
	@set -o pipefail; $(WITH_ENV) $(GO) test -p 1 -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) -timeout 60m $(PKGS) | tee .bench/raw.txt; status=$$?; \
	$(GO) run ./internal/benchtable < .bench/raw.txt > .bench/results.md || status=1; \
	cat .bench/results.md; exit $$status

.PHONY: lint
lint: ## gofmt, go vet and staticcheck
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	@$(GO) vet $(PKGS)
	@$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 $(PKGS)

.PHONY: build
build: ## Build the binaries into bin/, stamped with the version and commit (--version)
	@$(GO) build -ldflags "$$(sh scripts/ldflags.sh)" -o bin/ ./cmd/...

.PHONY: nats-config-check
nats-config-check: ## Check deploy/nats configs with an installed nats-server binary (nats-server -t), single-tls.conf with certificates from tls-certs.sh
	@command -v nats-server >/dev/null || { echo "nats-server not installed (apt-get install nats-server)"; exit 1; }
	@cd deploy/nats && for v in SYS INGEST DISPATCHER SINKS OPERATOR PUBLISHER_ACME; do export FAIRWAY_$${v}_PASSWORD=pCheck1; done; \
	tls=$$(mktemp -d) && trap 'rm -rf "$$tls"' EXIT && ./tls-certs.sh "$$tls" >/dev/null && \
	export FAIRWAY_NATS_TLS_CERT=$$tls/server.pem FAIRWAY_NATS_TLS_KEY=$$tls/server-key.pem FAIRWAY_NATS_TLS_CA=$$tls/ca.pem && \
	for f in single.conf single-tls.conf cluster/n1.conf cluster/n2.conf cluster/n3.conf; do nats-server -t -c $$f >/dev/null 2>&1 || { nats-server -t -c $$f; exit 1; }; echo "ok $$f"; done
