# Thin driver over the CMake presets (CMakePresets.json); CMake does the real work.
#   make build    install missing packages, configure and build build/default
#   make demo     build, then the main job: 4 ranks train a Fashion-MNIST CNN in sync, solo,
#                 majority and adaptive mode under injected imbalance, 3 seeds, time to accuracy
#                 ($(DEMO_CMD))
#   make check    default build + all tests, then the TSan and ASan builds + their tests, every
#                 optional part required (tests/check.sh; it prints each stage's time and count)
#   make fuzz     the libFuzzer targets of tests/fuzz, FUZZ_SECONDS (60) each (clang)
#   make tsan | asan | install [PREFIX=...] | format | clean
DEMO_CMD ?= ./sgd/demo.sh build/default

WERROR ?= OFF
PREFIX ?= /usr/local
JOBS ?= $(shell nproc)
CMAKE ?= cmake
CTEST ?= ctest
CLANG_FORMAT ?= clang-format

# Configures (keeping WERROR in step with the command line; parts left at AUTO are built when
# found) and builds one preset. `make check` (tests/check.sh) requires every part instead.
define configure_and_build
	$(CMAKE) --preset $(1) -DEAGERCOMM_WERROR=$(WERROR) -DEAGERCOMM_REQUIRE_ALL=OFF
	$(CMAKE) --build --preset $(1) -j $(JOBS)
endef

.PHONY: all deps build demo check tsan asan fuzz install format format-check clean

all: build

deps:
	./deploy/install-deps.sh

build: deps
	$(call configure_and_build,default)

demo: build
	$(DEMO_CMD)

check: deps
	WERROR=$(WERROR) JOBS=$(JOBS) CMAKE=$(CMAKE) CTEST=$(CTEST) ./tests/check.sh

tsan: deps
	$(call configure_and_build,tsan)
	$(CTEST) --preset tsan

asan: deps
	$(call configure_and_build,asan)
	$(CTEST) --preset asan

fuzz: deps
	./tests/fuzz/run.sh

install: build
	$(CMAKE) --install build/default --prefix $(PREFIX)

# The folders and suffixes tests/format_check.sh (in make check) checks.
format:
	find runtime transport collectives sgd capi python tools bench tests \
	  \( -name '*.h' -o -name '*.cc' -o -name '*.c' -o -name '*.cu' \) -type f -print0 | \
	  xargs -0 -r $(CLANG_FORMAT) -i

format-check:
	./tests/format_check.sh $(CLANG_FORMAT)

clean:
	rm -rf build
