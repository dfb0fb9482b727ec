#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages eagercomm builds and tests with. Idempotent: when all of
# them are installed it prints one line and exits 0 without touching apt.
#
# usage: deploy/install-deps.sh [--print]
#   --print   only list the missing packages (one per line, nothing when none); exit 0
# env:
#   EAGERCOMM_DEPS_EXTRA   more packages, separated by spaces or commas
# As root it runs `apt-get update` once and installs what is missing; otherwise it prints the
# sudo command to run and exits 1.
set -euo pipefail

# Core: compiler, build system, test and benchmark frameworks.
core=(build-essential cmake ninja-build pkg-config libgtest-dev libgmock-dev libbenchmark-dev)
# Optional transports, baselines and plotting (UCX, ibverbs + rdmacm, MPI, Gloo, matplotlib for
# bench/plot_imbalance.py): the build runs without
# them, but the later backends and comparison benchmarks need them, so they are installed too.
optional=(libibverbs-dev librdmacm-dev libucx-dev ucx-utils libopenmpi-dev openmpi-bin
  libgloo-dev python3-matplotlib)
# What the multi-process test scripts use: python3, ip(8) for the network-namespace hosts.
optional+=(python3 iproute2)
# `make fuzz`: clang with libFuzzer; `make check`'s format check: clang-format.
optional+=(clang clang-format)
# The eager-SGD trainer (`make demo`): LibTorch (with a threaded BLAS, or it is slow), zlib for
# the gzipped IDX files, and the Fashion-MNIST data set.
optional+=(libtorch-dev libopenblas0-pthread zlib1g-dev dataset-fashion-mnist)
# The Python package (eagercomm._core, eagercomm._torch, EagerSGD, the torch.distributed
# backend) and its tests: the distribution's interpreter with its headers, pybind11, numpy and
# torch (the build uses /usr/bin/python3, whose site-packages these go into).
optional+=(python3-dev pybind11-dev python3-numpy python3-torch)
# `make check` compiles three builds: ccache keeps a re-run (and CI after a session) short.
optional+=(ccache)
extra=()
if [[ -n ${EAGERCOMM_DEPS_EXTRA:-} ]]; then
  read -r -a extra <<<"${EAGERCOMM_DEPS_EXTRA//,/ }"
fi

print_only=0
for arg in "$@"; do
  case $arg in
    --print) print_only=1 ;;
    -h | --help)
      sed -n '2,10s/^# \{0,1\}//p' "$0"
      exit 0
      ;;
    *)
      echo "install-deps: unknown argument '$arg' (try --help)" >&2
      exit 2
      ;;
  esac
done

if ! command -v dpkg-query >/dev/null; then
  echo "install-deps: dpkg-query not found: this script supports Debian and Ubuntu only;" \
    "install the equivalents of: ${core[*]} ${optional[*]} ${extra[*]}" >&2
  exit 1
fi

wanted=("${core[@]}" "${optional[@]}" "${extra[@]}")
missing=()
for package in "${wanted[@]}"; do
  # "install ok installed" is the only state in which the package's files are all present
  # (not half-configured, not removed with its config files kept).
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  if [[ $status != "install ok installed" ]]; then
    missing+=("$package")
  fi
done

if ((print_only)); then
  if ((${#missing[@]})); then
    printf '%s\n' "${missing[@]}"
  fi
  exit 0
fi

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#wanted[@]} packages are installed"
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: not root; missing ${missing[*]}. Install them with" \
    "(after 'sudo apt-get update' if the package lists are old):" >&2
  echo "sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"

# apt-get can succeed and still leave a package unconfigured (a failed postinst).
still_missing=()
for package in "${missing[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  [[ $status == "install ok installed" ]] || still_missing+=("$package")
done
if ((${#still_missing[@]})); then
  echo "install-deps: still not installed after apt-get: ${still_missing[*]}" >&2
  exit 1
fi
echo "install-deps: installed ${#missing[@]} packages"
