# The repository is a set of Go modules, listed once in modules.txt (go.work
# uses the same): the core (stdlib only), one per backend, backends (the URL
# registry), the adapters, cmd/lockctl, examples, and the test-only ones
# (internal/testenv, internal/etcdserver, integration).
# `make test` installs missing server binaries when it can
# (.ci/install-servers), checks formatting, go.work against modules.txt and
# go.mod tidiness, vets every module, and runs the race-enabled tests of
# every module against real
# servers: withstores starts the servers that the tests inside the backend
# modules read from LOCKER_* variables; the integration module starts its
# own through the harness (a test that restarts its server gets one of its
# own). testreport prints go test's usual output from go test -json, then the
# conformance cases run, passed and skipped per harness; under CI=true a
# conformance skip that is not a documented property of the backend fails.

GO           ?= go
PKGS         ?= work
TEST_TIMEOUT ?= 15m
BENCH        ?= .
BENCHTIME    ?= 1s
WITHSTORES   := $(GO) run ./internal/testenv/withstores --
TESTREPORT   := $(GO) run ./internal/testenv/testreport --
# go test starts the packages in the order given, TEST_P at once: the
# longest go first, so that none of them starts last. The tests mostly wait
# on their servers and on TTLs (make test keeps about half of a core busy
# on two cores), so more packages run at once than there are cores.
TEST_P       ?= 4
LONGEST      := ./integration/postgres ./integration/mysql ./integration/redis ./integration/redis/redlock \
                ./integration/redis/sentinel ./integration/etcd
TESTPKGS     := $(if $(filter work,$(PKGS)),$(LONGEST) work,$(PKGS))

.DEFAULT_GOAL := test
# The steps of `test` must run in order, even under make -j.
.NOTPARALLEL:
.PHONY: test vet fmt-check modules-check tidy-check bench install-servers release release-check

# go test runs no vet of its own (-vet=off): the vet step before it ran
# every analyzer of go test's set, and more, on the same packages.
test: fmt-check modules-check tidy-check install-servers vet
	$(WITHSTORES) $(TESTREPORT) $(GO) test -json -race -vet=off -count=1 -p $(TEST_P) -timeout $(TEST_TIMEOUT) $(TESTPKGS)

vet:
	$(GO) vet $(PKGS)

fmt-check:
	@out="$$(gofmt -l .)"; \
	if [ -n "$$out" ]; then echo "gofmt -l: these files need formatting:"; echo "$$out"; exit 1; fi

# go.work uses exactly the modules of modules.txt, each go.mod declares the
# path of its directory and the minimum Go version modules.txt gives it, and
# published modules require only published ones.
modules-check:
	@GO=$(GO) ./.ci/modules check

# Every module's go.mod and go.sum are what `go mod tidy` makes of them,
# outside the workspace (as a user's build reads them).
tidy-check:
	@GO=$(GO) ./.ci/modules tidy-check

bench: install-servers
	$(WITHSTORES) $(GO) test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) $(PKGS)

install-servers:
	@./.ci/install-servers

# Tags every module for a release, dry-run unless APPLY=1: make release VERSION=v0.2.0
release:
	@./.ci/release $(VERSION)

# Publishes every published module into a local module proxy and consumes
# it as a user would: go install lockctl, go get redis, a lock on Redis.
release-check:
	@GO=$(GO) ./.ci/release-check
