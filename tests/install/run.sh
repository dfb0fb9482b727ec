#!/usr/bin/env bash
# Installs an eagercomm build into a temporary prefix and checks that a separate project can
# use it: through find_package(eagercomm) and through pkg-config. Exits non-zero on any failure.
#
# usage: tests/install/run.sh <build-dir>
# env:   EC_INSTALL_CMAKE (cmake to use), EC_INSTALL_CXX (compiler; default: the build's),
#        EC_INSTALL_KEEP_TMP=1 keeps the temporary prefix for inspection.
set -euo pipefail

if [[ $# -ne 1 || ! -f "$1/CMakeCache.txt" ]]; then
  echo "usage: $0 <configured and built eagercomm build directory>" >&2
  exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source_root=$(cd "$here/../.." && pwd)
build=$(cd "$1" && pwd)
cmake=${EC_INSTALL_CMAKE:-cmake}
cxx=${EC_INSTALL_CXX:-$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")}
cxx=${cxx:-c++}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/eagercomm-install.XXXXXX")
cleanup() {
  if [[ ${EC_INSTALL_KEEP_TMP:-0} == 1 ]]; then
    echo "kept $tmp"
  else
    rm -rf "$tmp"
  fi
}
trap cleanup EXIT
prefix=$tmp/prefix

step() { echo "== $*"; }
fail() {
  echo "install_consumer: FAIL: $*" >&2
  exit 1
}

step "cmake --install $build --prefix $prefix"
"$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" || {
  cat "$tmp/install.log"
  fail "cmake --install failed"
}

step "checking the installed layout"
library=$(find "$prefix" -name 'libeagercomm.so' -print -quit)
[[ -n $library ]] || fail "no libeagercomm.so (development symlink) under $prefix"
libdir=$(dirname "$library")
soname=$(readelf -d "$library" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[[ -n $soname ]] || fail "$library has no SONAME"
[[ -e $libdir/$soname ]] || fail "SONAME $soname is not installed next to $library"
echo "library $library (SONAME $soname)"

include=$prefix/include/eagercomm
# The public API is installed (the headers a C++ program starts from), and nothing internal: every
# installed header compiles on its own against the prefix (so none includes a header that stayed
# in the tree) and none calls itself internal.
for header in collectives/communicator.h collectives/partial_allreduce.h collectives/dtype.h \
  runtime/status.h runtime/store.h runtime/config.h runtime/memory.h; do
  [[ -f $include/$header ]] || fail "public header $header is not installed"
done
for header in collectives/communicator_impl.h collectives/engine/comm_core.h transport/transport.h; do
  [[ ! -e $include/$header ]] || fail "internal header $header is installed"
done
cxx_for_headers=${EC_INSTALL_CXX:-$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")}
while IFS= read -r header; do
  rel=${header#"$include/"}
  if grep -qE '^// (Internal:|.*Not installed\.)' "$header"; then
    fail "installed header $rel says it is internal / not installed"
  fi
  if [[ $rel == collectives/communicator_mpi.h ]] && ! echo '#include <mpi.h>' |
    "${cxx_for_headers:-c++}" -x c++ -fsyntax-only - 2>/dev/null; then
    continue # needs <mpi.h> on the default include path
  fi
  echo "#include <eagercomm/$rel>" | "${cxx_for_headers:-c++}" -std=c++20 -fsyntax-only \
    -I"$prefix/include/eagercomm" -I"$prefix/include" -x c++ - ||
    fail "installed header $rel does not compile on its own against $prefix"
done < <(find "$include" -mindepth 2 -name '*.h' | sort)
echo "headers: $(find "$include" -name '*.h' | wc -l) installed, each self-contained"
config_header=$include/runtime/build_config.h
[[ -f $config_header ]] || fail "runtime/build_config.h is not installed"
grep -q '^#define EAGERCOMM_HAVE_UCX [01]$' "$config_header" ||
  fail "build_config.h lacks EAGERCOMM_HAVE_UCX 0/1"
[[ -f $libdir/cmake/eagercomm/eagercommConfig.cmake ]] || fail "no eagercommConfig.cmake"
[[ -f $libdir/cmake/eagercomm/eagercommConfigVersion.cmake ]] ||
  fail "no eagercommConfigVersion.cmake"
[[ -f $libdir/pkgconfig/eagercomm.pc ]] || fail "no pkgconfig/eagercomm.pc"

# Tools built in the tree must be installed and find the library through their RPATH.
for tool in eagercomm-info eagercomm-bench eagercomm-run; do
  if find "$build" -name "$tool" -type f -perm -u+x -print -quit | grep -q .; then
    [[ -x $prefix/bin/$tool ]] || fail "$tool was built but is not installed"
    if ! readelf -d "$prefix/bin/$tool" | grep -q 'NEEDED.*\[libeagercomm'; then
      echo "tool $tool (does not load libeagercomm)"
      continue
    fi
    resolved=$(env -u LD_LIBRARY_PATH ldd "$prefix/bin/$tool" |
      awk '$1 ~ /^libeagercomm/ {print $3}')
    [[ $resolved == "$prefix"/* ]] ||
      fail "$prefix/bin/$tool resolves libeagercomm to '${resolved:-nothing}', not into the prefix"
    echo "tool $tool -> $resolved"
  fi
done

run_consumer() {
  local output
  output=$(LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@") ||
    fail "$* exited with status $?"
  echo "$output"
  [[ $output == OK* ]] || fail "$* printed '$output', not OK"
}

step "CMake consumer: find_package(eagercomm) + eagercomm::eagercomm"
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
"$cmake" -S "$here" -B "$tmp/consumer" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
  -DEAGERCOMM_EXPECT_PREFIX="$prefix" >"$tmp/consumer-configure.log" || {
  cat "$tmp/consumer-configure.log"
  fail "configuring the CMake consumer failed"
}
grep 'eagercomm .* from' "$tmp/consumer-configure.log" || true
"$cmake" --build "$tmp/consumer" >"$tmp/consumer-build.log" || {
  cat "$tmp/consumer-build.log"
  fail "building the CMake consumer failed"
}
run_consumer "$tmp/consumer/eagercomm_consumer"

step "pkg-config consumer: g++ \$(pkg-config --cflags --libs eagercomm)"
export PKG_CONFIG_PATH="$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
pkg-config --exists --print-errors eagercomm || fail "pkg-config does not find eagercomm"
pc_libdir=$(pkg-config --variable=libdir eagercomm)
[[ $(cd "$pc_libdir" && pwd -P) == $(cd "$libdir" && pwd -P) ]] ||
  fail "eagercomm.pc points libdir at $pc_libdir, not $libdir"
flags=$(pkg-config --cflags --libs eagercomm)
echo "eagercomm $(pkg-config --modversion eagercomm): $flags"
# shellcheck disable=SC2086  # the flags are meant to be split into words
"$cxx" -std=c++20 "$here/main.cc" $flags -o "$tmp/consumer_pkgconfig" ||
  fail "compiling the pkg-config consumer failed"
run_consumer "$tmp/consumer_pkgconfig"

# A job of two ranks through the installed launcher, without the build tree's paths: every rank
# prints one line starting with OK (the launcher's "[rank] " prefix keeps the lines whole).
run_ranks() {
  local output oks
  local rc=0
  output=$(env -u LD_LIBRARY_PATH EAGERCOMM_TIMEOUT=120s "$prefix/bin/eagercomm-run" -n 2 \
    --timeout 300s -- "$@" 2>&1) || rc=$?
  if ((rc != 0)); then
    echo "$output"
    fail "eagercomm-run -n 2 $* exited with status $rc"
  fi
  echo "$output" | grep -E '^\[[0-9]+\] OK' || true
  oks=$(echo "$output" | grep -cE '^\[[0-9]+\] OK' || true)
  [[ $oks -eq 2 ]] || {
    echo "$output"
    fail "$*: $oks of 2 ranks printed OK"
  }
}

launcher=$prefix/bin/eagercomm-run
[[ -x $launcher ]] || fail "eagercomm-run is not installed"

step "C API consumer: cc capi_main.c \$(pkg-config ...), 2 ranks through the installed eagercomm-run"
[[ -f $include/eagercomm.h ]] || fail "the C API header eagercomm/eagercomm.h is not installed"
cc=${EC_INSTALL_CC:-$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")}
# shellcheck disable=SC2086
"${cc:-cc}" -std=c11 -Wall -pedantic-errors "$here/capi_main.c" $flags -Wl,-rpath,"$libdir" \
  -o "$tmp/consumer_capi" ||
  fail "compiling the C API consumer failed"
run_ranks "$tmp/consumer_capi"

# The Python package, when this build has it: _core, _torch and the pure-Python files must all
# be installed, and import from the prefix alone.
core_built=$(find "$build/python/eagercomm" -maxdepth 1 -name '_core*.so' -print -quit 2>/dev/null)
if [[ -n $core_built ]]; then
  python=$(sed -n 's/^Python3_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt")
  core=$(find "$prefix" -path '*/eagercomm/_core*.so' -print -quit)
  [[ -n $core ]] || fail "eagercomm/_core is built but not installed"
  site=$(dirname "$(dirname "$core")")
  for file in "$build"/python/eagercomm/*.so "$build"/python/eagercomm/*.py \
    "$build"/python/eagercomm/torch/*.py; do
    [[ -e $file ]] || continue
    rel=${file#"$build/python/"}
    [[ -f $site/$rel ]] || fail "python package file $rel is built but not installed in $site"
  done
  if compgen -G "$build/python/eagercomm/_torch*.so" >/dev/null; then
    step "Python consumer: import eagercomm, eagercomm.torch from $site; allreduce, EagerSGD"
    PYTHONPATH=$site PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1 \
      run_ranks "$python" "$here/py_main.py" "$prefix"
  else
    step "Python consumer: import eagercomm from $site (this build has no _torch)"
    out=$(cd "$tmp" && env -u LD_LIBRARY_PATH PYTHONPATH=$site "$python" -c \
      'import eagercomm; print("OK", eagercomm.__file__)') || fail "import eagercomm failed"
    echo "$out"
  fi
else
  echo "== (this build has no Python package)"
fi

echo "install_consumer: PASS"
