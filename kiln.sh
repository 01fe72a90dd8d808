#!/usr/bin/env bash
# kiln's one entry point: sets up a fresh Debian 12 machine, builds, tests, benchmarks.
#
#   ./kiln.sh test              build (RelWithDebInfo, asserts on) and run every test
#   ./kiln.sh test --sanitize   the same under AddressSanitizer + UBSan
#   ./kiln.sh bench             build Release and run the benchmarks
set -euo pipefail
cd "$(dirname "$0")"

PACKAGES=(build-essential cmake ninja-build git libdnnl-dev libgtest-dev libgmock-dev
          libbenchmark-dev nlohmann-json3-dev libcli11-dev libfmt-dev libstb-dev libjs-chart.js)
JOBS=${KILN_JOBS:-$(nproc)}

usage() {
  sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

install_packages() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "kiln.sh: installing ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

configure_and_build() {
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  cmake --build "$dir" -j "$JOBS"
}

run_tests() {
  local dir=build flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_ASSERTS=ON)
  if [ "${1:-}" = "--sanitize" ]; then
    dir=build-asan
    flags+=(-DKILN_SANITIZE=ON -DKILN_BUILD_BENCH=OFF)
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
  elif [ -n "${1:-}" ]; then
    usage
  fi
  configure_and_build "$dir" "${flags[@]}"
  ctest --test-dir "$dir" -j "$JOBS" --output-on-failure --timeout 900
}

run_bench() {
  configure_and_build build-release -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=OFF
  ./build-release/bench/kiln_bench_ops "$@"
}

case "${1:-}" in
  test) shift; install_packages; run_tests "$@" ;;
  bench) shift; install_packages; run_bench "$@" ;;
  *) usage ;;
esac
