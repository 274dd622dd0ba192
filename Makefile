# Countersign — the commands a contributor needs. `make run` and `make test`
# are the two a newcomer needs; `make ci` is what CI runs.

SHELL     := /bin/bash
GO        ?= go
BIN       := $(CURDIR)/bin
# Stamp the VCS revision into binaries (GOFLAGS may say -buildvcs=false)
# when this is a git checkout git can read; a tarball builds without it.
BUILDVCS  := $(shell git rev-parse --verify -q HEAD >/dev/null 2>&1 && echo auto || echo false)
FUZZTIME  ?= 5s
# -race needs cgo; the test harness starts its own PostgreSQL.
TESTFLAGS ?= -race -count=1 -timeout 20m

.PHONY: screenshots all generate check-generated build test test-go fuzz sim bench chaos e2e-k8s lint run ci tidy-check chart-test clean

all: build

## generate: regenerate gen/ from proto/ (offline: buf and plugins are go tools)
generate:
	bash scripts/generate.sh

## check-generated: fail if gen/ differs from what `make generate` produces
check-generated: generate
	@git add -N gen >/dev/null 2>&1 || true
	@if ! git diff --quiet --exit-code -- gen; then \
		echo "gen/ is out of date with proto/: run 'make generate' and commit the result" >&2; \
		git diff --stat -- gen >&2; exit 1; fi
	@echo "gen/ is up to date"

## build: build the countersign and mockrail binaries into bin/
build:
	$(GO) build -buildvcs=$(BUILDVCS) -o $(BIN)/countersign ./cmd/countersign
	$(GO) build -buildvcs=$(BUILDVCS) -o $(BIN)/mockrail ./cmd/mockrail

## test: every test, against a real throwaway PostgreSQL, then each fuzz target briefly, then the simulation
## and the benchmark's harness with half-second cells (its checks, not its figures)
test: test-go fuzz
	$(MAKE) sim SIM_RESULTS=
	$(MAKE) bench-smoke

## bench-smoke: make bench's whole run with half-second cells and no RESULTS.md: every
## operation must succeed and every ALLOW end APPLIED, as in the real run
bench-smoke:
	COUNTERSIGN_BENCH=1 BENCH_SECONDS=0.5 BENCH_RESULTS= $(GO) test -count=1 -timeout 10m -run '^TestBench$$' ./e2e/bench/

# stripe-mock (a go.mod tool) proves stamped Stripe requests are valid
# Stripe requests; the simulation runs 100 seeds here under -race, and
# 2000 without it in `sim`.
test-go:
	COUNTERSIGN_SIM_SEEDS=100 $(GO) test $(TESTFLAGS) ./...

## fuzz: run every fuzz target for FUZZTIME each
fuzz:
	FUZZTIME=$(FUZZTIME) bash scripts/fuzz.sh

## sim: the deterministic simulation over SEEDS seeds (a failing seed prints
## the command that replays it exactly); writes its section of RESULTS.md
SEEDS ?= 2000
SIM_RESULTS ?= $(CURDIR)/RESULTS.md
sim:
	SIM_RESULTS=$(SIM_RESULTS) COUNTERSIGN_SIM_SEEDS=$(SEEDS) $(GO) test -count=1 -timeout 30m -run 'TestSimulation$$' -v ./internal/sim/

## chaos: the kill matrix (5 kill points × 6 rail faults) TRIALS times per cell
TRIALS ?= 1
PARALLEL ?= 2
chaos:
	set -o pipefail; CHAOS_TRIALS=$(TRIALS) CHAOS_RESULTS=$(CURDIR)/RESULTS.md $(GO) test -count=1 -timeout 120m -parallel $(PARALLEL) -run 'TestKillMatrix' -v ./e2e/ \
		| grep --line-buffered -E '^(chaos: |\s*--- FAIL|ok|FAIL)'

## screenshots: the owner console's main views, from its browser test
## (needs chromium), into docs/images/console/
screenshots:
	COUNTERSIGN_REQUIRE_CHROMIUM=1 COUNTERSIGN_SCREENSHOTS=$(CURDIR)/docs/images/console $(GO) test -count=1 -run '^TestConsoleInChromium$$' ./e2e/

## e2e-k8s: `countersign inject` against a real kube-apiserver and etcd, built
## from their modules (e2e/k8s/tools) once per version into the tool cache by
## scripts/k8s-tools.sh — tens of minutes the first time, then instant. Not
## part of `make test`.
e2e-k8s:
	@etcd=$$(GO=$(GO) bash scripts/k8s-tools.sh etcd) && \
	apiserver=$$(GO=$(GO) bash scripts/k8s-tools.sh kube-apiserver) && \
	COUNTERSIGN_E2E_ETCD=$$etcd COUNTERSIGN_E2E_KUBE_APISERVER=$$apiserver \
		$(GO) test -tags k8s -count=1 -timeout 15m -v ./e2e/k8s/

## bench: in one run, pgbench's commit floor and a real countersign serve's
## ALLOW and BLOCK paths (ext_authz and ext_proc) at 1, 16 and 64 callers,
## what one decision costs PostgreSQL, idle memory and start-up time;
## writes its section of RESULTS.md (BENCH_SECONDS per cell, default 8)
BENCH_RESULTS ?= $(CURDIR)/RESULTS.md
bench:
	COUNTERSIGN_BENCH=1 BENCH_RESULTS=$(BENCH_RESULTS) $(GO) test -count=1 -timeout 20m -run '^TestBench$$' -v ./e2e/bench/

## lint: golangci-lint v2 (pinned in scripts/tool.sh, built once per version into a cache outside the clone)
lint:
	@lint=$$(GO=$(GO) bash scripts/tool.sh golangci-lint) && $$lint run ./...

## run: the demo — Countersign with a private PostgreSQL, a mock rail and an
## Envoy stand-in (Ctrl-C stops it all). Built, then exec'd, so Ctrl-C reaches
## it directly and its clean exit is make's.
run:
	@$(GO) build -buildvcs=$(BUILDVCS) -o $(BIN)/countersign ./cmd/countersign
	@$(GO) build -buildvcs=$(BUILDVCS) -o $(BIN)/countersign-dev ./cmd/countersign-dev
	@exec $(BIN)/countersign-dev dev

## tidy-check: fail if go.mod/go.sum are not tidy
tidy-check:
	$(GO) mod tidy -diff

## chart-test: helm lint charts/countersign, render it (defaults and ci/*.yaml) and check the manifests (scripts/chartcheck) and the pods the injector mutates (kubeconform)
chart-test:
	GO=$(GO) bash scripts/chart-test.sh

## ci: what CI runs — generation drift, tidiness, vet, lint and the full test suite
ci: check-generated tidy-check lint chart-test test

clean:
	rm -rf $(BIN)

## attack: the attack and utility benchmark (e2e/attack): every scenario, direct and
## gated, every scripted policy; writes its section of RESULTS.md and docs/attack.svg
## (make test runs its one-scenario-per-family subset, TestAttackSubset)
.PHONY: attack
attack:
	COUNTERSIGN_ATTACK=1 ATTACK_RESULTS=$(CURDIR)/RESULTS.md ATTACK_CHART=$(CURDIR)/docs/attack.svg $(GO) test -count=1 -timeout 30m -run '^TestAttack$$' -v ./e2e/attack/
