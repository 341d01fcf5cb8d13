# Backend tests run against real servers (see internal/testenv). `make test`
# installs missing server binaries when it can (.ci/install-servers), then
# checks formatting, vets and runs the race-enabled tests.

GO           ?= go
PKGS         ?= ./...
TEST_TIMEOUT ?= 15m
BENCH        ?= .
BENCHTIME    ?= 1s

.DEFAULT_GOAL := test
# The steps of `test` must run in order, even under make -j.
.NOTPARALLEL:
.PHONY: test vet fmt-check bench install-servers

test: fmt-check install-servers vet
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

vet:
	$(GO) vet $(PKGS)

fmt-check:
	@out="$$(gofmt -l .)"; \
	if [ -n "$$out" ]; then echo "gofmt -l: these files need formatting:"; echo "$$out"; exit 1; fi

bench: install-servers
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) $(PKGS)

install-servers:
	@./.ci/install-servers
