# runstream developer entry points. `make help` lists them.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
# Prerequisites run in the order listed (deps before build before test), even under -j.
.NOTPARALLEL:

.PHONY: help deps build test test-faults test-cluster lint run bench bench-history bench-layout bench-scale-out proto clean clean-data

help: ## this list
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-11s %s\n", $$1, $$2}'

deps: ## npm ci when needed; system packages for the tests (apt-get as root, else a hint)
	scripts/deps.sh

build: ## compile TypeScript to dist/
	npm run build

test: deps build ## unit and integration tests (real nats-server and Postgres); not test/faults/
	npm test

test-faults: deps build ## the fault suite (docs/reliability.md): ~15 min, RS_SOAK_SECONDS=600
	npm run test-faults

test-cluster: deps build ## 3-node NATS cluster: kill -9 of leader, follower, persister, ingest (docs/reliability.md), < 15 min
	npm run test-cluster

lint: ## biome + tsc --noEmit
	npm run lint

run: ## local stack: nats, Postgres, broker and demo agent; Ctrl-C stops it
	scripts/run-stack.sh

bench: deps build ## benchmarks
	node dist/bench/run.js

bench-history: deps build ## History reads benchmark: ListEvents pages on ~2M rows, < 10 min
	node dist/bench/history.js

bench-scale-out: deps build ## 1 vs 2 ingest and 1 vs 2 persister processes at the same load (docs/scaling.md), ~5 min
	node dist/bench/scale-out.js

bench-layout: deps build ## log layouts for partitioned persisters (docs/scaling.md): 3 runs of 1M messages, ~20 min
	node dist/bench/log-layout.js

proto: ## regenerate src/gen from proto/
	npm run proto

clean: ## remove build output
	rm -rf dist

clean-data: ## remove the local stack's data (.data: NATS store, Postgres cluster, logs)
	rm -rf .data
