#!/usr/bin/env bash
# kiln's one entry point: sets up a fresh Debian 12 machine, builds, tests, benchmarks.
#
#   ./kiln.sh test              build (RelWithDebInfo, asserts on), run every test, then fuzz
#                               the safetensors parser for KILN_FUZZ_SECONDS (default 60)
#   ./kiln.sh test --sanitize   the same under AddressSanitizer + UBSan (without fuzzing)
#   ./kiln.sh fuzz [SECONDS]    only the fuzzing step
#   ./kiln.sh bench [ARGS]      build Release and run `kiln bench ARGS` (default: ResNet-50 eager
#                               and compiled, on the GPU when there is one), write report.html
#   ./kiln.sh microbench        build Release and run the op and autograd benchmarks and the
#                               reference models' eager latency (beside PyTorch when Python has torch)
set -euo pipefail
cd "$(dirname "$0")"

PACKAGES=(build-essential cmake ninja-build git libdnnl-dev libgtest-dev libgmock-dev
          libbenchmark-dev nlohmann-json3-dev libcli11-dev libfmt-dev libstb-dev libjs-chart.js
          clang libclang-rt-14-dev ocl-icd-opencl-dev chromium libicu-dev)
JOBS=${KILN_JOBS:-$(nproc)}

usage() {
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
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
  # Line tables only (-g1): backtraces and sanitizer reports still name files
  # and lines, and the two builds take a quarter less time than with -g. For a
  # debugger, configure a build of your own.
  local dir=build fuzz=1
  local flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_ASSERTS=ON
               "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG")
  if [ "${1:-}" = "--sanitize" ]; then
    dir=build-asan fuzz=0
    # -O1, as the sanitizers' authors advise: reports stay exact and the
    # build takes a third less time than at -O2.
    flags+=(-DKILN_SANITIZE=ON -DKILN_BUILD_BENCH=OFF
            "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG")
    # Without a GPU the CUDA kernels cannot run: the plain build already
    # compiles them, so the sanitizer build skips them (half its build time).
    if ! nvidia-smi -L >/dev/null 2>&1; then flags+=(-DKILN_CUDA=OFF); fi
    # A refused huge allocation returns null, as malloc does outside ASan,
    # so it stays kiln's out-of-memory error instead of an ASan abort.
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
  elif [ -n "${1:-}" ]; then
    usage
  elif nvidia-smi -L >/dev/null 2>&1; then
    flags+=(-DCMAKE_CUDA_ARCHITECTURES=native)
  else
    # Without a GPU the CUDA kernels are compiled, never run: one architecture
    # (Hopper's machine code, which H100 and H200 run) is enough to check them.
    flags+=(-DCMAKE_CUDA_ARCHITECTURES=90-real)
  fi
  configure_and_build "$dir" "${flags[@]}"
  ctest --test-dir "$dir" -j "$JOBS" --output-on-failure --timeout 900
  # Fuzzing once is enough: the fuzzer has its own sanitizers.
  if [ "$fuzz" = 1 ]; then
    run_fuzz "${KILN_FUZZ_SECONDS:-60}"
  fi
}

# Builds the libFuzzer target of the safetensors parser with clang (fuzz/ is a
# project of its own that compiles only the parser) and fuzzes it for $1
# seconds from the seed corpus. The corpus it grows stays in build-fuzz/corpus;
# a crash fails the run and leaves its input in build-fuzz/crash-*.
run_fuzz() {
  local seconds=${1:-60} dir=build-fuzz
  cmake -S fuzz -B "$dir" -G Ninja -DCMAKE_CXX_COMPILER=clang++ >/dev/null
  cmake --build "$dir" -j "$JOBS"
  rm -rf "$dir/seeds"
  fuzz/make_seeds.sh "$dir/seeds"
  mkdir -p "$dir/corpus"
  echo "kiln.sh: fuzzing the safetensors parser for ${seconds}s (log: $dir/fuzz.log)"
  if ! "$dir/safetensors_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
       -dict=fuzz/safetensors.dict -artifact_prefix="$dir/" -print_final_stats=1 \
       "$dir/corpus" "$dir/seeds" >"$dir/fuzz.log" 2>&1; then
    tail -n 60 "$dir/fuzz.log"
    echo "kiln.sh: the safetensors fuzzer found a failure; its input is in $dir/" >&2
    return 1
  fi
  grep -E '^(Done|stat::new_units_added)' "$dir/fuzz.log"
}

# kiln bench (docs/bench.md): the table on stdout, the HTML report in
# report.html unless the arguments name other files.
run_bench() {
  configure_and_build build-release -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=OFF
  local args=("$@")
  case " $* " in
    *" --html "*|*" --html="*) ;;
    *) args+=(--html report.html) ;;
  esac
  ./build-release/tools/kiln bench "${args[@]}"
}

run_microbench() {
  configure_and_build build-release -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=OFF
  ./build-release/bench/kiln_bench_ops "$@"
  run_models_bench
}

# The reference models' eager forward latency, kiln beside PyTorch when a
# Python with torch, torchvision and transformers is found ($KILN_PYTHON,
# default python3), else kiln alone. KILN_BENCH_THREADS sets the threads of both.
run_models_bench() {
  local python=${KILN_PYTHON:-python3} threads=${KILN_BENCH_THREADS:-$(nproc)}
  local bin=./build-release/bench/kiln_bench_models
  echo
  echo "kiln.sh: reference models, eager forward latency ($threads threads)"
  if "$python" -c 'import torch, torchvision, transformers' >/dev/null 2>&1; then
    "$python" bench/models/models_vs_torch.py --kiln-bin "$bin" --threads "$threads" --iters 10
    return
  fi
  echo "(PyTorch not found: kiln only; set KILN_PYTHON to a Python with torch, torchvision and transformers for the side-by-side table)"
  for model in resnet50 bert lstm lstm_loop; do
    for batch in 1 8; do
      OMP_NUM_THREADS=$threads "$bin" --model "$model" --batch "$batch" --threads "$threads" --iters 10
    done
  done
}

case "${1:-}" in
  test) shift; install_packages; run_tests "$@" ;;
  fuzz) shift; install_packages; run_fuzz "$@" ;;
  bench) shift; install_packages; run_bench "$@" ;;
  microbench) shift; install_packages; run_microbench "$@" ;;
  *) usage ;;
esac
