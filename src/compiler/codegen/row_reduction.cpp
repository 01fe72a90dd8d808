#include "compiler/codegen/row_reduction.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/column_reduce.h"
#include "backends/cpu/loops.h"
#include "backends/cuda_preview.h"
#include "core/shape_util.h"
#include "ops/dispatch.h"

namespace kiln::compiler::codegen {
namespace {

using ops::OpId;

// Where the ops keep their attributes (ops/defs/reduce.def, nn.def).
struct AttrPlace {
  int dims = -1;  // the list of reduced dims
  int keepdim = -1;
  int dim = -1;    // softmax's one dim
  int shape = -1;  // layer_norm's normalized_shape
};

std::optional<AttrPlace> place_of(OpId op) {
  switch (op) {
    case OpId::sum:
    case OpId::mean:
    case OpId::prod:
    case OpId::amax:
    case OpId::amin:
    case OpId::logsumexp:
      return AttrPlace{.dims = 0, .keepdim = 1};
    case OpId::var:
    case OpId::std:
      return AttrPlace{.dims = 0, .keepdim = 2};
    case OpId::norm:
      return AttrPlace{.dims = 1, .keepdim = 2};
    case OpId::softmax:
    case OpId::log_softmax:
      return AttrPlace{.dim = 0};
    case OpId::layer_norm:
      return AttrPlace{.shape = 0};
    default:
      return std::nullopt;
  }
}

// A tensor over `sizes` elements of t's memory from byte `offset` on.
Tensor view_at(const Tensor& t, int64_t offset, const Shape& sizes) {
  const auto nbytes = static_cast<size_t>(shape_numel(sizes)) * dtype_size(t.dtype());
  auto storage = std::make_shared<Storage>(static_cast<char*>(t.data_ptr()) + offset, nbytes,
                                           Device::cpu(), [keep = t.storage()](void*) {});
  return ops::make_tensor(std::move(storage), sizes, t.dtype());
}

// A tensor over caller-owned memory that outlives it.
Tensor over(void* data, const Shape& sizes, DType dtype) {
  const auto nbytes = static_cast<size_t>(shape_numel(sizes)) * dtype_size(dtype);
  auto storage = std::make_shared<Storage>(data, nbytes, Device::cpu(), [](void*) {});
  return ops::make_tensor(std::move(storage), sizes, dtype);
}

// p moved back by `bytes`, as an address: the kernel adds them again.
char* before(void* p, int64_t bytes) {
  return reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(p) - static_cast<uintptr_t>(bytes));
}

// The bytes of a block of rows: a buffer that stays in the core's cache
// between the kernel's writes and the reduction's passes.
constexpr int64_t kBlockBytes = 64 * 1024;

// Whether the reduced dims of a contiguous input of `sizes`, less those of
// size 1, are next to one another in memory: the library's reduction view
// (backends/cpu/reduce.cpp) then reads the input in place, and otherwise
// reduces the rows of the input permuted (gathered or copied).
bool adjacent_in_memory(const SymShape& sizes, const std::vector<int64_t>& dims) {
  enum { kBefore, kInside, kAfter } where = kBefore;
  for (int64_t d = 0; d < static_cast<int64_t>(sizes.size()); ++d) {
    if (sizes[static_cast<size_t>(d)] == SymInt(1)) continue;
    if (std::binary_search(dims.begin(), dims.end(), d)) {
      if (where == kAfter) return false;
      where = kInside;
    } else if (where == kInside) {
      where = kAfter;
    }
  }
  return true;
}

// t broadcast to `sizes`, its dims in the order `perm`: a view, made
// without the dispatcher (the executable runs it).
Tensor permuted(const Tensor& t, const Shape& sizes, const std::vector<int64_t>& perm) {
  const TensorImpl& from = t.impl();
  const auto shift = static_cast<int64_t>(sizes.size() - from.sizes.size());
  Shape view_sizes, view_strides;
  for (int64_t d : perm) {
    const auto td = static_cast<size_t>(d - shift);
    view_sizes.push_back(sizes[static_cast<size_t>(d)]);
    view_strides.push_back(d < shift || from.sizes[td] == 1 ? 0 : from.strides[td]);
  }
  return ops::make_strided(from.storage, std::move(view_sizes), std::move(view_strides),
                           from.offset, from.dtype);
}

}  // namespace

bool reduces_rows(ops::OpId op) { return place_of(op).has_value(); }

bool reduces_rows_on_device(ops::OpId op) {
  return op == OpId::softmax || op == OpId::log_softmax || op == OpId::layer_norm;
}

bool keeps_rank(const Graph& g, const Node& n) {
  return reduces_rows(n.op) && !n.inputs.empty() && n.outputs.size() == 1 &&
         g.value(n.outputs[0]).sizes.size() == g.value(n.inputs[0]).sizes.size();
}

std::optional<RowReduction> row_reduction_of(const Graph& g, const Node& n, std::string& why) {
  const std::string name(ops::op_schema(n.op).name);
  const std::optional<AttrPlace> place = place_of(n.op);
  if (!place || n.inputs.empty() || n.outputs.size() != 1 || n.inplace()) {
    why = detail::str_cat(name, " is not a reduction over rows");
    return std::nullopt;
  }
  const Value& x = g.value(n.inputs[0]);
  const auto rank = static_cast<int64_t>(x.sizes.size());
  // On a device, the reduction is part of the generated kernel
  // (codegen/cuda_source.h), which writes its result row by row.
  if (!x.device.is_cpu()) {
    if (!reduces_rows_on_device(n.op))
      why = detail::str_cat("generated reductions on ", x.device,
                            " are softmax, log_softmax and layer_norm, not ", name);
    else if (!contiguous_layout(g.value(n.outputs[0]).sizes, g.value(n.outputs[0]).strides))
      why = "its result's layout is not contiguous";
    else
      why = backend::cuda_preview_off(detail::str_cat("a generated ", name, " on ", x.device));
    if (!why.empty()) return std::nullopt;
  }
  if (x.dtype != kFloat32 && x.dtype != kFloat64) {
    why = detail::str_cat("its input is ", x.dtype, " (float32 and float64 only)");
    return std::nullopt;
  }
  if (rank == 0) {
    why = "its input has no dims";
    return std::nullopt;
  }
  if (!contiguous_layout(x.sizes, x.strides)) {
    why = "its input's layout is not contiguous";
    return std::nullopt;
  }
  TensorList metas;
  for (ValueId in : n.inputs)
    metas.push_back(in == kNoValue ? Tensor() : g.meta_hint(in));  // canonical attrs, casts
  ops::Inferred inferred = ops::infer(n.op, metas, n.attrs);
  for (const auto& cast : inferred.input_casts) {
    if (cast) {
      why = detail::str_cat("its input is cast to ", *cast);
      return std::nullopt;
    }
  }
  if (g.value(n.outputs[0]).dtype != x.dtype) {
    why = detail::str_cat("its result is ", g.value(n.outputs[0]).dtype, ", its input ", x.dtype);
    return std::nullopt;
  }
  RowReduction r;
  r.op = n.op;
  r.attrs = std::move(inferred.attrs);
  if (place->dim >= 0) {
    const int64_t dim = r.attrs.i(static_cast<size_t>(place->dim));
    if (dim != rank - 1) {
      why = detail::str_cat(name, " runs along dim ", dim, ", not the last of ", x.sizes);
      return std::nullopt;
    }
  } else if (place->shape >= 0) {
    r.trailing = static_cast<int64_t>(r.attrs.ints(static_cast<size_t>(place->shape)).size());
    for (size_t k = 1; k < n.inputs.size(); ++k) {
      if (n.inputs[k] == kNoValue) continue;
      const Value& p = g.value(n.inputs[k]);
      if (n.inputs[k] == n.inputs[0] || p.dtype != x.dtype ||
          !contiguous_layout(p.sizes, p.strides)) {
        why = detail::str_cat("its input ", k, " is not a contiguous ", x.dtype, " parameter");
        return std::nullopt;
      }
    }
  } else {
    const std::vector<int64_t>& dims = r.attrs.ints(static_cast<size_t>(place->dims));
    // Canonical dims are sorted and unique: a run when they have no gap,
    // trailing when it ends at the input's last dim.
    const bool run =
        !dims.empty() && dims.back() - dims.front() + 1 == static_cast<int64_t>(dims.size());
    // The library's view leaves dims of size 1 out: a run followed by kept
    // dims of size 1 alone reduces rows, as trailing dims do, and a run of
    // dims of size 1 before kept ones reduces nothing (left to the library).
    SymInt reduced = 1, inner = 1;
    for (int64_t d = run ? dims.front() : rank; d < rank; ++d)
      (d <= dims.back() ? reduced : inner) *= x.sizes[static_cast<size_t>(d)];
    if (run && reduced == 1 && inner > 1) {
      why = detail::str_cat(name, " reduces dims ", dims, " of ", x.sizes, ", all of size 1");
      return std::nullopt;
    }
    if (run && inner > 1 && backend::cpu::reduces_produced_columns(n.op, x.dtype)) {
      r.column_begin = dims.front();  // dims kept after them: columns
      r.column_end = dims.back() + 1;
      return r;
    }
    if (!run && !adjacent_in_memory(x.sizes, dims)) {
      // The library reduces x permuted: kept dims first, then `dims`.
      for (int64_t d = 0; d < rank; ++d)
        if (!std::binary_search(dims.begin(), dims.end(), d)) r.permutation.push_back(d);
      r.permutation.insert(r.permutation.end(), dims.begin(), dims.end());
      r.trailing = static_cast<int64_t>(dims.size());
      return r;
    }
    if (!run || inner > 1) {
      why = detail::str_cat(name, " reduces dims ", dims, " of ", x.sizes,
                            ", not trailing ones (nor a run of dims before the last, which sum, "
                            "mean, amax and amin reduce)");
      return std::nullopt;
    }
    r.trailing = rank - dims.front();
  }
  return r;
}

namespace {

// Byte strides of t, broadcast to `sizes`, over the groups of dims
// [0, a), [a, b) and [b, rank): each group as one dim where t's strides
// merge in it; none where they do not (a [8, 1, 512] operand over reduced
// dims [0, 1] of [8, 64, 512] is not affine in the reduced index).
std::optional<std::array<int64_t, 3>> grouped_strides(const Shape& sizes, const Tensor& t,
                                                      int64_t a, int64_t b) {
  const auto rank = static_cast<int64_t>(sizes.size());
  const int64_t shift = rank - t.dim();
  std::array<int64_t, 3> out{0, 0, 0};
  const int64_t bounds[4] = {0, a, b, rank};
  for (int group = 0; group < 3; ++group) {
    bool seen = false;
    int64_t expected = 0;
    for (int64_t d = bounds[group + 1] - 1; d >= bounds[group]; --d) {
      if (sizes[static_cast<size_t>(d)] == 1) continue;
      const int64_t td = d - shift;
      const int64_t stride =
          td < 0 || t.size(td) == 1 ? 0 : t.stride(td) * static_cast<int64_t>(t.element_size());
      if (!seen) {
        out[static_cast<size_t>(group)] = stride;
        seen = true;
      } else if (stride != expected) {
        return std::nullopt;
      }
      expected = stride * sizes[static_cast<size_t>(d)];
    }
  }
  return out;
}

// The column reduction of r: the kernel writes each tile of its result (the
// reduction's input) as the library's column reduction folds it. A tile is
// one call of the kernel over [rows, ncols] where every input is affine in
// the reduced and the kept index and the kernel draws nothing (a dropout's
// counters are positions in the whole input); else one call per row.
void run_column_reduction(PointwiseFn fn, const RowReduction& r, const Shape& sizes, DType dtype,
                          const Tensor& out, std::span<const Tensor> inputs, const uint64_t* draws,
                          void* into) {
  int64_t outer = 1, reduced = 1, inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(sizes.size()); ++d)
    (d < r.column_begin ? outer : d < r.column_end ? reduced : inner) *= sizes[d];
  const std::span<const Tensor> kernel_inputs = inputs.first(r.kernel_inputs);
  const auto element = static_cast<int64_t>(dtype_size(dtype));
  std::vector<std::array<int64_t, 3>> grouped;
  for (const Tensor& t : kernel_inputs) {
    const auto g = grouped_strides(sizes, t, r.column_begin, r.column_end);
    if (!g || draws) {
      grouped.clear();
      break;
    }
    grouped.push_back(*g);
  }
  if (grouped.size() == kernel_inputs.size()) {
    const size_t operands = kernel_inputs.size() + 1;
    backend::cpu::reduce_produced_columns(
        r.op, dtype, outer, reduced, inner, out.data_ptr(),
        [&](int64_t o, int64_t r0, int64_t r1, int64_t i0, int64_t ncols, void* tile,
            int64_t stride) {
          thread_local std::vector<char*> ptrs;  // kept: no allocation per tile
          thread_local std::vector<int64_t> strides;
          ptrs.assign(operands, nullptr);
          strides.assign(2 * operands, 0);
          ptrs[0] = static_cast<char*>(tile);
          strides[0] = stride * element;
          strides[operands] = element;
          for (size_t k = 0; k < kernel_inputs.size(); ++k) {
            const auto& [so, sr, si] = grouped[k];
            ptrs[k + 1] =
                static_cast<char*>(kernel_inputs[k].data_ptr()) + o * so + r0 * sr + i0 * si;
            strides[k + 1] = sr;
            strides[operands + k + 1] = si;
          }
          // Rows that follow one another in every operand are one run.
          bool dense = true;
          for (size_t k = 0; k < operands && dense; ++k)
            dense = strides[k] == ncols * strides[operands + k];
          const int64_t rows = r1 - r0;
          const int64_t box[2] = {dense ? rows * ncols : rows, ncols};
          int64_t index[2];
          fn(ptrs.data(), box, dense ? strides.data() + operands : strides.data(), dense ? 1 : 2, 0,
             rows * ncols, index, nullptr);
        },
        into);
    return;
  }
  const PointwiseCall call =
      pointwise_call(sizes, contiguous_strides(sizes), dtype, nullptr, kernel_inputs, draws);
  backend::cpu::reduce_produced_columns(
      r.op, dtype, outer, reduced, inner, out.data_ptr(),
      [&](int64_t o, int64_t r0, int64_t r1, int64_t i0, int64_t ncols, void* tile,
          int64_t stride) {
        PointwiseCall own = call;
        std::vector<int64_t> index(call.layout.sizes.size());
        for (int64_t row = r0; row < r1; ++row) {
          const int64_t begin = (o * reduced + row) * inner + i0;
          own.ptrs[0] =
              before(static_cast<char*>(tile) + (row - r0) * stride * element, begin * element);
          own.run(fn, begin, begin + ncols, index.data());
        }
      },
      into);
}

}  // namespace

void run_row_reduction(PointwiseFn fn, const RowReduction& r, const Shape& sizes, DType dtype,
                       const Tensor& out, std::span<const Tensor> inputs, PointwiseFn epilogue,
                       PointwiseFn row, const uint64_t* draws, const Tensor& stored) {
  if (stored.defined() && (!r.permutation.empty() || epilogue || stored.sizes() != sizes ||
                           stored.dtype() != dtype || !stored.is_contiguous()))
    throw Error(detail::str_cat("compiler: a stored input of ", stored.sizes(), " ", stored.dtype(),
                                " for a row reduction over ", sizes, " ", dtype,
                                " with no epilogue"));
  if (r.column_begin >= 0) {
    run_column_reduction(fn, r, sizes, dtype, out, inputs, draws,
                         stored.defined() ? stored.data_ptr() : nullptr);
    return;
  }
  if (!r.permutation.empty()) {
    // Rows of the input permuted: the kernel writes them, reading its
    // inputs through permuted views.
    RowReduction rows = r;
    rows.permutation.clear();
    Shape rows_sizes;
    for (int64_t d : r.permutation) rows_sizes.push_back(sizes[static_cast<size_t>(d)]);
    std::vector<Tensor> views(inputs.begin(), inputs.end());
    for (size_t k = 0; k < r.kernel_inputs; ++k)
      views[k] = permuted(inputs[k], sizes, r.permutation);
    run_row_reduction(fn, rows, rows_sizes, dtype, out, views, nullptr, nullptr, draws);
    return;
  }
  const auto rank = static_cast<int64_t>(sizes.size());
  int64_t reduced = 1, rows = 1;
  for (int64_t d = 0; d < rank; ++d) (d < rank - r.trailing ? rows : reduced) *= sizes[d];
  const std::span<const Tensor> kernel_inputs = inputs.first(r.kernel_inputs);

  // The call of the reduction on [rows, reduced] blocks: its dims the last.
  const AttrPlace place = *place_of(r.op);
  ops::Attrs attrs = r.attrs;
  if (place.dims >= 0) {
    attrs.ints(static_cast<size_t>(place.dims)) = {1};
    attrs[static_cast<size_t>(place.keepdim)] = false;
  } else if (place.dim >= 0) {
    attrs[static_cast<size_t>(place.dim)] = int64_t{1};
  } else {
    attrs.ints(static_cast<size_t>(place.shape)) = {reduced};
  }
  TensorList others;  // layer_norm's weight and bias, flat
  for (const Tensor& t : inputs.subspan(r.kernel_inputs))
    others.push_back(t.defined() ? view_at(t, 0, {reduced}) : Tensor());
  const bool keeps_rows = place.dims < 0;  // softmax, log_softmax, layer_norm
  const ops::OpSchema& schema = ops::op_schema(r.op);
  const backend::KernelFn& kernel = ops::kernel_for(r.op, Device::cpu());
  const int64_t result_row = keeps_rows ? reduced : 1;  // elements of a row's result
  const int64_t result_row_bytes = result_row * static_cast<int64_t>(dtype_size(dtype));
  // The reduction of a block of rows, written from `to` on (row0's result there).
  auto reduce_into = [&](const Tensor& block, char* to) {
    const int64_t n = block.size(0);
    TensorList args{block};
    args.insert(args.end(), others.begin(), others.end());
    Shape out_sizes{n};
    if (keeps_rows) out_sizes.push_back(reduced);
    TensorList outs{over(to, out_sizes, dtype)};
    kernel(backend::KernelCall{schema, args, outs, attrs});
  };
  auto reduce = [&](const Tensor& block, int64_t row0) {
    reduce_into(block, static_cast<char*>(out.data_ptr()) + row0 * result_row_bytes);
  };
  // With an epilogue, its inputs, the reduction's result among them as a
  // tensor of the result's sizes over a block buffer.
  std::vector<Tensor> epilogue_inputs, row_inputs;
  Shape result_sizes = sizes;
  if (epilogue) {
    epilogue_inputs.assign(inputs.begin() + static_cast<std::ptrdiff_t>(r.epilogue_inputs),
                           inputs.end());
    if (!keeps_rows)
      for (int64_t d = rank - r.trailing; d < rank; ++d) result_sizes[static_cast<size_t>(d)] = 1;
  }
  if (row)
    row_inputs.assign(inputs.begin() + static_cast<std::ptrdiff_t>(r.row_inputs),
                      inputs.begin() + static_cast<std::ptrdiff_t>(r.epilogue_inputs));

  const int64_t threads = omp_get_max_threads();
  if (rows < threads || reduced == 0 || omp_in_parallel()) {
    // The whole input, then one call: eager's split of few rows over threads.
    Tensor x = stored.defined() ? stored : ops::make_tensor(sizes, dtype, Device::cpu());
    run_pointwise(fn, x, kernel_inputs, draws);
    if (!epilogue) {
      reduce(over(x.data_ptr(), {rows, reduced}, dtype), 0);
      return;
    }
    Tensor result = ops::make_tensor(result_sizes, dtype, Device::cpu());
    reduce_into(over(x.data_ptr(), {rows, reduced}, dtype), static_cast<char*>(result.data_ptr()));
    if (row) {
      row_inputs[r.row_result_input] = result;
      result = ops::make_tensor(result_sizes, dtype, Device::cpu());
      run_pointwise(row, result, row_inputs, draws);
    }
    epilogue_inputs[r.result_input] = result;
    run_pointwise(epilogue, out, epilogue_inputs, draws);
    return;
  }
  const PointwiseCall call =
      pointwise_call(sizes, contiguous_strides(sizes), dtype, nullptr, kernel_inputs, draws);
  const int64_t row_bytes = reduced * static_cast<int64_t>(dtype_size(dtype));
  const int64_t block_rows =
      std::clamp<int64_t>(kBlockBytes / row_bytes, 1, (rows + threads - 1) / threads);
  const int64_t blocks = (rows + block_rows - 1) / block_rows;
  // The result's calls: their buffers' addresses are set per block.
  std::optional<PointwiseCall> epilogue_call, row_call;
  if (epilogue) {
    epilogue_inputs[r.result_input] = over(nullptr, result_sizes, dtype);
    epilogue_call = pointwise_call(sizes, contiguous_strides(sizes), dtype, out.data_ptr(),
                                   epilogue_inputs, draws);
  }
  if (row) {
    row_inputs[r.row_result_input] = over(nullptr, result_sizes, dtype);
    row_call = pointwise_call(result_sizes, contiguous_strides(result_sizes), dtype, nullptr,
                              row_inputs, draws);
  }
  char* const stored_data = stored.defined() ? static_cast<char*>(stored.data_ptr()) : nullptr;
  backend::cpu::parallel_for(blocks, 1, [&](int64_t b, int64_t e) {
    std::vector<double> buffer(stored_data ? 0
                                           : static_cast<size_t>(block_rows * row_bytes + 7) / 8);
    const size_t result_words = static_cast<size_t>(block_rows * result_row_bytes + 7) / 8;
    std::vector<double> results(epilogue ? result_words : 0), row_results(row ? result_words : 0);
    PointwiseCall own = call;
    std::optional<PointwiseCall> own_epilogue = epilogue_call, own_row = row_call;
    std::vector<int64_t> index(
        std::max({call.layout.sizes.size(), epilogue ? epilogue_call->layout.sizes.size() : 0,
                  row ? row_call->layout.sizes.size() : 0}));
    for (int64_t k = b; k < e; ++k) {
      const int64_t row0 = k * block_rows, row1 = std::min(rows, row0 + block_rows);
      char* const rows_at =
          stored_data ? stored_data + row0 * row_bytes : reinterpret_cast<char*>(buffer.data());
      own.ptrs[0] = before(rows_at, row0 * row_bytes);
      own.run(fn, row0 * reduced, row1 * reduced, index.data());
      const Tensor block = over(rows_at, {row1 - row0, reduced}, dtype);
      if (!epilogue) {
        reduce(block, row0);
        continue;
      }
      // The block's results stay in this thread's cache for the epilogue.
      reduce_into(block, reinterpret_cast<char*>(results.data()));
      void* result = results.data();
      if (row) {
        own_row->ptrs[0] = before(row_results.data(), row0 * result_row_bytes);
        own_row->ptrs[1 + r.row_result_input] = before(results.data(), row0 * result_row_bytes);
        own_row->run(row, row0 * result_row, row1 * result_row, index.data());
        result = row_results.data();
      }
      own_epilogue->ptrs[1 + r.result_input] = before(result, row0 * result_row_bytes);
      own_epilogue->run(epilogue, row0 * reduced, row1 * reduced, index.data());
    }
  });
}

}  // namespace kiln::compiler::codegen
