# Thin wrapper over CMake. `make demo` and `make test` install what is missing, build, then run.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
CTEST_FLAGS ?= --output-on-failure --timeout 600 -j $(JOBS)
CXX_SOURCES = $(shell git ls-files --cached --others --exclude-standard '*.cc' '*.h' '*.cu' '*.cuh' 2>/dev/null)

.PHONY: all deps configure build test unit demo cluster-demo format format-check clean sanitize sanitize-thread fuzz images

all: build

deps:
	@./scripts/install-deps

$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) $(CMAKE_FLAGS)

configure: deps $(BUILD_DIR)/CMakeCache.txt

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# The images are built first so that the image checks and the in-cluster e2e (ctest -L images)
# run; IMAGES=0 leaves them out (those tests then skip, saying why).
IMAGES ?= 1
# CTest starts the longest tests first when it knows their times (Testing/Temporary/
# CTestCostData.txt), so that a 2-minute e2e test does not start last and run alone; a fresh
# clone's build folder takes them from the last run on this machine (COST_CACHE), and gives
# its own back. Only the order changes: every test runs.
COST_CACHE ?= $(HOME)/.cache/kubetrain/CTestCostData.txt
COST_DATA = $(BUILD_DIR)/Testing/Temporary/CTestCostData.txt
test: build format-check $(if $(filter 0,$(IMAGES)),,images)
	@if [ ! -f $(COST_DATA) ] && [ -f $(COST_CACHE) ]; then \
	  mkdir -p $(dir $(COST_DATA)) && cp $(COST_CACHE) $(COST_DATA); fi
	ctest --test-dir $(BUILD_DIR) $(CTEST_FLAGS); rc=$$?; \
	  mkdir -p $(dir $(COST_CACHE)) && cp $(COST_DATA) $(COST_CACHE) 2>/dev/null; exit $$rc

# kubetrain/operator:0.1.0 and kubetrain/worker:0.1.0-cpu from docker/*.Dockerfile with docker,
# podman or buildah; base images no registry serves are made from the Debian archive.
images: deps
	./scripts/build-images

# Every test under ASan+UBSan (build-asan/). sanitize-thread: the concurrent suites under TSan
# (build-tsan/). CI runs both.
sanitize: deps
	./scripts/sanitize address

sanitize-thread: deps
	./scripts/sanitize thread

# Each libFuzzer target for FUZZ_SECONDS on its seed corpus (build-fuzz/, clang).
FUZZ_SECONDS ?= 30
fuzz: deps
	./scripts/fuzz --seconds $(FUZZ_SECONDS)

demo: build
	$(BUILD_DIR)/bin/kubetrain validate deploy/examples/*.yaml
	$(BUILD_DIR)/bin/kubetrain run deploy/examples/fashion-mnist.yaml

# The README's cluster quickstart on localkube: from the images where buildah can run them (root),
# else with the programs as processes. EPOCHS=2 unless given.
cluster-demo: build
	./scripts/cluster-demo

format:
	clang-format -i $(CXX_SOURCES)

format-check:
	@clang-format --dry-run --Werror $(CXX_SOURCES) && echo "format-check: $(words $(CXX_SOURCES)) files formatted"

clean:
	rm -rf $(BUILD_DIR) build-asan build-tsan build-fuzz
