// Consistency cases of the composite losses: the same composition run on the
// reference kernels and on the CPU kernels.
#include "kiln/ops/loss.h"
#include "ops/consistency.h"

namespace kiln::testing {
namespace {

namespace F = kiln::nn::functional;

const CaseRegistration kLosses([](CaseList& c) {
  c.push_back(
      {.name = "cross_entropy/indices_weights_smoothing",
       .ops = {OpId::log_softmax, OpId::nll_loss},
       .dtypes = {kFloat32, kFloat64},
       .make =
           [](DType t, Generator& g) {
             Tensor target = randint(0, 7, {33}, {}, &g);
             target.index({Slice(0, 5)}).fill_(-100);
             return TensorList{uniform({33, 7}, t, g, -4, 4), target, uniform({7}, t, g, 0.5, 2)};
           },
       .run =
           [](TensorList& in) {
             return TensorList{
                 F::cross_entropy(in[0], in[1]),
                 F::cross_entropy(in[0], in[1], {.weight = in[2], .label_smoothing = 0.1}),
                 F::cross_entropy(in[0], in[1], {.reduction = "none", .label_smoothing = 0.3})};
           }});
  c.push_back(
      {.name = "cross_entropy/spatial_and_probabilities",
       .ops = {OpId::log_softmax, OpId::nll_loss},
       .dtypes = {kFloat32, kFloat64},
       .make =
           [](DType t, Generator& g) {
             return TensorList{uniform({2, 5, 3, 4}, t, g, -3, 3), randint(0, 5, {2, 3, 4}, {}, &g),
                               softmax(uniform({6, 5}, t, g), 1)};
           },
       .run =
           [](TensorList& in) {
             return TensorList{
                 F::cross_entropy(in[0], in[1]),
                 F::cross_entropy(repeat(in[0].index({Slice(), Slice(), 0, 0}), {3, 1}), in[2])};
           }});
  c.push_back({.name = "mse_and_bce/reductions",
               .ops = {OpId::sub, OpId::square, OpId::log1p},
               .dtypes = kFloatTypes,
               .make =
                   [](DType t, Generator& g) {
                     return TensorList{uniform({9, 11}, t, g, -5, 5), uniform({9, 11}, t, g, 0, 1),
                                       uniform({11}, t, g, 0.5, 3)};
                   },
               .run =
                   [](TensorList& in) {
                     return TensorList{
                         F::mse_loss(in[0], in[1]), F::mse_loss(in[0], in[1], "none"),
                         F::binary_cross_entropy_with_logits(
                             in[0], in[1], {.pos_weight = in[2], .reduction = "sum"})};
                   }});
});

}  // namespace
}  // namespace kiln::testing
