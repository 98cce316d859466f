# Drives CMake (as Neovim's Makefile does). `make demo` runs the shipped agent;
# `make test` builds with AddressSanitizer/UBSan and runs every test under ctest.
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
BUILD ?= build
ASAN_BUILD ?= build-asan
PARKED ?= 100000
DEMO_DB ?= $(BUILD)/demo.db
PREFIX ?= /usr/local

.PHONY: all build install demo test bench clean

all: build

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

# moor, moor-wfa, libmoor (static and shared), moor.h, moor.pc and the Lua
# side under PREFIX (DESTDIR for staging, as CMake takes it).
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

demo: build
	@rm -f $(DEMO_DB) $(DEMO_DB)-wal $(DEMO_DB)-shm
	@echo '$$ moor call release_notes {"project": "demo", "version": "1.2.0"}'
	@$(BUILD)/moor call release_notes '{"project": "demo", "version": "1.2.0"}' --db $(DEMO_DB)
	@echo
	@echo '$$ moor runs'
	@$(BUILD)/moor runs --db $(DEMO_DB)
	@echo
	@echo '$$ moor logs <run>'
	@$(BUILD)/moor logs $$($(BUILD)/moor runs --json --db $(DEMO_DB) | sed -n 's/.*"id":"\(run_[0-9a-f]*\)".*/\1/p' | head -1) --db $(DEMO_DB)

test:
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DMOOR_SANITIZE=ON >/dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ctest --output-on-failure -j $(JOBS)

bench: build
	cmake --build $(BUILD) --target moor_bench -j $(JOBS)
	$(BUILD)/moor_bench tests/bench/agent tests/bench/task_agent tests/bench/workflow_agent
	cmake --build $(BUILD) --target moor_tick_bench -j $(JOBS)
	$(BUILD)/moor_tick_bench tests/bench/agent
	cmake --build $(BUILD) --target moor_resume_bench -j $(JOBS)
	$(BUILD)/moor_resume_bench $(BUILD)/moor tests/bench/resume_agent $(BUILD)/resume-bench
	@rm -f $(BUILD)/bench-sandbox.db*
	MOOR_DB=$(BUILD)/bench-sandbox.db lua5.4 -e "package.cpath='$(BUILD)/lua/?.so;'..package.cpath" tests/bench/sandbox.lua
	lua5.4 tests/bench/harness.lua $(BUILD)/moor 1000
	@rm -f $(BUILD)/bench-parked.db*
	MOOR_DB=$(BUILD)/bench-parked.db lua5.4 -e "package.cpath='$(BUILD)/lua/?.so;'..package.cpath; package.path='lua/?.lua;lua/?/init.lua;'..package.path" tests/bench/parked.lua $(PARKED)
	@command -v wrk >/dev/null || apt-get install -y wrk >/dev/null 2>&1 || \
	  { apt-get update >/dev/null 2>&1 && apt-get install -y wrk >/dev/null 2>&1; } || \
	  echo "wrk could not be installed: no requests/s figure"
	$(CC) -O2 -Wall -Wextra -o $(BUILD)/moor_http_bench tests/bench/http_bench.c -lcurl
	$(BUILD)/moor_http_bench $(BUILD)/moor tests/bench/agent tests/bench/wrk_webhook.lua

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
