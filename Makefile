# mcprel — `make check` is the whole test suite; CI runs exactly that.

GO       ?= go
NPM      ?= npm
INTEROP  := internal/interop/ts
INSPECT  := internal/interop/inspector
EVERY    := internal/interop/everything
GOCLIENT := internal/interop/goclients
GOSERVER := internal/interop/goservers
OAUTH    := internal/interop/oauth
CONF     := conformance

.PHONY: check vet test fuzz interop-deps system-deps conformance conformance-deps demo build

## check: formatting, vet, every test with the race detector (including the
## interop tests with the TypeScript SDKs, the Inspector CLI, the official Go
## SDK, mcp-go and the reference server-everything), and both official
## conformance suites. The pinned npm packages (and Node 22 for the suites
## and the Inspector) and the Go peers (a module of their own) install on
## first use.
check: vet interop-deps test fuzz conformance
	@if [ -z "$${MCPREL_TEST_POSTGRES_URL:-}" ]; then \
	  echo "check: passed, but MCPREL_TEST_POSTGRES_URL is unset: every PostgreSQL test was SKIPPED"; \
	  echo "       (set it, e.g. to postgres://postgres@127.0.0.1:5432/test?sslmode=disable, to run them,"; \
	  echo "       after creating that database: createdb -h 127.0.0.1 -U postgres test)"; \
	else echo "check: passed, PostgreSQL tests included"; fi

vet:
	@unformatted=$$(gofmt -l $$(find . -name '*.go' -not -path '*/node_modules/*')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	cd bench && $(GO) vet ./...
	cd $(GOCLIENT) && $(GO) vet ./...
	cd $(GOSERVER) && $(GO) vet ./...

test:
	@[ -n "$${MCPREL_TEST_POSTGRES_URL:-}" ] || echo "test: MCPREL_TEST_POSTGRES_URL is unset: the PostgreSQL tests will be SKIPPED"
	MCPREL_REQUIRE_INTEROP=1 $(GO) test -race -count=1 ./...
	cd $(GOCLIENT) && $(GO) test -race -count=1 ./...
	cd $(GOSERVER) && $(GO) test -race -count=1 ./...

## fuzz: a short run of each fuzz target, about 10 s each on a 2-core
## machine (the committed corpora under testdata/fuzz also run as tests
## in `make test`). For a longer hunt, give every target one budget:
##   make fuzz FUZZTIME=10m
## The default budgets are counts of executions, sized per target, not a
## duration: with a duration, Go before 1.27 can fail a target with a bare
## "context deadline exceeded" at the deadline on a loaded machine,
## without any crashing input (go.dev/issue/75804). A count has no
## deadline to race.
FUZZTIME ?=
fuzz:
	$(GO) test ./jsonrpc -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(or $(FUZZTIME),300000x)
	$(GO) test ./jsonrpc -run '^$$' -fuzz '^FuzzIDScanner$$' -fuzztime $(or $(FUZZTIME),300000x)
	$(GO) test ./jsonrpc -run '^$$' -fuzz '^FuzzMembers$$' -fuzztime $(or $(FUZZTIME),300000x)
	$(GO) test ./jsonrpc -run '^$$' -fuzz '^FuzzElements$$' -fuzztime $(or $(FUZZTIME),300000x)
	$(GO) test ./logbuf -run '^$$' -fuzz '^FuzzTextHandler$$' -fuzztime $(or $(FUZZTIME),100000x)
	$(GO) test ./transport/stdio -run '^$$' -fuzz '^FuzzSession$$' -fuzztime $(or $(FUZZTIME),8000x)
	$(GO) test ./transport/streamhttp -run '^$$' -fuzz '^FuzzHandler$$' -fuzztime $(or $(FUZZTIME),80000x)

interop-deps: $(INTEROP)/node_modules/.package-lock.json $(INSPECT)/node_modules/.package-lock.json \
	$(EVERY)/node_modules/.package-lock.json $(OAUTH)/node_modules/.package-lock.json system-deps

# Two peers come from Debian's packages: chromium reads the status page as
# a person would (cmd/mcprel/status_browser_test.go), and HAProxy balances
# the replicas of cmd/mcprel's TestReplicasBehindBalancer
# (examples/balancer/haproxy.cfg). make test requires both; as root they
# are installed when missing, otherwise the message says how.
system-deps:
	@missing=""; \
	[ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	{ command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ]; } || missing="$$missing haproxy"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && (apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing) >/dev/null 2>&1; then :; \
	  else echo "interop-deps: could not install$$missing (apt-get install$$missing, as root): the status page's browser test and the load balancer test will fail" >&2; fi; \
	fi

$(INTEROP)/node_modules/.package-lock.json: $(INTEROP)/package.json $(INTEROP)/package-lock.json
	cd $(INTEROP) && $(NPM) ci --no-audit --no-fund

# npm ci, like the others: it installs exactly the lock file and never
# rewrites it, so a test run leaves the tracked tree as it found it.
$(INSPECT)/node_modules/.package-lock.json: $(INSPECT)/package.json $(INSPECT)/package-lock.json
	cd $(INSPECT) && $(NPM) ci --no-audit --no-fund

# The reference server, server-everything, that the client's HTTP+SSE
# interop test dials (and the gateway's tests will put behind it).
$(EVERY)/node_modules/.package-lock.json: $(EVERY)/package.json $(EVERY)/package-lock.json
	cd $(EVERY) && $(NPM) ci --no-audit --no-fund

# The authorization server (panva's oidc-provider) that the OAuth tests
# get their access tokens from (internal/interop/oidcprovider starts it).
$(OAUTH)/node_modules/.package-lock.json: $(OAUTH)/package.json $(OAUTH)/package-lock.json
	cd $(OAUTH) && $(NPM) ci --no-audit --no-fund

## conformance: the official MCP conformance suites against the fixture
## server; summaries are printed, details land in conformance/results/.
conformance: conformance-deps
	./$(CONF)/run.sh

conformance-deps: $(CONF)/node_modules/.package-lock.json

$(CONF)/node_modules/.package-lock.json: $(CONF)/package.json $(CONF)/package-lock.json
	cd $(CONF) && $(NPM) ci --no-audit --no-fund

## demo: the scripted exchange against `mcprel serve --stdio`.
demo:
	$(GO) run ./cmd/mcprel demo

build:
	$(GO) build -o bin/mcprel ./cmd/mcprel
