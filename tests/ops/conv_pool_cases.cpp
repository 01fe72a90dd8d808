// Consistency cases of convolution and pooling.
#include "kiln/ops/conv.h"
#include "ops/consistency.h"
#include "ops/dispatch.h"

namespace kiln::testing {
namespace {

struct Conv2dCase {
  std::string what;
  Shape input, weight;
  bool bias = true;
  Conv2dOptions options = {};
  Layout layout = Layout::kPlain;
};

const CaseRegistration kConv2d([](CaseList& c) {
  const std::vector<Conv2dCase> list = {
      {"padded", {1, 3, 7, 9}, {4, 3, 3, 3}, true, {.padding = {1}}},
      {"no_bias", {2, 3, 7, 5}, {5, 3, 3, 2}, false},
      {"stride_dilation",
       {2, 4, 11, 13},
       {6, 4, 3, 3},
       true,
       {.stride = {2, 3}, .padding = {2, 1}, .dilation = {2, 1}}},
      {"same_even_kernel", {2, 4, 8, 7}, {6, 4, 4, 2}, true, {.padding_mode = "same"}},
      {"valid", {1, 2, 6, 6}, {3, 2, 3, 3}, true, {.padding_mode = "valid"}},
      {"padding_beyond_kernel", {1, 2, 4, 5}, {3, 2, 2, 2}, true, {.padding = {3, 4}}},
      {"groups", {2, 6, 7, 7}, {4, 3, 3, 3}, true, {.padding = {1}, .groups = 2}},
      {"depthwise", {1, 5, 9, 9}, {5, 1, 3, 3}, true, {.stride = {2}, .padding = {1}, .groups = 5}},
      {"pointwise_strided", {2, 8, 9, 9}, {16, 8, 1, 1}, true, {.stride = {2}}},
      {"unbatched", {3, 5, 5}, {2, 3, 3, 3}, true, {.padding = {1}}},
      {"empty_batch", {0, 3, 5, 5}, {2, 3, 3, 3}, true},
      {"no_input_channels", {1, 0, 4, 4}, {3, 0, 3, 3}, true},
      {"single", {1, 1, 1, 1}, {1, 1, 1, 1}, true},
      {"transposed_input", {2, 3, 6, 8}, {4, 3, 3, 3}, true, {.padding = {1}}, Layout::kTransposed},
      {"channels_last", {2, 5, 9, 7}, {6, 5, 3, 3}, true, {.padding = {1}}, Layout::kChannelsLast},
      {"channels_last_pointwise", {1, 16, 6, 5}, {8, 16, 1, 1}, false, {}, Layout::kChannelsLast},
      {"channels_last_strided",
       {2, 8, 11, 10},
       {4, 8, 3, 3},
       true,
       {.stride = {2}, .padding = {1}},
       Layout::kChannelsLast},
      {"large", {2, 8, 37, 41}, {16, 8, 3, 3}, true, {.padding = {1}}}};
  for (const auto& s : list) {
    c.push_back(
        {.name = "conv2d/" + s.what,
         .ops = {OpId::conv2d},
         .dtypes = kFloatTypes,
         .make =
             [s](DType t, Generator& g) {
               const Layout weights =
                   s.layout == Layout::kTransposed ? Layout::kTransposed : Layout::kPlain;
               return TensorList{uniform_laid_out(s.input, s.layout, t, g),
                                 uniform_laid_out(s.weight, weights, t, g),
                                 s.bias ? uniform({s.weight[0]}, t, g) : Tensor()};
             },
         .run =
             [s](TensorList& in) { return TensorList{conv2d(in[0], in[1], in[2], s.options)}; }});
  }
});

struct Conv1dCase {
  std::string what;
  Shape input, weight;
  bool bias = true;
  Conv1dOptions options = {};
};

const CaseRegistration kConv1d([](CaseList& c) {
  const std::vector<Conv1dCase> list = {
      {"padded_strided", {2, 4, 11}, {6, 4, 3}, true, {.stride = {2}, .padding = {1}}},
      {"no_bias_dilated", {1, 3, 13}, {2, 3, 3}, false, {.dilation = {3}}},
      {"same_even_kernel", {2, 3, 10}, {4, 3, 4}, true, {.padding_mode = "same"}},
      {"groups", {1, 6, 9}, {9, 2, 3}, true, {.groups = 3}},
      {"unbatched", {3, 7}, {2, 3, 5}, true, {.padding = {2}}},
      {"large", {4, 16, 257}, {32, 16, 5}, true, {.padding = {2}}}};
  for (const auto& s : list) {
    c.push_back(
        {.name = "conv1d/" + s.what,
         .ops = {OpId::conv1d},
         .dtypes = kFloatTypes,
         .make =
             [s](DType t, Generator& g) {
               return TensorList{uniform(s.input, t, g), uniform(s.weight, t, g),
                                 s.bias ? uniform({s.weight[0]}, t, g) : Tensor()};
             },
         .run =
             [s](TensorList& in) { return TensorList{conv1d(in[0], in[1], in[2], s.options)}; }});
  }
});

void add_pool(CaseList& c, const std::string& name, OpId op, const Shape& shape, Layout layout,
              std::function<Tensor(const Tensor&)> fn) {
  // Differentiated, max_pool2d records max_pool2d_with_indices (the gradient mode's path).
  std::vector<OpId> ops = {op};
  if (op == OpId::max_pool2d) ops.push_back(OpId::max_pool2d_with_indices);
  c.push_back({.name = name,
               .ops = std::move(ops),
               .dtypes = kFloatTypes,
               .make =
                   [shape, layout](DType t, Generator& g) {
                     return TensorList{uniform_laid_out(shape, layout, t, g)};
                   },
               .run = [fn](TensorList& in) { return TensorList{fn(in[0])}; }});
}

const CaseRegistration kPools([](CaseList& c) {
  const OpId mp = OpId::max_pool2d, ap = OpId::avg_pool2d, aap = OpId::adaptive_avg_pool2d;
  add_pool(c, "max_pool2d/padded", mp, {2, 3, 9, 11}, Layout::kPlain,
           [](auto& x) { return max_pool2d(x, {3}, {2}, {1}); });
  add_pool(c, "max_pool2d/ceil_mode", mp, {1, 2, 5, 8}, Layout::kPlain,
           [](auto& x) { return max_pool2d(x, {2}, {2}, {1}, {1}, true); });
  add_pool(c, "max_pool2d/dilated", mp, {1, 2, 11, 10}, Layout::kPlain, [](auto& x) {
    return max_pool2d(x, {3, 2}, {1, 2}, {1, 0}, {2, 3});
  });
  add_pool(c, "max_pool2d/unbatched", mp, {3, 7, 7}, Layout::kPlain,
           [](auto& x) { return max_pool2d(x, {2}); });
  add_pool(c, "max_pool2d/empty_batch", mp, {0, 3, 7, 7}, Layout::kPlain,
           [](auto& x) { return max_pool2d(x, {2}); });
  add_pool(c, "max_pool2d/transposed", mp, {2, 3, 6, 9}, Layout::kTransposed,
           [](auto& x) { return max_pool2d(x, {3}, {1}, {1}); });
  add_pool(c, "max_pool2d/nan", mp, {1, 2, 6, 6}, Layout::kPlain,
           [](auto& x) { return max_pool2d(log(x), {2}); });  // log of negatives: NaN
  add_pool(c, "max_pool2d/large", mp, {4, 16, 33, 41}, Layout::kPlain,
           [](auto& x) { return max_pool2d(x, {3}, {2}, {1}, {1}, true); });

  add_pool(c, "max_pool2d/channels_last", mp, {2, 6, 9, 11}, Layout::kChannelsLast,
           [](auto& x) { return max_pool2d(x, {3}, {2}, {1}); });
  add_pool(c, "max_pool2d/channels_last_dilated", mp, {1, 5, 11, 10}, Layout::kChannelsLast,
           [](auto& x) {
             return max_pool2d(x, {3, 2}, {1, 2}, {1, 0}, {2, 3}, true);
           });
  add_pool(
      c, "max_pool2d/channels_last_nan", mp, {1, 4, 6, 6}, Layout::kChannelsLast,
      [](auto& x) {  // log of negatives: NaN, laid out channels last again
        return max_pool2d(log(x).permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2}), {2});
      });

  // The max_pool2d row itself, differentiated: its rule searches the maxima again.
  c.push_back({.name = "max_pool2d/row_without_indices",
               .ops = {mp},
               .dtypes = kFloatTypes,
               .make =
                   [](DType t, Generator& g) {
                     return TensorList{uniform_laid_out({2, 3, 7, 8}, Layout::kTransposed, t, g)};
                   },
               .run =
                   [](TensorList& in) {
                     return TensorList{
                         ops::dispatch1(OpId::max_pool2d, {in[0]},
                                        {Shape{3}, Shape{2}, Shape{1}, Shape{1}, false})};
                   }});

  add_pool(c, "avg_pool2d/include_pad", ap, {2, 3, 9, 11}, Layout::kPlain,
           [](auto& x) { return avg_pool2d(x, {3}, {2}, {1}); });
  add_pool(c, "avg_pool2d/exclude_pad", ap, {2, 3, 9, 11}, Layout::kPlain,
           [](auto& x) { return avg_pool2d(x, {3}, {2}, {1}, false, false); });
  add_pool(c, "avg_pool2d/ceil_mode", ap, {1, 2, 5, 8}, Layout::kPlain, [](auto& x) {
    return avg_pool2d(x, {2, 3}, {2}, {1}, true);
  });
  add_pool(c, "avg_pool2d/ceil_exclude_pad", ap, {1, 2, 7, 6}, Layout::kPlain,
           [](auto& x) { return avg_pool2d(x, {3}, {2}, {1}, true, false); });
  add_pool(c, "avg_pool2d/divisor", ap, {1, 3, 6, 6}, Layout::kPlain,
           [](auto& x) { return avg_pool2d(x, {2}, {}, {1}, false, true, 3); });
  add_pool(c, "avg_pool2d/unbatched", ap, {3, 7, 7}, Layout::kPlain,
           [](auto& x) { return avg_pool2d(x, {2}); });
  add_pool(c, "avg_pool2d/transposed", ap, {2, 3, 6, 9}, Layout::kTransposed,
           [](auto& x) { return avg_pool2d(x, {3}, {1}, {1}); });
  add_pool(c, "avg_pool2d/large", ap, {4, 16, 33, 41}, Layout::kPlain,
           [](auto& x) { return avg_pool2d(x, {2}); });

  add_pool(c, "adaptive_avg_pool2d/uneven", aap, {2, 3, 7, 9}, Layout::kPlain, [](auto& x) {
    return adaptive_avg_pool2d(x, {3, 4});
  });
  add_pool(c, "adaptive_avg_pool2d/global", aap, {2, 5, 7, 7}, Layout::kPlain,
           [](auto& x) { return adaptive_avg_pool2d(x, {1}); });
  add_pool(c, "adaptive_avg_pool2d/identity", aap, {1, 2, 5, 6}, Layout::kPlain, [](auto& x) {
    return adaptive_avg_pool2d(x, {5, 6});
  });
  add_pool(c, "adaptive_avg_pool2d/larger_output", aap, {1, 2, 3, 4}, Layout::kPlain, [](auto& x) {
    return adaptive_avg_pool2d(x, {5, 7});
  });
  add_pool(c, "adaptive_avg_pool2d/unbatched", aap, {3, 8, 5}, Layout::kTransposed, [](auto& x) {
    return adaptive_avg_pool2d(x, {3, 2});
  });
  add_pool(c, "adaptive_avg_pool2d/empty_output", aap, {2, 3, 4, 4}, Layout::kPlain, [](auto& x) {
    return adaptive_avg_pool2d(x, {0, 2});
  });
  add_pool(c, "adaptive_avg_pool2d/channels_last_global", aap, {2, 9, 7, 7}, Layout::kChannelsLast,
           [](auto& x) { return adaptive_avg_pool2d(x, {1}); });
  add_pool(c, "adaptive_avg_pool2d/channels_last_uneven", aap, {1, 5, 9, 11}, Layout::kChannelsLast,
           [](auto& x) {
             return adaptive_avg_pool2d(x, {4, 3});
           });
  add_pool(c, "adaptive_avg_pool2d/large", aap, {4, 64, 14, 14}, Layout::kPlain,
           [](auto& x) { return adaptive_avg_pool2d(x, {3}); });
});

}  // namespace
}  // namespace kiln::testing
