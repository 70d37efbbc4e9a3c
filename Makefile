# The two commands: `make run` (the gateway on its embedded default) and `make test` (every test).
# Both install what they need on a fresh Debian 12 machine, then build.
BUILD ?= build
JOBS ?= $(shell nproc)
ARGS ?=

.PHONY: all deps build run test bench deb format clean

all: build

deps:
	@WARDEN_WITH_NODE=1 scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS)

run: build
	$(BUILD)/warden serve $(ARGS)

test: build
	scripts/install-test-tools.sh
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

bench: build
	$(BUILD)/engine_bench

# A Debian package of the binary and its systemd units (build/warden_<version>_amd64.deb).
deb: build
	WARDEN_WITH_PACKAGING=1 scripts/install-deps.sh
	cd $(BUILD) && cpack -G DEB

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD)
