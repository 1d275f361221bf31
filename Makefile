# aks-flex-node build, test and demo entry points. See README.md.
SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo v0.0.0-dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
BUILD_TIME ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
PKG := github.com/Azure/aks-flex-node/internal/buildinfo
LDFLAGS := -s -w -X $(PKG).Version=$(VERSION) -X $(PKG).GitCommit=$(COMMIT) -X $(PKG).BuildTime=$(BUILD_TIME)
BIN := bin/aks-flex-node
SCRIPTS := $(shell git ls-files '*.sh' 'scripts/*' 2>/dev/null) .ci/run

.PHONY: all build test unit e2e lint fmt fuzz demo deps clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/aks-flex-node

# Host packages the integration tests use (Debian/Ubuntu, as root).
deps:
	./scripts/ci-deps.sh

# The test command: unit tests, then the real-systemd and real-cluster tests.
test: deps build
	AKS_FLEX_NODE_E2E=1 $(GO) test -race -count=1 ./...
	test/e2e/build-k8s.sh >/dev/null
	cd test/e2e && AKS_FLEX_NODE_E2E=1 $(GO) test -count=1 -timeout 45m ./...

# Unit tests only: no root, no nspawn, no cluster.
unit:
	$(GO) test -race -count=1 ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd test/e2e && $(GO) vet ./...
	shellcheck $(SCRIPTS)

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzValidatePrefix -fuzztime 30s ./internal/layout/

# The main job. Until the local join lands this resolves and validates the
# ACL example: the layout a prefix of /opt/aks-flex-node selects.
demo: build
	./$(BIN) version
	./$(BIN) config validate --config examples/acl-bootstrap-token.json
	./$(BIN) layout --config examples/acl-bootstrap-token.json

clean:
	rm -rf bin
