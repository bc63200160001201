# PyPTO developer commands. `make demo` and `make test` do everything from a fresh machine:
# set-up (system packages + .venv), CMake configure, incremental build, then run.
SHELL := /bin/bash
.DEFAULT_GOAL := build

PYTHON    ?= python3
VENV      ?= .venv
BUILD_DIR ?= build
BUILD_TYPE ?= Release
CMAKE_ARGS ?=

# Python packages for the venv. torch is pinned: a CPU wheel of 2.13.0 is what pip finds locally.
PY_PKGS := numpy torch==2.13.0 nanobind scikit-build-core pytest pytest-xdist hypothesis ninja cmake \
	matplotlib tqdm transformers==5.25.0
CLANG_FORMAT_PKG := clang-format==23.1.1

VENV_ABS  := $(abspath $(VENV))
VPY       := $(VENV_ABS)/bin/python
BUILD_ABS := $(abspath $(BUILD_DIR))
# The stamp's name carries a hash of the requirements, so changing them re-runs set-up.
SETUP_HASH := $(shell echo '$(PY_PKGS)' | md5sum | cut -c1-10)
STAMP     := $(VENV)/.pypto-setup-$(SETUP_HASH)

# Tests use a kernel cache inside the build tree: hermetic across runs, shared within one run.
TEST_CACHE := $(BUILD_ABS)/test-cache
# The seed tests also live beside the repository (shared/seed); run that copy if it differs.
SHARED_SEED := $(firstword $(wildcard $(abspath ../shared/seed) /work/shared/seed))
# Parallel pytest (pytest-xdist, installed by set-up): a worker per core, each test file on one
# worker (a file's tests share its kernels' compiles). Kernel compiles are one g++ process each:
# on 2 Zen 3 cores the Python tests took 34 min this way; a serial run was at 10% after 25 min.
XDIST = $(shell $(VPY) -c 'import xdist' >/dev/null 2>&1 && echo '-n auto --dist loadfile')
PYENV = PYTHONPATH=$(CURDIR)/python


.PHONY: install
.PHONY: setup configure build test test-cpp test-python test-sanitize fuzz mutate demo bench format lint clean distclean help

help:
	@echo "make demo   - set up, build, run the demo (python -m pypto.demo)"
	@echo "make test   - set up, build, run C++ (GoogleTest) and Python (pytest) tests"
	@echo "make mutate - mutation testing: tests/mutants.toml on a private copy (MUTATE_ARGS=--only ID,...)"
	@echo "make test-sanitize - ASan+UBSan build of the C++ tests and a Python subset (slow)"
	@echo "make fuzz   - the long fuzz run (FUZZ_INPUTS=10000 mutated ISA programs, random kernels)"
	@echo "make setup | build | bench | format | lint | clean | distclean"

# ---- set-up ---------------------------------------------------------------------------------------
setup: $(STAMP)

$(STAMP):
	@VENV='$(VENV)' PYTHON='$(PYTHON)' PY_PKGS='$(PY_PKGS)' STAMP='$(STAMP)' scripts/setup.sh

# ---- build ----------------------------------------------------------------------------------------
configure: setup
	@if [ ! -f $(BUILD_DIR)/build.ninja ]; then \
	  rm -rf $(BUILD_DIR)/CMakeCache.txt $(BUILD_DIR)/CMakeFiles; \
	  $(VENV_ABS)/bin/cmake -S . -B $(BUILD_DIR) -G Ninja \
	    -DCMAKE_MAKE_PROGRAM=$(VENV_ABS)/bin/ninja \
	    -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	    -DPython_EXECUTABLE=$(VPY) $(CMAKE_ARGS); \
	fi

# After the build, a venv inside this tree (the default .venv) gets a development install of the
# package (scripts/dev_install.py: a .pth naming python/), so `import pypto` works from any
# directory. A venv outside the tree (one shared by several checkouts) is left alone.
# Then the shared GEMM library is compiled for this machine into python/pypto/prebuilt/ (a few
# seconds, once per header change), so that a fresh kernel cache does not wait for it.
build: configure
	$(VENV_ABS)/bin/cmake --build $(BUILD_DIR)
	@case '$(VENV_ABS)/' in '$(CURDIR)'/*) $(VPY) scripts/dev_install.py $(CURDIR)/python >/dev/null;; esac
	@$(PYENV) $(VPY) -c 'from pypto import _C; _C.prebuild_shared_gemm()'

# C++ library, headers (the C++ API and include/pto), ptoc and the CMake package file
# (find_package(pypto)) under PREFIX; see examples/cpp_api.
PREFIX ?= /usr/local
install: build
	$(VENV_ABS)/bin/cmake --install $(BUILD_DIR) --prefix $(PREFIX)

# ---- tests ----------------------------------------------------------------------------------------
# C++ and Python suites both run even if the first fails, so one report shows every failure.
define RUN_CPP_TESTS
if [ -x $(BUILD_DIR)/pypto_cpp_tests ]; then \
  echo "== C++ tests (GoogleTest)"; \
  PYPTO_CACHE_DIR=$(TEST_CACHE) $(BUILD_DIR)/pypto_cpp_tests || cpp_rc=$$?; \
else \
  echo "== C++ tests: none built (no tests/cpp/*.cpp yet)"; \
fi
endef

# The seed tests are kept in tests/python/seed; a copy of shared/ beside the repository may hold
# a newer version, which is run as well when it differs from ours.
define RUN_PY_TESTS
echo "== Python tests (pytest)"; \
$(PYENV) PYPTO_CACHE_DIR=$(TEST_CACHE) $(VPY) -m pytest -q $(XDIST) tests/python || py_rc=$$?; \
echo "== Seed tests on the reference interpreter (PYPTO_INTERPRET=1)"; \
$(PYENV) PYPTO_INTERPRET=1 PYPTO_CACHE_DIR=$(TEST_CACHE) $(VPY) -m pytest -q -p no:cacheprovider \
  tests/python/seed || py_rc=$$?; \
extra=""; \
if [ -n "$(SHARED_SEED)" ]; then \
  for f in $(SHARED_SEED)/test_*.py; do \
    [ -f "$$f" ] || continue; \
    cmp -s "$$f" "tests/python/seed/$$(basename $$f)" || extra="$$extra $$f"; \
  done; \
fi; \
if [ -n "$$extra" ]; then \
  echo "== Seed tests that differ from tests/python/seed:$$extra"; \
  $(PYENV) PYPTO_CACHE_DIR=$(TEST_CACHE) PYTHONDONTWRITEBYTECODE=1 \
    $(VPY) -m pytest -q -p no:cacheprovider $$extra || py_rc=$$?; \
fi
endef

test: build
	@rm -rf $(TEST_CACHE) && mkdir -p $(TEST_CACHE); \
	cpp_rc=0; py_rc=0; \
	$(RUN_CPP_TESTS); \
	$(RUN_PY_TESTS); \
	if [ $$cpp_rc -ne 0 ] || [ $$py_rc -ne 0 ]; then \
	  echo "make test: FAILED (C++ exit $$cpp_rc, Python exit $$py_rc)"; exit 1; \
	fi

test-cpp: build
	@mkdir -p $(TEST_CACHE); cpp_rc=0; $(RUN_CPP_TESTS); exit $$cpp_rc

test-python: build
	@mkdir -p $(TEST_CACHE); py_rc=0; $(RUN_PY_TESTS); exit $$py_rc

# Mutation testing (docs/testing.md): each mutant of tests/mutants.toml is applied to a private copy
# of the tree (build/mutate: its own build dir and ccache), rebuilt, and the tests covering its file
# run; survivors are printed. Fails when fewer than 95% of the counted mutants are killed.
mutate: setup
	$(VPY) tools/mutate.py --venv $(VENV_ABS) $(MUTATE_ARGS)

# ASan + UBSan build (in build-sanitize/, with its own copy of the package) of the C++ tests and a
# Python subset, generated kernels compiled with the same sanitizers. Not part of `make test`.
test-sanitize: setup
	@VENV='$(VENV_ABS)' BUILD='$(BUILD_ABS)-sanitize' CMAKE_ARGS='$(CMAKE_ARGS)' scripts/test_sanitize.sh

# The long run of tests/python/test_fuzz.py (make test runs a bounded one): new random inputs every
# time; the summary goes to the terminal and to $(BUILD_DIR)/fuzz-report.txt (see docs/testing.md).
FUZZ_INPUTS ?= 10000
fuzz: build
	@mkdir -p $(TEST_CACHE); rm -f $(BUILD_DIR)/fuzz-report.txt; \
	$(PYENV) PYPTO_CACHE_DIR=$(TEST_CACHE) PYPTO_FUZZ_INPUTS=$(FUZZ_INPUTS) HYPOTHESIS_PROFILE=explore \
	  PYPTO_FUZZ_REPORT=$(abspath $(BUILD_DIR))/fuzz-report.txt \
	  $(VPY) -m pytest -q -s -p no:cacheprovider tests/python/test_fuzz.py; rc=$$?; \
	cat $(BUILD_DIR)/fuzz-report.txt 2>/dev/null; exit $$rc

# ---- run ------------------------------------------------------------------------------------------
demo: build
	@test -f python/pypto/demo.py || { echo "make demo: python/pypto/demo.py does not exist yet" >&2; exit 1; }
	$(PYENV) $(VPY) -m pypto.demo

# The bench's peers include JAX (CPU): installed here, not by setup, since only the bench needs it.
bench: build
	@test -f bench/run.py || { echo "make bench: bench/run.py does not exist yet" >&2; exit 1; }
	@$(VPY) -c 'import jax' 2>/dev/null || $(VPY) -m pip install --disable-pip-version-check -q "jax[cpu]"
	$(PYENV) $(VPY) bench/run.py $(BENCH_ARGS)

# ---- style ----------------------------------------------------------------------------------------
$(VENV)/bin/clang-format: | $(STAMP)
	$(VPY) -m pip install --disable-pip-version-check -q $(CLANG_FORMAT_PKG)

format: $(VENV)/bin/clang-format
	CLANG_FORMAT=$(VENV_ABS)/bin/clang-format scripts/check_style.sh --fix

lint: $(VENV)/bin/clang-format
	CLANG_FORMAT=$(VENV_ABS)/bin/clang-format scripts/check_style.sh

# ---- cleaning -------------------------------------------------------------------------------------
clean:
	rm -rf $(BUILD_DIR) $(BUILD_DIR)-sanitize python/pypto/_C*.so python/pypto/_torch_glue*.so

distclean: clean
	rm -rf $(VENV) dist *.egg-info .pytest_cache .hypothesis
