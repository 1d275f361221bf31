# aks-flex-node build, test and demo entry points. See README.md.
SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo v0.0.0-dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
BUILD_TIME ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
BUILDINFO := github.com/Azure/aks-flex-node/internal/buildinfo
LDFLAGS := -s -w -X $(BUILDINFO).Version=$(VERSION) -X $(BUILDINFO).GitCommit=$(COMMIT) -X $(BUILDINFO).BuildTime=$(BUILD_TIME)
BIN := bin/aks-flex-node
SCRIPTS := $(shell git ls-files '*.sh' 'scripts/*' 2>/dev/null) .ci/run

.PHONY: all build test unit e2e lint fmt docs crds fuzz demo bench-join bench-image bench-artifacts bench-install bench-upgrade bench-token bench-repave bench-fleet bench-fleet-sim bench-rollout deps clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/aks-flex-node

# Host packages the integration tests use (Debian/Ubuntu, as root).
deps:
	./scripts/ci-deps.sh

# The test command: unit tests, the real-systemd and the real-cluster tests,
# warm within 15 minutes on a 2-core machine. The end-to-end packages are
# scheduled longest first (warm CI figures, 2026-12-06: repave 635 s, join
# 505 s, tokenrefresh 426 s, day2 251 s, fleet 140 s, ignition 63 s,
# the others under a minute; the root module's integration 129 s):
# - E2E_EARLY start at once, in the background, side by side: tokenrefresh
#   watches a node for 6 minutes, mostly waiting, and join, repave and
#   fleetrollout (two tests side by side, four hosts each: TestFleetRollout
#   through four rollouts, TestFleetWaves through a plan, a windowed
#   canary rollout, a fleet rollback and a network cut; mostly waiting
#   for soaks, leases, windows and Ready) each take longer than
#   everything else that runs meanwhile;
# - meanwhile the root module's tests, then the failpoints build's;
# - then the rest of test/e2e, E2E_LONGEST first, two at a time (go test
#   starts packages in the order it is given them).
# The critical path is the longest early package, not a sum. The
# background's output comes at the end; any failure fails the run, and
# its last lines then name each failed test and its error
# (test/failsummary/failures.sh): a CI that keeps only a run's tail
# shows which test failed and why, not the last host's console. A name
# below that is no package of test/e2e fails the run: every package still
# runs, but the order would be silently lost.
# -timeout: on a cold cache test/fixtures builds the worker image and the
# bundle (twice, to prove it reproducible) under the race detector, which
# takes longer than go test's default 10 minutes.
E2E_EARLY := tokenrefresh join repave fleetrollout
E2E_LONGEST := fleet ignition day2
test: deps build
	test/e2e/build-k8s.sh >/dev/null
	test/e2e/build-k8s.sh --module cmd-1.34 >/dev/null
	@set -euo pipefail; \
	all=$$(cd test/e2e && $(GO) list ./...); \
	pick() { for p in "$$@"; do grep -x ".*/test/e2e/$$p" <<<"$$all" || { echo "make test: no package test/e2e/$$p" >&2; return 1; }; done; }; \
	early=$$(pick $(E2E_EARLY)); later=$$(pick $(E2E_LONGEST)); \
	later+=$$'\n'$$(grep -vxF "$$early"$$'\n'"$$later" <<<"$$all" || true); \
	mapfile -t early_pkgs <<<"$$early"; mapfile -t later_pkgs < <(grep . <<<"$$later"); \
	log=$$(mktemp); out=$$(mktemp); status=0; \
	(cd test/e2e && AKS_FLEX_NODE_E2E=1 $(GO) test -p $(words $(E2E_EARLY)) -count=1 -timeout 45m "$${early_pkgs[@]}") >"$$log" 2>&1 & bg=$$!; \
	AKS_FLEX_NODE_E2E=1 $(GO) test -race -count=1 -timeout 30m ./... 2>&1 | tee -a "$$out" || status=1; \
	$(GO) test -count=1 -tags failpoints ./internal/failpoint/ ./internal/task/ 2>&1 | tee -a "$$out" || status=1; \
	(cd test/e2e && AKS_FLEX_NODE_E2E=1 $(GO) test -count=1 -timeout 45m "$${later_pkgs[@]}") 2>&1 | tee -a "$$out" || status=1; \
	wait $$bg || status=1; tee -a "$$out" <"$$log"; \
	if [ "$$status" != 0 ]; then test/failsummary/failures.sh "$$out"; fi; rm -f "$$log" "$$out"; exit $$status

# Unit tests only: no root, no nspawn, no cluster.
unit:
	$(GO) test -race -count=1 ./...

# One end-to-end package, or one test in it (docs/testing.md lists them):
#   make e2e PKG=join RUN='^TestJoin$/^acl$'
# PKG is a package under test/e2e; RUN, optional, is go test's -run (read
# with $(value) so its $ anchors reach go test as written). Builds the
# Kubernetes binaries first (cached), and the 1.34 kubelet for repave.
E2E_TIMEOUT ?= 45m
e2e: deps
	@if [ -z "$(PKG)" ] || [ ! -d "test/e2e/$(PKG)" ]; then \
		echo "make e2e: PKG must name a package under test/e2e (join, repave, day2, fleet, fleetsim, rollout, fleetrollout, ignition, tokenrefresh, controlplane); RUN picks a test: make e2e PKG=join RUN='^TestJoin\$$/^acl\$$'" >&2; exit 2; fi
	test/e2e/build-k8s.sh >/dev/null
	@if [ "$(PKG)" = repave ] || [ "$(PKG)" = fleetrollout ]; then test/e2e/build-k8s.sh --module cmd-1.34 >/dev/null; fi
	cd test/e2e && AKS_FLEX_NODE_E2E=1 $(GO) test -count=1 -timeout $(E2E_TIMEOUT) -v $(if $(value RUN),-run '$(value RUN)') ./$(PKG)/

# gofmt every tracked Go file in place (make lint only reports).
fmt:
	gofmt -w $$(git ls-files '*.go')

# Rewrite the generated reference pages under docs/reference from the code;
# go test ./internal/refdocs fails until they match.
docs:
	$(GO) run ./internal/refdocs/cmd

# Regenerate the FlexNodeRollout CRD and deep copies from the Go types;
# TestCRDMatchesTypes fails until they match.
crds:
	cd internal/fleet/v1alpha1 && $(GO) generate .

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd test/e2e && $(GO) vet ./...
	shellcheck $(SCRIPTS)
	$(GO) test -count=1 -run '^TestRenderedScriptShellcheck$$' ./internal/agentupgrade/

# Every fuzz target of the module, each for FUZZTIME (not part of make
# test). Targets are found per package with go test -list, so a new Fuzz
# function runs here without editing this file. The last lines sum up each
# target: execs, time, and corpus size (total: seed corpus + what the
# fuzzer kept). FUZZMINIMIZETIME bounds the minimising of each new input,
# which otherwise takes most of a short run.
FUZZTIME ?= 30s
FUZZMINIMIZETIME ?= 5s
IDLE_SECONDS ?= 0
fuzz:
	@set -eo pipefail; summary=""; \
	for pkg in $$($(GO) list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./...); do \
		for target in $$($(GO) test -list '^Fuzz' "$$pkg" | grep '^Fuzz' || true); do \
			echo "fuzz $$target ($$pkg) for $(FUZZTIME)"; \
			out=$$($(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) "$$pkg" 2>&1) || { echo "$$out"; exit 1; }; \
			summary="$$summary$$target $${pkg#github.com/Azure/aks-flex-node/}: $$(echo "$$out" | grep '^fuzz: elapsed' | tail -1 | sed 's/^fuzz: //')\n"; \
		done; \
	done; \
	printf "%b" "$$summary"

# The main job: an ACL-like host (read-only /usr, agent.hostPrefix
# /opt/aks-flex-node) joins a local control plane through install.sh and
# `aks-flex-node start`, runs a pod, prints `kubectl get nodes -o wide` and
# the pod's output, then cleans up. KEEP=1 keeps it running until Ctrl-C.
# Fixtures and Kubernetes binaries are built once and cached.
# What it shows is the product's own output (start's progress display on a
# terminal, debug) under a heading per step; the test runner's lines go to
# DEMO_LOG only, which a failed demo points at.
DEMO_LOG ?= /tmp/aks-flex-node-demo.log
demo: deps
	test/e2e/build-k8s.sh >/dev/null
	cd test/e2e && { AKS_FLEX_NODE_E2E=1 AKS_FLEX_NODE_DEMO=1 KEEP=$(KEEP) \
		$(GO) test -count=1 -timeout 60m -v -run '^TestJoin$$/^acl$$' ./join/ 2>&1; echo $$? >$(DEMO_LOG).rc; } \
		| tee $(DEMO_LOG) | grep -vE '^(    |=== |--- PASS|PASS$$|ok )' || true
	@rc=$$(cat $(DEMO_LOG).rc); rm -f $(DEMO_LOG).rc; \
	if [ "$$rc" = 0 ]; then echo "demo passed (test log: $(DEMO_LOG))"; else echo "demo FAILED (exit $$rc): see $(DEMO_LOG)"; fi; exit $$rc

# Join figures: time from start to Ready (split by task), the converged
# re-run for each source kind (local dir, file://, oci://) with the bytes
# it hashed as start counts them, the agent's idle RSS, and a second join
# after `reset --keep-image-cache` (warm layer cache), for both scenarios
# (the crash matrix is left out). IDLE_SECONDS=600 also measures the
# agent's CPU on the joined node over that long.
bench-join: deps
	test/e2e/build-k8s.sh >/dev/null
	cd test/e2e && AKS_FLEX_NODE_E2E=1 AKS_FLEX_NODE_IDLE_SECONDS=$(IDLE_SECONDS) $(GO) test -count=1 -timeout 30m -v -run '^TestJoin$$/^(acl|debian)$$' ./join/ | grep -E 'BENCH|start took|task=[a-z-]+ status' | sed -E 's/.*(task=[a-z-]+ status=[a-z]+ changed=[a-z]+ duration=[^ ]+).*/    \1/'

# Repave figures (issue 16): `node upgrade` kube1 (1.34.2) -> kube2
# (1.35.4) -> kube1 (1.35.4, another worker image) on the ACL-like host
# with warm caches: the total, the drain, the total without
# it, and the node's NotReady window as the API server shows it (from the
# old machine's stop to the first Ready the new kubelet posts, seen by a
# watch), next to the time the Node was seen not Ready at all.
bench-repave: deps
	test/e2e/build-k8s.sh >/dev/null
	test/e2e/build-k8s.sh --module cmd-1.34 >/dev/null
	set -o pipefail; cd test/e2e && AKS_FLEX_NODE_E2E=1 $(GO) test -count=1 -timeout 30m -v -run '^TestRepave$$' ./repave/ | grep -E 'BENCH|^(--- )?FAIL|^ok'

# Fleet join figures (issue 17): N ACL-like hosts (AKS_FLEX_NODE_BENCH_FLEET_N,
# default 1,2,4,6; make deps raises fs.inotify.max_user_instances to 1024 for 8 or more) run start at the same moment against one control
# plane, each N on a lab and a control plane of its own: time until all
# are Ready, the slowest start, the control plane's CPU during the join
# and idle, routes per host, agent RSS and machine memory per host.
bench-fleet: deps
	test/e2e/build-k8s.sh >/dev/null
	set -o pipefail; cd test/e2e && AKS_FLEX_NODE_E2E=1 AKS_FLEX_NODE_BENCH=1 $(GO) test -count=1 -timeout 30m -v -run '^TestFleetBench$$' ./fleet/ | grep -E 'BENCH|^(--- )?FAIL|^ok'

# Simulated fleet figures (issue 31; docs/reference/fleet-scale.md): N
# simulated nodes (N=100 by default, a comma list for several, e.g.
# N=100,300,1000; run by worker processes of 250 nodes each) against a
# real control plane each, the agent as it
# was (FLEETSIM_MODES=before: its per-pass Node list) and as it is (after): the
# API server's and etcd's CPU and memory at rest, requests by loop,
# watches, latency, a Node change's way to every agent and a rollout
# with maxUnavailable 10%. FLEETSIM_REST is the at-rest window (default 2m).
N ?= 100
FLEETSIM_MODES ?= before,after
FLEETSIM_REST ?= 2m
bench-fleet-sim:
	test/e2e/build-k8s.sh >/dev/null
	set -o pipefail; cd test/e2e && AKS_FLEX_NODE_E2E=1 AKS_FLEX_NODE_BENCH=1 AKS_FLEX_NODE_BENCH_FLEETSIM_N=$(N) AKS_FLEX_NODE_BENCH_FLEETSIM_MODES=$(FLEETSIM_MODES) AKS_FLEX_NODE_BENCH_FLEETSIM_REST=$(FLEETSIM_REST) \
		$(GO) test -count=1 -timeout 6h -v -run '^TestFleetSimBench$$' ./fleetsim/ | grep --line-buffered -E 'BENCH|fleetsim:|_test\.go:[0-9]+: |^(--- )?FAIL|^ok'

# Fleet rollout figures (issue 29): N = 3 ACL-like hosts joined at
# Kubernetes 1.34.2 on one bridge; a FlexNodeRollout to 1.35.4 and another
# worker image with maxUnavailable 1, then one to a third worker image
# with maxUnavailable 2 (10 s soak each): apply to Complete, per node the
# staging time, the wait for a slot, the switch without the soak, the
# NotReady window (the old machine's stop in the agent's journal to the new
# kubelet's first Ready) and the cordoned window a watch on the Nodes saw, the
# API server's requests per node (from its audit log, the agents' apart
# from the kubelets'), during each rollout and in a minute idle before it.
bench-rollout: deps
	test/e2e/build-k8s.sh >/dev/null
	test/e2e/build-k8s.sh --module cmd-1.34 >/dev/null
	set -o pipefail; cd test/e2e && AKS_FLEX_NODE_E2E=1 AKS_FLEX_NODE_BENCH=1 $(GO) test -count=1 -timeout 45m -v -run '^TestRolloutBench$$' ./fleetrollout/ | grep -E 'BENCH|^(--- )?FAIL|^ok'

# Worker image figures: `image build` of examples/worker-image/bookworm.json
# from this machine's apt source with an empty and with a warm package
# cache, the image's size, and provision-machine with a cold and a warm
# layer cache (fails above 1 s warm).
bench-image:
	set -o pipefail; AKS_FLEX_NODE_E2E=1 AKS_FLEX_NODE_BENCH=1 $(GO) test -count=1 -timeout 20m -v -run '^TestImageBench$$' ./test/fixtures/ | grep -E 'BENCH|FAIL|^ok'

# Offline bundle figures: build and verify throughput next to sha256sum on
# the same files, and the peak RSS of a verifying process
# (AKS_FLEX_NODE_BENCH_MB sets the bundle size, default 400).
bench-artifacts:
	$(GO) test -run '^$$' -bench '^BenchmarkBundle$$' -benchtime 3x ./internal/artifact/

# install-node-components' part of a warm join: InstallVerified of a real
# bundle into an empty machine root, in MB/s. The bundle is
# AKS_FLEX_NODE_BENCH_BUNDLE, else the newest complete fixture bundle the
# join e2e built in the test cache (make test builds it once).
TEST_CACHE ?= $(or $(AKS_FLEX_NODE_TEST_CACHE),/var/cache/aks-flex-node-test)
bench-install:
	@set -eu; b="$${AKS_FLEX_NODE_BENCH_BUNDLE:-}"; \
	if [ -z "$$b" ]; then m=$$(ls -td $(TEST_CACHE)/bundle-*/complete 2>/dev/null | head -n1); [ -z "$$m" ] || b="$$(dirname "$$m")/bundle"; fi; \
	if [ -z "$$b" ] || [ ! -f "$$b/manifest.json" ]; then echo "bench-install: no bundle: set AKS_FLEX_NODE_BENCH_BUNDLE to a bundle dir, or run the join e2e (make test) once to build the fixture bundle" >&2; exit 1; fi; \
	echo "bundle: $$b"; AKS_FLEX_NODE_BENCH_BUNDLE="$$b" $(GO) test -run '^$$' -bench '^BenchmarkInstall$$' -benchtime 5x ./internal/artifact/

# Upgrade figures: good-upgrade and rollback latency, median of 5 runs each,
# under systemd in the ACL-like host.
bench-upgrade: deps
	set -o pipefail; AKS_FLEX_NODE_E2E=1 AKS_FLEX_NODE_BENCH=1 $(GO) test -count=1 -timeout 20m -v -run '^TestUpgradeLatencyBench$$' ./test/integration/ | grep -E 'BENCH|FAIL|^ok'

# Credential plugin figures: a cold and the median of 41 cached
# `token kubelogin` calls of the real binary, against a fake tenant on
# loopback (target: cached median under 50 ms).
bench-token:
	AKS_FLEX_NODE_BENCH=1 $(GO) test -count=1 -v -run '^TestTokenKubeloginTiming$$' ./internal/cli/ | grep -E 'BENCH|FAIL|^ok'

clean:
	rm -rf bin
