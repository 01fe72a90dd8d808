// Consistency cases of the ops that backward rules need: scatter_add, the
// convolution gradients, max_pool2d_with_indices and the adjoints of the
// pools, interpolate and pad. Gradients are random tensors of the forward's
// output shape (found by running the forward on zeros).
#include <limits>

#include "kiln/ops/conv.h"
#include "ops/api/backward_ops.h"
#include "ops/consistency.h"

namespace kiln::testing {
namespace {

namespace F = nn::functional;
using MakeFn = std::function<TensorList(DType, Generator&)>;
using RunFn = std::function<TensorList(TensorList&)>;

void add(CaseList& cases, std::string name, std::vector<OpId> ops, std::vector<DType> dtypes,
         MakeFn make, RunFn run, bool check_grad = true) {
  cases.push_back({.name = std::move(name),
                   .ops = std::move(ops),
                   .dtypes = std::move(dtypes),
                   .make = std::move(make),
                   .run = std::move(run),
                   .check_grad = check_grad});
}

Tensor indices(int64_t high, const Shape& shape, Generator& g) {
  return randint(0, high, shape, {.dtype = kInt64}, &g);
}

Tensor gradient(const Shape& shape, bool transposed, DType t, Generator& g) {
  return transposed ? uniform_transposed(shape, t, g) : uniform(shape, t, g);
}

// --- scatter_add -------------------------------------------------------------------

const CaseRegistration kScatterAdd([](CaseList& c) {
  // Random indices repeat, so most output elements sum several values.
  add(
      c, "scatter_add/every_dim_with_duplicates", {OpId::scatter_add}, kNumericTypes,
      [](DType t, Generator& g) {
        return TensorList{uniform({4, 5, 6}, t, g), indices(4, {7, 3, 2}, g),
                          uniform({7, 5, 6}, t, g), indices(5, {2, 9, 6}, g),
                          uniform({3, 9, 6}, t, g), indices(6, {3, 4, 8}, g),
                          uniform({4, 5, 9}, t, g)};
      },
      [](TensorList& in) {
        return TensorList{scatter_add(in[0], 0, in[1], in[2]), scatter_add(in[0], 1, in[3], in[4]),
                          scatter_add(in[0], 2, in[5], in[6]),
                          scatter_add(in[0], -1, in[5], in[6])};
      });
  add(
      c, "scatter_add/transposed_empty_and_0dim", {OpId::scatter_add}, kNumericTypes,
      [](DType t, Generator& g) {
        return TensorList{uniform_transposed({6, 9}, t, g),
                          indices(6, {5, 9}, g),
                          uniform_transposed({7, 9}, t, g),
                          uniform({}, t, g),
                          zeros({}, {.dtype = kInt64}),
                          uniform({}, t, g),
                          indices(6, {0, 9}, g)};
      },
      [](TensorList& in) {
        return TensorList{scatter_add(in[0], 0, in[1], in[2]),
                          scatter_add(in[0], 1, in[1].t().slice(0, 0, 6), in[2].t()),
                          scatter_add(in[3], 0, in[4], in[5]), scatter_add(in[0], 0, in[6], in[2])};
      });
  add(
      c, "scatter_add_/in_place", {OpId::scatter_add}, kNumericTypes,
      [](DType t, Generator& g) {
        return TensorList{uniform({6, 9}, t, g), indices(9, {6, 4}, g), uniform({6, 4}, t, g)};
      },
      [](TensorList& in) {
        Tensor row = in[0].select(0, 2);
        scatter_add_(row, 0, in[1].select(0, 0), in[2].select(0, 0));
        Tensor column = in[0].select(1, 3);
        scatter_add_(column, 0, remainder(in[1].select(1, 1), 6), in[2].select(1, 1));
        scatter_add_(in[0], 1, in[1], in[2]);
        return TensorList{in[0]};
      });
  add(
      c, "scatter_add/large", {OpId::scatter_add}, kNumericTypes,
      [](DType t, Generator& g) {
        return TensorList{uniform({300, 200}, t, g),          indices(200, {300, 150}, g),
                          uniform({300, 150}, t, g),          indices(300, {250, 200}, g),
                          uniform({8, 60, 100}, t, g),        indices(60, {8, 70, 99}, g),
                          uniform_strided({8, 70, 100}, t, g)};
      },
      [](TensorList& in) {
        return TensorList{scatter_add(in[0], 1, in[1], in[2]), scatter_add(in[0], 0, in[3], in[0]),
                          scatter_add(in[4], 1, in[5], in[6])};
      });
});

// --- convolution gradients -----------------------------------------------------------

// Attributes as the op rows take them: padding holds begins then ends.
struct ConvCase {
  std::string what;
  Shape input, weight;
  Shape stride, padding, dilation;
  int64_t groups = 1;
  bool transposed = false;  // a non-contiguous grad_output (and input / weight)
};

// conv's output shape for the case, by the formula of its shape rule.
Shape conv_output(const ConvCase& s) {
  const size_t dims = s.weight.size() - 2;
  Shape out(s.input.begin(), s.input.end() - static_cast<int64_t>(dims) - 1);
  out.push_back(s.weight[0]);
  for (size_t d = 0; d < dims; ++d) {
    const int64_t in = s.input[s.input.size() - dims + d];
    const int64_t span = s.dilation[d] * (s.weight[2 + d] - 1) + 1;
    out.push_back((in + s.padding[d] + s.padding[dims + d] - span) / s.stride[d] + 1);
  }
  return out;
}

const CaseRegistration kConvBackward([](CaseList& c) {
  const std::vector<ConvCase> list = {
      {"2d_padded", {1, 3, 7, 9}, {4, 3, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}},
      {"2d_stride_dilation", {2, 4, 11, 13}, {6, 4, 3, 3}, {2, 3}, {2, 1, 2, 1}, {2, 1}},
      {"2d_asymmetric_padding", {2, 4, 8, 7}, {6, 4, 4, 2}, {1, 1}, {1, 0, 2, 1}, {1, 1}},
      {"2d_stride_leaves_a_tail", {1, 2, 8, 8}, {3, 2, 3, 3}, {2, 2}, {0, 0, 0, 0}, {1, 1}},
      {"2d_groups", {2, 6, 7, 7}, {4, 3, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 2},
      {"2d_depthwise", {1, 5, 9, 9}, {5, 1, 3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 5},
      {"2d_unbatched", {3, 5, 5}, {2, 3, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}},
      {"2d_empty_batch", {0, 3, 5, 5}, {2, 3, 3, 3}, {1, 1}, {0, 0, 0, 0}, {1, 1}},
      {"2d_single", {1, 1, 1, 1}, {1, 1, 1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}},
      {"2d_transposed", {2, 3, 6, 8}, {4, 3, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1, true},
      {"2d_large", {2, 8, 37, 41}, {16, 8, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}},
      {"1d_padded_strided", {2, 4, 11}, {6, 4, 3}, {2}, {1, 1}, {1}},
      {"1d_dilated_groups", {1, 6, 13}, {9, 2, 3}, {1}, {2, 0}, {3}, 3},
      {"1d_unbatched", {3, 7}, {2, 3, 5}, {1}, {2, 2}, {1}},
      {"1d_large", {4, 16, 257}, {32, 16, 5}, {1}, {2, 2}, {1}},
  };
  for (const auto& s : list) {
    add(
        c, "conv_backward_input/" + s.what, {OpId::conv_backward_input}, kFloatTypes,
        [s](DType t, Generator& g) {
          return TensorList{gradient(conv_output(s), s.transposed, t, g),
                            gradient(s.weight, s.transposed, t, g)};
        },
        [s](TensorList& in) {
          return TensorList{ops::conv_backward_input(in[0], in[1], s.input, s.stride, s.padding,
                                                     s.dilation, s.groups)};
        });
    add(
        c, "conv_backward_weight/" + s.what, {OpId::conv_backward_weight}, kFloatTypes,
        [s](DType t, Generator& g) {
          return TensorList{gradient(conv_output(s), s.transposed, t, g),
                            gradient(s.input, s.transposed, t, g)};
        },
        [s](TensorList& in) {
          return TensorList{ops::conv_backward_weight(in[0], in[1], s.weight, s.stride, s.padding,
                                                      s.dilation, s.groups)};
        });
  }
});

// --- pools -------------------------------------------------------------------------

struct PoolCase {
  std::string what;
  Shape input;
  Shape kernel, stride, padding;
  bool ceil_mode = false;
  bool count_include_pad = true;
  std::optional<int64_t> divisor = std::nullopt;
  Shape dilation = {1};
  bool transposed = false;
};

const std::vector<PoolCase> kPoolCases = {
    {"square", {2, 3, 8, 8}, {2}, {}, {0}},
    {"odd_padded_strided", {2, 3, 11, 13}, {3, 2}, {2, 3}, {1, 1}},
    {"ceil_mode", {1, 2, 10, 7}, {3}, {2}, {1}, true},
    {"ceil_mode_no_pad_count", {1, 2, 10, 7}, {3}, {2}, {1}, true, false},
    {"divisor_override", {2, 2, 9, 9}, {3}, {2}, {1}, false, true, 5},
    {"dilated", {1, 3, 12, 11}, {3, 2}, {1, 2}, {1, 0}, false, true, {}, {2, 3}},
    {"unbatched", {3, 7, 6}, {3}, {1}, {1}},
    {"size_one", {1, 1, 1, 1}, {1}, {}, {0}},
    {"transposed", {2, 3, 9, 8}, {3}, {2}, {1}, false, true, {}, {1}, true},
    {"large", {4, 16, 41, 43}, {3}, {2}, {1}},
};

const CaseRegistration kPools([](CaseList& c) {
  // NaNs sprinkled over a large input, some windows holding two: NaN out, at
  // the index of the window's first NaN, on every backend.
  add(
      c, "max_pool2d_with_indices/sprinkled_nan", {OpId::max_pool2d_with_indices}, kFloatTypes,
      [](DType t, Generator& g) {
        const Tensor x = gradient({4, 16, 41, 43}, false, t, g);
        return TensorList{masked_fill(x, random_mask(x.sizes(), g, 0.03),
                                      std::numeric_limits<double>::quiet_NaN())};
      },
      [](TensorList& in) {
        auto [values, idx] = max_pool2d_with_indices(in[0], {3}, {2}, {1}, {1}, true);
        return TensorList{values, idx, max_pool2d(in[0], {2, 3})};
      },
      /*check_grad=*/false);  // no derivative to difference at NaN
  for (const auto& s : kPoolCases) {
    add(
        c, "max_pool2d_with_indices/" + s.what, {OpId::max_pool2d_with_indices}, kFloatTypes,
        [s](DType t, Generator& g) {
          // Values on a coarse grid, so that windows hold ties.
          return TensorList{floor(gradient(s.input, s.transposed, t, g) * 2.0)};
        },
        [s](TensorList& in) {
          auto [values, idx] = max_pool2d_with_indices(in[0], s.kernel, s.stride, s.padding,
                                                       s.dilation, s.ceil_mode);
          return TensorList{values, idx};
        },
        // Ties have no derivative; max_pool2d's cases check this op's gradient.
        /*check_grad=*/false);
    if (s.dilation != Shape{1}) continue;
    add(
        c, "avg_pool2d_backward/" + s.what, {OpId::avg_pool2d_backward}, kFloatTypes,
        [s](DType t, Generator& g) {
          const Tensor y = avg_pool2d(zeros(s.input, {.dtype = t}), s.kernel, s.stride, s.padding,
                                      s.ceil_mode, s.count_include_pad, s.divisor);
          return TensorList{gradient(y.sizes(), s.transposed, t, g)};
        },
        [s](TensorList& in) {
          return TensorList{ops::avg_pool2d_backward(in[0], s.input, s.kernel, s.stride, s.padding,
                                                     s.ceil_mode, s.count_include_pad, s.divisor)};
        });
  }
});

struct AdaptiveCase {
  std::string what;
  Shape input, output;
  bool transposed = false;
};

const CaseRegistration kAdaptive([](CaseList& c) {
  const std::vector<AdaptiveCase> list = {
      {"global", {2, 3, 7, 5}, {1, 1}},       {"overlapping", {2, 3, 10, 7}, {4, 3}},
      {"upsampling", {1, 2, 3, 2}, {5, 7}},   {"unbatched", {3, 9, 8}, {2, 5}},
      {"empty_output", {2, 3, 4, 4}, {0, 2}}, {"transposed", {2, 3, 6, 7}, {3, 4}, true},
      {"large", {8, 64, 14, 14}, {3, 3}},
  };
  for (const auto& s : list) {
    add(
        c, "adaptive_avg_pool2d_backward/" + s.what, {OpId::adaptive_avg_pool2d_backward},
        kFloatTypes,
        [s](DType t, Generator& g) {
          Shape out(s.input.begin(), s.input.end() - 2);
          out.insert(out.end(), s.output.begin(), s.output.end());
          return TensorList{gradient(out, s.transposed, t, g)};
        },
        [s](TensorList& in) {
          return TensorList{ops::adaptive_avg_pool2d_backward(in[0], s.input)};
        });
  }
});

// --- interpolate and pad --------------------------------------------------------------

struct InterpolateCase {
  std::string what;
  Shape input, output;
  std::string mode;
  bool align_corners = false;
  bool transposed = false;
};

const CaseRegistration kInterpolateBackward([](CaseList& c) {
  const std::vector<InterpolateCase> list = {
      {"nearest_1d_up", {2, 3, 7}, {2, 3, 12}, "nearest"},
      {"nearest_1d_down", {2, 3, 7}, {2, 3, 3}, "nearest"},
      {"nearest_2d", {2, 3, 5, 7}, {2, 3, 8, 4}, "nearest"},
      {"nearest_3d", {1, 2, 3, 4, 5}, {1, 2, 5, 3, 7}, "nearest"},
      {"nearest_transposed", {2, 3, 6, 5}, {2, 3, 7, 9}, "nearest", false, true},
      {"nearest_large", {4, 8, 32, 32}, {4, 8, 45, 50}, "nearest"},
      {"bilinear_up", {2, 3, 5, 7}, {2, 3, 9, 11}, "bilinear"},
      {"bilinear_up_align_corners", {2, 3, 5, 7}, {2, 3, 9, 11}, "bilinear", true},
      {"bilinear_down", {2, 3, 7, 11}, {2, 3, 3, 2}, "bilinear"},
      {"bilinear_down_align_corners", {2, 3, 7, 11}, {2, 3, 3, 4}, "bilinear", true},
      {"bilinear_to_one_pixel", {1, 2, 5, 4}, {1, 2, 1, 1}, "bilinear", true},
      {"bilinear_from_one_pixel", {1, 2, 1, 1}, {1, 2, 3, 2}, "bilinear"},
      {"bilinear_empty_batch", {0, 2, 3, 3}, {0, 2, 5, 5}, "bilinear"},
      {"bilinear_transposed", {2, 3, 6, 5}, {2, 3, 7, 9}, "bilinear", false, true},
      {"bilinear_large", {4, 8, 32, 32}, {4, 8, 45, 50}, "bilinear"},
  };
  for (const auto& s : list) {
    add(
        c, "interpolate_backward/" + s.what, {OpId::interpolate_backward}, kFloatTypes,
        [s](DType t, Generator& g) { return TensorList{gradient(s.output, s.transposed, t, g)}; },
        [s](TensorList& in) {
          return TensorList{ops::interpolate_backward(in[0], s.input, s.mode, s.align_corners)};
        });
  }
});

struct PadCase {
  std::string what;
  Shape input;
  Shape pad;
  std::string mode;
  bool transposed = false;
};

const CaseRegistration kPadBackward([](CaseList& c) {
  const std::vector<PadCase> list = {
      {"constant_crop", {3, 6, 7}, {-1, 2, 1, -2}, "constant"},
      {"constant_scalar", {}, {}, "constant"},
      {"reflect_last_dim", {2, 3, 7}, {3, 2}, "reflect"},
      {"reflect_two_dims", {1, 2, 5, 6}, {2, 3, 4, 1}, "reflect"},
      {"reflect_crop", {2, 5}, {-2, 3}, "reflect"},
      {"reflect_every_dim", {3, 4}, {2, 3, 1, 2}, "reflect"},
      {"replicate_two_dims", {2, 3, 4, 5}, {2, 2, 3, 1}, "replicate"},
      {"replicate_wide", {2, 2}, {5, 6, 4, 3}, "replicate"},
      {"replicate_crop_transposed", {6, 7}, {-1, 3, 2, -3}, "replicate", true},
      {"replicate_empty_batch", {0, 3, 4}, {1, 2}, "replicate"},
      {"reflect_large", {64, 3, 30, 30}, {1, 1, 1, 1}, "reflect"},
  };
  for (const auto& s : list) {
    add(
        c, "pad_backward/" + s.what, {OpId::pad_backward}, kFloatTypes,
        [s](DType t, Generator& g) {
          const Tensor y = F::pad(zeros(s.input, {.dtype = t}), s.pad, s.mode);
          return TensorList{gradient(y.sizes(), s.transposed, t, g)};
        },
        [s](TensorList& in) {
          return TensorList{ops::pad_backward(in[0], s.input, s.pad, s.mode)};
        });
  }
});

}  // namespace
}  // namespace kiln::testing
