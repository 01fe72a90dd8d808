#!/usr/bin/env bash
# Writes the seed corpus of the safetensors fuzzer into DIR: valid files (every
# dtype, metadata, padded and unpadded headers, empty and 0-dim tensors) and
# malformed ones (one per class of error the parser reports).
#
#   fuzz/make_seeds.sh build-fuzz/seeds
set -euo pipefail
dir=${1:?usage: make_seeds.sh DIR}
mkdir -p "$dir"

# seed NAME JSON [BUFFER_BYTES as printf escapes]: 8-byte little-endian length, JSON, buffer.
seed() {
  local name=$1 json=$2 buffer=${3:-} n i
  n=${#json}
  {
    for i in 0 1 2 3 4 5 6 7; do printf "\\x$(printf %02x $(((n >> (8 * i)) & 255)))"; done
    printf '%s' "$json"
    printf "$buffer"
  } >"$dir/$name"
}
export LC_ALL=C  # ${#json} counts bytes

f32='"dtype":"F32","shape":[2],"data_offsets"'
seed valid_f32 "{\"w\":{$f32:[0,8]}}" '\0\0\x80\x3f\0\0\0\x40'
seed valid_padded "{\"w\":{$f32:[0,8]}}     " '\0\0\x80\x3f\0\0\0\x40'
seed valid_metadata "{\"__metadata__\":{\"format\":\"pt\",\"k\":\"\\u00e9\"},\"w\":{$f32:[0,8]}}" \
  '\0\0\x80\x3f\0\0\0\x40'
seed valid_all_dtypes '{"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},'\
'"b":{"dtype":"I64","shape":[1],"data_offsets":[8,16]},'\
'"c":{"dtype":"F32","shape":[1],"data_offsets":[16,20]},'\
'"d":{"dtype":"I32","shape":[1],"data_offsets":[20,24]},'\
'"e":{"dtype":"F16","shape":[1],"data_offsets":[24,26]},'\
'"f":{"dtype":"BF16","shape":[1],"data_offsets":[26,28]},'\
'"g":{"dtype":"I16","shape":[1],"data_offsets":[28,30]},'\
'"h":{"dtype":"I8","shape":[1],"data_offsets":[30,31]},'\
'"i":{"dtype":"U8","shape":[1],"data_offsets":[31,32]},'\
'"j":{"dtype":"BOOL","shape":[1],"data_offsets":[32,33]}}' \
  '\1\2\3\4\5\6\7\10\1\2\3\4\5\6\7\10\1\2\3\4\5\6\7\10\1\2\3\4\5\6\7\10\1'
seed valid_edge '{"s":{"dtype":"I64","shape":[],"data_offsets":[0,8]},'\
'"e":{"dtype":"F32","shape":[3,0,2],"data_offsets":[8,8]},"x":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"extra":[1,{"a":null}]}}' \
  '\x2a\0\0\0\0\0\0\0'
seed valid_empty '{}'
printf 'abc' >"$dir/bad_short"
printf '\xff\xff\xff\xff\xff\xff\xff\x7f{}' >"$dir/bad_huge_length"
seed bad_json '{"w":{"dtype":'
seed bad_utf8 $'{"w\xc3\x28":{}}'
seed bad_not_object '[{"w":1}]'
seed bad_dtype '{"w":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}}' '\0'
seed bad_shape '{"w":{"dtype":"F32","shape":[-1,2.5],"data_offsets":[0,4]}}' '\0\0\0\0'
seed bad_overflow '{"w":{"dtype":"F64","shape":[9223372036854775807,2],"data_offsets":[0,0]}}'
seed bad_offsets '{"w":{"dtype":"U8","shape":[2],"data_offsets":[2,0]}}' '\0\0'
seed bad_past_end '{"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}' '\0\0'
seed bad_overlap '{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},'\
'"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}' '\0\0\0'
seed bad_metadata '{"__metadata__":{"k":1}}'
seed bad_duplicate '{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"a":{}}'
seed bad_deep "{\"w\":{\"x\":$(printf '[%.0s' {1..40})$(printf ']%.0s' {1..40})}}"
