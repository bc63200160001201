#!/usr/bin/env bash
# make test-sanitize: builds PyPTO with AddressSanitizer + UndefinedBehaviorSanitizer in $BUILD
# (default build-sanitize) and runs the C++ tests and a Python subset against it, with every
# generated kernel compiled with the same sanitizers (PYPTO_CXXFLAGS). The Python process is not
# instrumented, so libasan is preloaded into it; the sanitized _C module lives in a package copy
# ($BUILD/python/pypto: symlinks to python/pypto plus the module and the headers beside it).
# Any sanitizer report fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${VENV:-$ROOT/.venv}
BUILD=${BUILD:-$ROOT/build-sanitize}
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
PKG=$BUILD/python/pypto

mkdir -p "$PKG"
if [ ! -f "$BUILD/build.ninja" ]; then
  "$VENV/bin/cmake" -S . -B "$BUILD" -G Ninja -DCMAKE_MAKE_PROGRAM="$VENV/bin/ninja" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="$SAN" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DPython_EXECUTABLE="$VENV/bin/python" -DPYPTO_MODULE_DIR="$PKG" -DPYPTO_TORCH_GLUE=OFF ${CMAKE_ARGS:-}
fi
# The Python module first, so the Python subset's result comes before the C++ tests are built
# (their objects are most of the build's time).
"$VENV/bin/cmake" --build "$BUILD" --target _C

# The package copy: every source entry as a symlink (new files join on the next run), the
# sanitized module, and include/ where an installed package keeps its headers.
for f in "$ROOT"/python/pypto/*; do
  name=$(basename "$f")
  case "$name" in _C*.so | __pycache__) continue ;; esac
  ln -sfn "$f" "$PKG/$name"
done
ln -sfn "$ROOT/include" "$PKG/include"
find "$PKG" -maxdepth 1 -xtype l -delete # files removed from python/pypto since the last run

export PYPTO_CXXFLAGS="$SAN"
export PYPTO_CACHE_DIR="$BUILD/test-cache"
ASAN_COMMON="abort_on_error=1:allocator_may_return_null=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
rm -rf "$PYPTO_CACHE_DIR"
mkdir -p -m 700 "$PYPTO_CACHE_DIR"
unset PYPTO_INTERPRET

cpp_rc=0
py_rc=0
echo "== Python subset under ASan + UBSan (libasan preloaded)"
# libstdc++ is preloaded too: ASan resolves its __cxa_throw interceptor when it starts, and Python
# loads libstdc++ later (with a C++ extension), which leaves the interceptor without its target
# ("CHECK failed ... real___cxa_throw") at the first exception thrown (matplotlib's, for one).
LIBASAN="$(c++ -print-file-name=libasan.so) $(c++ -print-file-name=libstdc++.so.6)"
# Left out: the address-space-limit test (ASan reserves terabytes of shadow memory) and the check
# that no source path is compiled into _C (this build's debug info names every source file).
# --capture=sys: a sanitizer writes its report to fd 2, which pytest would otherwise swallow.
# CPython, NumPy and torch keep allocations at exit by design, so leak checking is off for the
# Python run (the C++ run checks leaks). See docs/testing.md.
ASAN_OPTIONS="$ASAN_COMMON:detect_leaks=0" LD_PRELOAD="$LIBASAN" PYTHONPATH="$BUILD/python" \
  "$VENV/bin/python" -m pytest -q --capture=sys -p no:cacheprovider \
  tests/python/seed tests/python/test_runtime_robustness.py tests/python/test_errors.py \
  -k "not bad_alloc and not absolute_build_path" || py_rc=$?

"$VENV/bin/cmake" --build "$BUILD"
echo "== C++ tests under ASan + UBSan"
ASAN_OPTIONS="$ASAN_COMMON:detect_leaks=1" "$BUILD/pypto_cpp_tests" || cpp_rc=$?

if [ $cpp_rc -ne 0 ] || [ $py_rc -ne 0 ]; then
  echo "make test-sanitize: FAILED (C++ exit $cpp_rc, Python exit $py_rc)"
  exit 1
fi
echo "make test-sanitize: clean"
