#!/usr/bin/env bash
# Installs kiln from a build tree into a temporary prefix, builds
# examples/hello_tensor against it with find_package(kiln) and runs it; where
# the build has kiln::text (the tokenizer), examples/bert_encode too, on text.
set -euo pipefail
build_dir=$1
source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
cmake -S "$source_dir/examples/hello_tensor" -B "$work/build" -G Ninja \
  -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" >/dev/null
LD_LIBRARY_PATH="$work/prefix/lib:${LD_LIBRARY_PATH:-}" "$work/build/hello_tensor"
if grep -qs 'kiln::text' "$work"/prefix/lib*/cmake/kiln/kilnTargets.cmake; then
  cmake -S "$source_dir/examples/bert_encode" -B "$work/build-bert" -G Ninja \
    -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
  cmake --build "$work/build-bert" >/dev/null
  LD_LIBRARY_PATH="$work/prefix/lib:${LD_LIBRARY_PATH:-}" "$work/build-bert/bert_encode" \
    --tokenizer "$source_dir/tests/data/tokenizers/bert_uncased.json" --text "Hello, world!"
fi
