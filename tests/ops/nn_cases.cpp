// Consistency cases of the network ops (normalizations, embedding, dropout,
// attention, pad, interpolate, nll_loss).
#include "kiln/ops/nn.h"
#include "ops/consistency.h"
#include "ops/dispatch.h"

namespace kiln::testing {
namespace {

namespace F = kiln::nn::functional;

using Make = std::function<TensorList(DType, Generator&)>;
using Run = std::function<TensorList(TensorList&)>;

void add(CaseList& cases, std::string name, OpId op, std::vector<DType> dtypes, Make make,
         Run run) {
  cases.push_back({.name = std::move(name),
                   .ops = {op},
                   .dtypes = std::move(dtypes),
                   .make = std::move(make),
                   .run = std::move(run)});
}

Tensor indices(const Shape& shape, int64_t high, Generator& g, DType t = kInt64) {
  return randint(0, high, shape, {.dtype = t}, &g);
}

// --- normalizations -------------------------------------------------------------

struct BatchNormCase {
  std::string name;
  Shape shape;
  bool training, affine, transposed = false;
  double lo = -2, hi = 2;
};

void add_batch_norm(CaseList& cases, const BatchNormCase& s,
                    std::vector<DType> dtypes = kFloatTypes) {
  add(
      cases, "batch_norm/" + s.name, OpId::batch_norm, dtypes,
      [s](DType t, Generator& g) {
        const int64_t c = s.shape[1];
        Tensor x = s.transposed ? uniform_transposed(s.shape, t, g, s.lo, s.hi)
                                : uniform(s.shape, t, g, s.lo, s.hi);
        Tensor w = s.affine ? uniform({c}, t, g, 0.5, 2) : Tensor();
        Tensor b = s.affine ? uniform({c}, t, g) : Tensor();
        return TensorList{x, w, b, uniform({c}, kFloat32, g), uniform({c}, kFloat32, g, 0.5, 2)};
      },
      [s](TensorList& in) {
        Tensor y = F::batch_norm(in[0], in[3], in[4], in[1], in[2], s.training, 0.2, 1e-3);
        return TensorList{y, in[3], in[4]};  // the running statistics after the update
      });
}

// All three outputs of the op itself: output, mean and variance.
void add_batch_norm_outputs(CaseList& cases, bool training) {
  add(
      cases, std::string("batch_norm/op_outputs_") + (training ? "train" : "eval"),
      OpId::batch_norm, kFloatTypes,
      [](DType t, Generator& g) {
        return TensorList{uniform({6, 5, 3}, t, g), uniform({5}, t, g), uniform({5}, t, g),
                          uniform({5}, t, g), uniform({5}, t, g, 0.5, 2)};
      },
      [training](TensorList& in) {
        return ops::dispatch(OpId::batch_norm, in, {training, 1e-5});
      });
}

// batch_norm_eval: the normalization over running statistics, with or
// without a residual added and a relu after.
struct BatchNormEvalCase {
  std::string name;
  Shape shape;
  bool affine, residual, relu, transposed = false;
};

void add_batch_norm_eval(CaseList& cases, const BatchNormEvalCase& s) {
  add(
      cases, "batch_norm_eval/" + s.name, OpId::batch_norm_eval, kFloatTypes,
      [s](DType t, Generator& g) {
        const int64_t c = s.shape[1];
        const auto make = [&] {
          return s.transposed ? uniform_transposed(s.shape, t, g) : uniform(s.shape, t, g);
        };
        Tensor x = make();
        Tensor w = s.affine ? uniform({c}, t, g, 0.5, 2) : Tensor();
        Tensor b = s.affine ? uniform({c}, t, g) : Tensor();
        Tensor mean = uniform({c}, kFloat32, g), var = uniform({c}, kFloat32, g, 0.5, 2);
        return TensorList{x, w, b, mean, var, s.residual ? make() : Tensor()};
      },
      [s](TensorList& in) {
        return ops::dispatch(OpId::batch_norm_eval, in, {1e-3, s.relu});
      });
}

struct NormCase {
  std::string name;
  Shape shape;
  Shape normalized;  // layer_norm: normalized_shape; group_norm: {num_groups}
  bool affine, transposed = false;
  double lo = -2, hi = 2;
};

void add_layer_norm(CaseList& cases, const NormCase& s, std::vector<DType> dtypes = kFloatTypes,
                    bool float32_params = false) {
  add(
      cases, "layer_norm/" + s.name, OpId::layer_norm, dtypes,
      [s, float32_params](DType t, Generator& g) {
        const DType pt = float32_params ? kFloat32 : t;
        Tensor x = s.transposed ? uniform_transposed(s.shape, t, g, s.lo, s.hi)
                                : uniform(s.shape, t, g, s.lo, s.hi);
        return TensorList{x, s.affine ? uniform(s.normalized, pt, g) : Tensor(),
                          s.affine ? uniform(s.normalized, pt, g) : Tensor()};
      },
      [s](TensorList& in) { return TensorList{F::layer_norm(in[0], s.normalized, in[1], in[2])}; });
}

void add_group_norm(CaseList& cases, const NormCase& s) {
  add(
      cases, "group_norm/" + s.name, OpId::group_norm, kFloatTypes,
      [s](DType t, Generator& g) {
        const int64_t c = s.shape[1];
        Tensor x = s.transposed ? uniform_transposed(s.shape, t, g, s.lo, s.hi)
                                : uniform(s.shape, t, g, s.lo, s.hi);
        return TensorList{x, s.affine ? uniform({c}, t, g) : Tensor(),
                          s.affine ? uniform({c}, t, g) : Tensor()};
      },
      [s](TensorList& in) {
        return TensorList{F::group_norm(in[0], s.normalized[0], in[1], in[2], 1e-4)};
      });
}

const CaseRegistration kNorms([](CaseList& c) {
  add_batch_norm(c, {"train_2d", {7, 5}, true, true});
  add_batch_norm(c, {"train_odd_4d", {3, 5, 7, 11}, true, true});
  add_batch_norm(c, {"eval_3d", {4, 3, 5}, false, true});
  add_batch_norm(c, {"train_no_affine_transposed", {13, 6}, true, false, true});
  add_batch_norm(c, {"train_single_spatial", {2, 3, 1}, true, false});
  add_batch_norm(c, {"train_empty_batch", {0, 3, 4}, true, true});
  add_batch_norm(c, {"eval_empty_channels", {4, 0, 3}, false, true});
  add_batch_norm(c, {"train_shifted_values", {9, 4, 33}, true, true, false, 1000, 1001},
                 {kFloat32, kFloat64});
  add_batch_norm(c, {"train_parallel", {8, 16, 32, 33}, true, true});
  // Enough small planes that the CUDA kernel groups several per block, with
  // planes of 49 (element by element) and of 16 or 12 elements (16-byte packs).
  add_batch_norm(c, {"eval_grouped_small_planes", {40, 16, 7, 7}, false, true});
  add_batch_norm(c, {"eval_grouped_packed_planes", {66, 40, 4, 4}, false, true});
  add_batch_norm(c, {"train_grouped_planes", {48, 12, 3, 4}, true, true});
  add_batch_norm(c, {"eval_empty_batch", {0, 3, 4}, false, true});
  add_batch_norm_outputs(c, true);
  add_batch_norm_outputs(c, false);
  add_batch_norm_eval(c, {"residual_relu_4d", {4, 8, 5, 6}, true, true, true});
  add_batch_norm_eval(c, {"relu_grouped_small_planes", {40, 16, 7, 7}, true, false, true});
  add_batch_norm_eval(c, {"residual_packed_planes", {66, 40, 4, 4}, true, true, false});
  add_batch_norm_eval(c, {"plain_2d_no_affine", {7, 5}, false, false, false});
  add_batch_norm_eval(c, {"transposed_residual_relu", {9, 4}, true, true, true, true});
  add_batch_norm_eval(c, {"no_samples_residual_relu", {0, 3, 4}, true, true, true});

  add_layer_norm(c, {"row", {7, 13}, {13}, true});
  add_layer_norm(c, {"two_dims_no_affine", {3, 5, 11}, {5, 11}, false});
  add_layer_norm(c, {"whole_tensor", {4, 3}, {4, 3}, true});
  add_layer_norm(c, {"empty", {0, 5}, {5}, true});
  add_layer_norm(c, {"single_element_rows", {6, 1}, {1}, true});
  add_layer_norm(c, {"transposed", {9, 6}, {6}, true, true});
  add_layer_norm(c, {"shifted_values", {5, 257}, {257}, true, false, 500, 501},
                 {kFloat32, kFloat64});
  add_layer_norm(c, {"float32_params", {4, 3, 17}, {17}, true}, kFloatTypes, true);
  add_layer_norm(c, {"parallel_wide_rows", {64, 1031}, {1031}, true});

  add_group_norm(c, {"three_groups", {2, 6, 5}, {3}, true});
  add_group_norm(c, {"odd_4d", {3, 4, 7, 3}, {2}, false});
  add_group_norm(c, {"group_per_channel", {2, 6}, {6}, true});
  add_group_norm(c, {"one_group", {3, 5, 7}, {1}, true});
  add_group_norm(c, {"empty_batch", {0, 4, 3}, {2}, true});
  add_group_norm(c, {"transposed", {3, 8, 5}, {4}, true, true});
  add_group_norm(c, {"shifted_values", {2, 4, 9, 9}, {2}, true, false, 300, 301});
  add_group_norm(c, {"parallel", {4, 32, 16, 17}, {8}, true});
  // Values ~1000 times their spread: the normalization cancels three digits,
  // and finite differences of the output lose them again (up to 4x the
  // default bound seen).
  for (const char* name : {"batch_norm/train_shifted_values", "layer_norm/shifted_values",
                           "group_norm/shifted_values"})
    set_grad_tolerance(c, name, {.atol = 1e-7, .rtol = 1e-5});
});

// --- embedding and dropout -------------------------------------------------------

struct EmbeddingCase {
  std::string name;
  Shape weight, indices;
  DType index_dtype = kInt64;
  bool transposed = false;
  std::optional<int64_t> padding_idx = {};
};

const CaseRegistration kEmbedding([](CaseList& c) {
  const std::vector<EmbeddingCase> cases = {
      {"matrix_of_indices", {11, 7}, {3, 5}},
      {"int32_indices", {13, 4}, {17}, kInt32},
      {"scalar_index", {5, 3}, {}},
      {"no_indices", {5, 3}, {0}},
      {"empty_rows", {6, 0}, {4}},
      {"transposed_weight", {9, 6}, {2, 7}, kInt64, true},
      {"negative_padding_idx", {7, 3}, {11}, kInt32, false, -1},
      {"parallel", {100, 64}, {40, 25}},
  };
  for (const auto& s : cases) {
    add(
        c, "embedding/" + s.name, OpId::embedding, kAllTypes,
        [s](DType t, Generator& g) {
          Tensor w = s.transposed ? uniform_transposed(s.weight, t, g, -9, 9)
                                  : uniform(s.weight, t, g, -9, 9);
          return TensorList{w, indices(s.indices, s.weight[0], g, s.index_dtype)};
        },
        [s](TensorList& in) { return TensorList{F::embedding(in[1], in[0], s.padding_idx)}; });
  }
});

struct DropoutCase {
  std::string name;
  Shape shape;
  double p;
  bool transposed = false;
};

const CaseRegistration kDropout([](CaseList& c) {
  const std::vector<DropoutCase> cases = {
      {"scalar", {}, 0.5},           {"empty", {0}, 0.5},
      {"odd", {7, 13}, 0.3},         {"transposed", {9, 5}, 0.5, true},
      {"p_one_zeroes", {4, 6}, 1.0}, {"tiny_p", {33}, 1e-3},
      {"parallel", {257, 131}, 0.2},
  };
  for (const auto& s : cases) {
    add(
        c, "dropout/" + s.name, OpId::dropout, kFloatTypes,
        [s](DType t, Generator& g) {
          return TensorList{s.transposed ? uniform_transposed(s.shape, t, g)
                                         : uniform(s.shape, t, g)};
        },
        [s](TensorList& in) {
          Generator gen(99);
          gen.advance(6);  // an offset that is not a multiple of a Philox block
          return TensorList{F::dropout(in[0], s.p, true, &gen)};
        });
  }
});

// --- attention --------------------------------------------------------------------

struct AttentionCase {
  std::string name;
  Shape q, k, v;
  Shape mask = {};
  // kFloat32Mask: a float32 mask whatever the query dtype (mixed precision).
  enum { kNoMask, kBoolMask, kFloatMask, kFloat32Mask } mask_kind = kNoMask;
  bool is_causal = false;
  std::optional<double> scale = {};
  bool transposed = false;
};

const CaseRegistration kAttention([](CaseList& c) {
  using A = AttentionCase;
  const std::vector<A> cases = {
      {"heads", {2, 3, 5, 8}, {2, 3, 7, 8}, {2, 3, 7, 6}},
      {"bool_mask", {2, 3, 5, 8}, {2, 3, 7, 8}, {2, 3, 7, 6}, {5, 7}, A::kBoolMask},
      {"float32_mask", {2, 5, 4}, {2, 7, 4}, {2, 7, 3}, {5, 7}, A::kFloat32Mask},
      {"float_mask_broadcast",
       {2, 3, 5, 4},
       {2, 3, 7, 4},
       {2, 3, 7, 4},
       {2, 1, 5, 7},
       A::kFloatMask},
      // A mask broadcast over the keys only shifts whole rows, which softmax
      // ignores: its gradient is zero in exact arithmetic, rounding noise in
      // practice, so the broadcast case differentiates one over the queries.
      {"mask_broadcast_over_queries", {3, 5, 4}, {3, 6, 4}, {3, 6, 2}, {1, 6}, A::kFloatMask},
      {"mask_adds_batch_dim", {5, 4}, {6, 4}, {6, 3}, {2, 5, 6}, A::kFloatMask},
      {"causal_short_keys", {2, 7, 4}, {2, 5, 4}, {2, 5, 3}, {}, A::kNoMask, true},
      {"causal_long_keys", {2, 5, 4}, {2, 7, 4}, {2, 7, 3}, {}, A::kNoMask, true},
      {"broadcast_batch", {3, 4, 8}, {1, 6, 8}, {6, 5}},
      {"matrices", {5, 8}, {7, 8}, {7, 3}},
      {"custom_scale", {2, 5, 8}, {2, 7, 8}, {2, 7, 6}, {}, A::kNoMask, false, 0.7},
      {"no_keys", {3, 4, 8}, {3, 0, 8}, {3, 0, 5}},
      {"no_queries", {3, 0, 8}, {3, 4, 8}, {3, 4, 5}},
      {"single_key", {2, 3, 1}, {2, 1, 1}, {2, 1, 1}},
      {"transposed", {2, 6, 5}, {2, 7, 5}, {2, 7, 4}, {}, A::kNoMask, false, {}, true},
      {"parallel", {2, 4, 128, 32}, {2, 4, 96, 32}, {2, 4, 96, 64}},
      // Head dims past 64 (CUDA's wider kernel); causal over several key tiles.
      {"wide_heads", {2, 40, 96}, {2, 50, 96}, {2, 50, 80}, {1, 50}, A::kFloatMask},
      {"causal_key_tiles", {2, 70, 16}, {2, 90, 16}, {2, 90, 12}, {}, A::kNoMask, true},
  };
  for (const auto& s : cases) {
    add(
        c, "scaled_dot_product_attention/" + s.name, OpId::scaled_dot_product_attention,
        kFloatTypes,
        [s](DType t, Generator& g) {
          auto make = [&](const Shape& shape) {
            return s.transposed ? uniform_transposed(shape, t, g) : uniform(shape, t, g);
          };
          Tensor mask;
          if (s.mask_kind == A::kBoolMask) mask = random_mask(s.mask, g, 0.7);
          if (s.mask_kind == A::kFloatMask) mask = uniform(s.mask, t, g, -3, 1);
          if (s.mask_kind == A::kFloat32Mask) mask = uniform(s.mask, kFloat32, g, -3, 1);
          return TensorList{make(s.q), make(s.k), make(s.v), mask};
        },
        [s](TensorList& in) {
          return TensorList{F::scaled_dot_product_attention(
              in[0], in[1], in[2],
              {.attn_mask = in[3], .is_causal = s.is_causal, .scale = s.scale})};
        });
  }
  // A query row whose keys are all masked out is NaN on both backends.
  add(
      c, "scaled_dot_product_attention/fully_masked_row", OpId::scaled_dot_product_attention,
      kFloatTypes,
      [](DType t, Generator& g) {
        Tensor mask = random_mask({4, 6}, g, 0.8);
        mask.index({1, Slice()}).fill_(false);
        return TensorList{uniform({2, 4, 5}, t, g), uniform({2, 6, 5}, t, g),
                          uniform({2, 6, 3}, t, g), mask};
      },
      [](TensorList& in) {
        return TensorList{
            F::scaled_dot_product_attention(in[0], in[1], in[2], {.attn_mask = in[3]})};
      });
});

// --- pad and interpolate ---------------------------------------------------------

struct PadCase {
  std::string name;
  Shape shape;
  std::vector<int64_t> pad;
  std::string mode;
  bool transposed = false;
};

const CaseRegistration kPad([](CaseList& c) {
  const std::vector<PadCase> cases = {
      {"constant_last_dim", {3, 5}, {1, 2}, "constant"},
      {"constant_three_dims", {2, 3, 4, 5}, {1, 1, 2, 0, 0, 1}, "constant"},
      {"constant_crop", {3, 6, 7}, {-1, 2, 1, -2}, "constant"},
      {"constant_scalar", {}, {}, "constant"},
      {"constant_empty_rows", {0, 4}, {1, 1}, "constant"},
      {"constant_empty_dim", {3, 0}, {2, 1}, "constant"},
      {"constant_transposed", {5, 6}, {2, 1, 1, 3}, "constant", true},
      {"reflect_last_dim", {2, 3, 7}, {3, 2}, "reflect"},
      {"reflect_two_dims", {1, 2, 5, 6}, {2, 3, 4, 1}, "reflect"},
      {"reflect_crop", {2, 5}, {-2, 3}, "reflect"},
      {"replicate_two_dims", {2, 3, 4, 5}, {2, 2, 3, 1}, "replicate"},
      {"replicate_batch_dim", {2, 5}, {0, 4, 2, 0}, "replicate"},
      {"replicate_crop_transposed", {6, 7}, {-1, 3, 2, -3}, "replicate", true},
      {"parallel", {64, 3, 30, 30}, {1, 1, 1, 1}, "reflect"},
  };
  for (const auto& s : cases) {
    add(
        c, "pad/" + s.name, OpId::pad, kAllTypes,
        [s](DType t, Generator& g) {
          return TensorList{s.transposed ? uniform_transposed(s.shape, t, g, -9, 9)
                                         : uniform(s.shape, t, g, -9, 9)};
        },
        [s](TensorList& in) { return TensorList{F::pad(in[0], s.pad, s.mode, 1.5)}; });
  }
});

struct InterpolateCase {
  std::string name;
  Shape shape;
  F::InterpolateOptions options;
  bool transposed = false;
};

const CaseRegistration kInterpolate([](CaseList& c) {
  using Sizes = std::vector<int64_t>;
  using Scales = std::vector<double>;
  const std::vector<InterpolateCase> nearest = {
      {"nearest_1d_up", {2, 3, 7}, {.size = Sizes{12}}},
      {"nearest_1d_down", {2, 3, 7}, {.size = Sizes{3}}},
      {"nearest_2d", {2, 3, 5, 7}, {.size = Sizes{8, 4}}},
      {"nearest_3d", {1, 2, 3, 4, 5}, {.size = Sizes{5, 3, 7}}},
      {"nearest_scale_factor", {2, 2, 3, 5}, {.scale_factor = Scales{2.5}}},
      {"nearest_empty_batch", {0, 2, 3, 5}, {.size = Sizes{4, 4}}},
      {"nearest_transposed", {2, 3, 6, 5}, {.size = Sizes{7, 9}}, true},
      {"nearest_parallel", {4, 8, 32, 32}, {.size = Sizes{45, 50}}},
  };
  for (const auto& s : nearest) {
    add(
        c, "interpolate/" + s.name, OpId::interpolate, kAllTypes,
        [s](DType t, Generator& g) {
          return TensorList{s.transposed ? uniform_transposed(s.shape, t, g, -9, 9)
                                         : uniform(s.shape, t, g, -9, 9)};
        },
        [s](TensorList& in) { return TensorList{F::interpolate(in[0], s.options)}; });
  }
  const std::vector<InterpolateCase> bilinear = {
      {"bilinear_up", {2, 3, 5, 7}, {.size = Sizes{9, 11}, .mode = "bilinear"}},
      {"bilinear_up_align_corners",
       {2, 3, 5, 7},
       {.size = Sizes{9, 11}, .mode = "bilinear", .align_corners = true}},
      {"bilinear_down", {2, 3, 7, 11}, {.size = Sizes{3, 2}, .mode = "bilinear"}},
      {"bilinear_down_align_corners",
       {2, 3, 7, 11},
       {.size = Sizes{3, 4}, .mode = "bilinear", .align_corners = true}},
      {"bilinear_to_one_pixel",
       {1, 2, 5, 4},
       {.size = Sizes{1, 1}, .mode = "bilinear", .align_corners = true}},
      {"bilinear_from_one_pixel", {1, 2, 1, 1}, {.size = Sizes{3, 2}, .mode = "bilinear"}},
      {"bilinear_scale_factor",
       {2, 2, 6, 9},
       {.scale_factor = Scales{1.5, 0.7}, .mode = "bilinear"}},
      {"bilinear_transposed", {2, 3, 6, 5}, {.size = Sizes{7, 9}, .mode = "bilinear"}, true},
      {"bilinear_parallel", {4, 8, 32, 32}, {.size = Sizes{45, 50}, .mode = "bilinear"}},
  };
  for (const auto& s : bilinear) {
    add(
        c, "interpolate/" + s.name, OpId::interpolate, kFloatTypes,
        [s](DType t, Generator& g) {
          return TensorList{s.transposed ? uniform_transposed(s.shape, t, g)
                                         : uniform(s.shape, t, g)};
        },
        [s](TensorList& in) { return TensorList{F::interpolate(in[0], s.options)}; });
  }
});

// --- nll_loss ----------------------------------------------------------------------

struct NllCase {
  std::string name;
  Shape input;
  bool weighted = false;
  int64_t ignore_index = -100;
  bool transposed = false;
};

const CaseRegistration kNllLoss([](CaseList& c) {
  const std::vector<NllCase> cases = {
      {"batch", {7, 5}},
      {"weighted", {7, 5}, true},
      {"ignore_index", {11, 4}, true, 2},
      {"single_sample", {6}},
      {"spatial", {3, 5, 4, 2}, true, 1},
      {"empty_batch", {0, 5}},
      {"transposed", {6, 9}, true, -100, true},
      {"parallel", {40000, 3}, true, 0},
  };
  for (const auto& s : cases) {
    for (std::string reduction : {"none", "mean", "sum"}) {
      add(
          c, "nll_loss/" + s.name + "_" + reduction, OpId::nll_loss, kFloatTypes,
          [s](DType t, Generator& g) {
            Shape target = s.input;
            const int64_t classes = s.input.size() == 1 ? s.input[0] : s.input[1];
            target.erase(target.begin() + (s.input.size() == 1 ? 0 : 1));
            Tensor x = s.transposed ? uniform_transposed(s.input, t, g, -5, 0)
                                    : uniform(s.input, t, g, -5, 0);
            return TensorList{x, indices(target, classes, g),
                              s.weighted ? uniform({classes}, t, g, 0.1, 2) : Tensor()};
          },
          [s, reduction](TensorList& in) {
            return TensorList{F::nll_loss(
                in[0], in[1],
                {.weight = in[2], .ignore_index = s.ignore_index, .reduction = reduction})};
          });
    }
  }
  // The weighted mean over 40000 rows rounds the loss at ~1e-12 of its value,
  // which the difference step magnifies to ~1e-7 (8x the default bound seen).
  set_grad_tolerance(c, "nll_loss/parallel_mean", {.atol = 5e-7, .rtol = 1e-6});
  // Every target ignored: the mean is 0 / 0 = NaN, as PyTorch.
  add(
      c, "nll_loss/all_ignored_mean", OpId::nll_loss, kFloatTypes,
      [](DType t, Generator& g) {
        return TensorList{uniform({4, 3}, t, g, -5, 0), full({4}, 1, {.dtype = kInt64})};
      },
      [](TensorList& in) { return TensorList{F::nll_loss(in[0], in[1], {.ignore_index = 1})}; });
});

}  // namespace
}  // namespace kiln::testing
