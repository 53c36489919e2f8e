# The two commands of the README: `make demo` and `make test`. Both install what is missing first.
PRESET ?= $(if $(CI),ci,release)
BUILD := build
TESSEL := $(BUILD)/tessel
export OMP_NUM_THREADS ?= 2

.PHONY: deps build test demo bench clean

deps:
	@bash scripts/install-deps.sh

build: deps
	@cmake --preset $(PRESET) >/dev/null
	@cmake --build $(BUILD) -j2

test: build
	cd $(BUILD) && ctest --output-on-failure -j2

demo: build
	bash scripts/demo.sh

bench: build
	bash bench/compare_with_torch.sh

clean:
	rm -rf $(BUILD)
