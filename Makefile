# nearstore — everything a fresh Debian machine needs is installed from here.
GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME    ?= 30s

.PHONY: all build demo test test-short lint fuzz interop-deps bench-deps clean crash proto

all: build

build:
	$(GO) build -buildvcs=auto -o bin/nearstore ./cmd/nearstore

# The main job on embedded defaults.
demo:
	$(GO) run ./cmd/nearstore demo

# The whole suite, as CI runs it: lint, then every test with the race
# detector, including the QEMU interop tests against the Linux kernel's
# NVMe/TCP host and target (their packages are installed on first use).
# -count=1: the tests under tests/ run the nearstore binary, which
# internal/clitest builds with go build; go test's cache cannot see that
# dependency and would replay their results after a change to cmd/.
test: lint interop-deps functions-check
	$(GO) test -race -count=1 -timeout 45m ./...
	$(MAKE) crash

# Every crash point of the crash tests: under -race they sample (the
# detector makes each point ten times slower), so CI also runs them all
# without it.
crash:
	$(GO) test -count=1 -run '^TestCrash' ./offloadfs/

# Unit and integration tests without the QEMU guest.
test-short:
	$(GO) test -short -race ./...

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

# Runs every fuzz target in the tree for FUZZTIME each (CI runs only their
# seed corpora, as part of go test). Targets are found by name, so a new
# Fuzz function is fuzzed without touching this file.
fuzz:
	@for f in $$(grep -rlE '^func Fuzz' --include='*_test.go' . | sort); do \
	  pkg=$$(dirname $$f); \
	  for fn in $$(grep -oE '^func Fuzz[A-Za-z0-9_]+' $$f | cut -d' ' -f2); do \
	    echo "== $$fn ($$pkg)"; $(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

interop-deps:
	bash tests/interop/setup.sh >/dev/null
	bash tests/interop/setup.sh trixie >/dev/null

bench-deps:
	bash scripts/bench-deps.sh

clean:
	rm -rf bin

# The standard functions: functions/src/*.c built to functions/wasm/*.wasm
# and functions/ebpf/*.o (committed); functions-check rebuilds them into a
# temp dir and fails if the committed modules differ.
.PHONY: functions functions-check
functions:
	bash scripts/build-functions.sh

functions-check:
	bash scripts/build-functions.sh --check

# The gRPC code of the offload engine (offload/offloadpb/offload.proto)
# and of chain replication (kv/chain/chainpb/chain.proto), to *.pb.go and
# *_grpc.pb.go beside them (committed). The plugins are pinned
# here and built into bin/; protoc is Debian's (apt-get install
# protobuf-compiler, 3.21.12 on bookworm), whose version the generated
# files name.
PROTOC_GEN_GO      ?= google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_GO_GRPC ?= google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.0
proto:
	@command -v protoc >/dev/null || { echo "protoc missing: apt-get install protobuf-compiler"; exit 1; }
	GOBIN=$(CURDIR)/bin GOFLAGS= $(GO) install $(PROTOC_GEN_GO)
	GOBIN=$(CURDIR)/bin GOFLAGS= $(GO) install $(PROTOC_GEN_GO_GRPC)
	PATH=$(CURDIR)/bin:$$PATH protoc -I offload/offloadpb \
	  --go_out=offload/offloadpb --go_opt=paths=source_relative \
	  --go-grpc_out=offload/offloadpb --go-grpc_opt=paths=source_relative \
	  offload/offloadpb/offload.proto
	PATH=$(CURDIR)/bin:$$PATH protoc -I kv/chain/chainpb \
	  --go_out=kv/chain/chainpb --go_opt=paths=source_relative \
	  --go-grpc_out=kv/chain/chainpb --go-grpc_opt=paths=source_relative \
	  kv/chain/chainpb/chain.proto
