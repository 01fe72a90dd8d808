// Consistency cases of the matrix products.
#include "kiln/ops/linalg.h"
#include "ops/consistency.h"

namespace kiln::testing {
namespace {

struct PairShapes {
  std::string what;
  Shape a, b;
  Layout la = Layout::kPlain, lb = Layout::kPlain;
};

void add_pair_cases(CaseList& cases, const std::string& op_name, OpId op,
                    const std::vector<PairShapes>& shapes,
                    std::function<Tensor(const Tensor&, const Tensor&)> fn) {
  for (const auto& s : shapes) {
    cases.push_back({.name = op_name + "/" + s.what,
                     .ops = {op},
                     .dtypes = kFloatTypes,
                     .make =
                         [s](DType t, Generator& g) {
                           return TensorList{uniform_laid_out(s.a, s.la, t, g),
                                             uniform_laid_out(s.b, s.lb, t, g)};
                         },
                     .run = [fn](TensorList& in) { return TensorList{fn(in[0], in[1])}; }});
  }
}

const CaseRegistration kMatmul([](CaseList& c) {
  using L = Layout;
  add_pair_cases(c, "matmul", OpId::matmul,
                 {{"dot", {5}, {5}},
                  {"dot_empty", {0}, {0}},
                  {"vector_matrix", {7}, {7, 3}},
                  {"matrix_vector", {4, 7}, {7}},
                  {"odd", {3, 5}, {5, 7}},
                  {"single", {1, 1}, {1, 1}},
                  {"outer_like", {13, 1}, {1, 11}},
                  {"empty_rows", {0, 5}, {5, 3}},
                  {"empty_inner", {3, 0}, {0, 4}},
                  {"batched_by_matrix", {2, 3, 5}, {5, 4}},
                  {"batched", {2, 3, 5}, {2, 5, 4}},
                  {"broadcast_batch", {2, 1, 3, 5}, {4, 5, 2}},
                  {"broadcast_size1_batch", {2, 3, 5}, {1, 5, 4}},
                  {"vector_batched", {5}, {2, 5, 3}},
                  {"batched_vector", {2, 4, 5}, {5}},
                  {"transposed", {7, 11}, {11, 5}, L::kTransposed, L::kTransposed},
                  {"strided", {6, 10}, {10, 4}, L::kStrided, L::kStrided},
                  {"batched_transposed", {3, 5, 7}, {3, 7, 4}, L::kTransposed, L::kPlain},
                  {"batched_transposed_by_matrix", {3, 5, 7}, {7, 4}, L::kTransposed, L::kStrided},
                  {"many_small", {64, 5, 6}, {64, 6, 7}},
                  {"many_small_parallel", {512, 8, 9}, {512, 9, 10}},
                  {"large", {131, 97}, {97, 257}}},
                 [](const Tensor& a, const Tensor& b) { return matmul(a, b); });
  c.push_back(
      {.name = "matmul/single_row_batches",  // [4, 1, 6] rows 18 elements apart
       .ops = {OpId::matmul},
       .dtypes = kFloatTypes,
       .make =
           [](DType t, Generator& g) {
             return TensorList{uniform({4, 3, 6}, t, g).narrow(1, 1, 1), uniform({6, 5}, t, g)};
           },
       .run = [](TensorList& in) { return TensorList{matmul(in[0], in[1])}; }});
  c.push_back({.name = "matmul/tensor_method",
               .ops = {OpId::matmul},
               .dtypes = kFloatTypes,
               .make =
                   [](DType t, Generator& g) {
                     return TensorList{uniform({4, 6}, t, g), uniform({6, 3}, t, g)};
                   },
               .run = [](TensorList& in) { return TensorList{in[0].matmul(in[1])}; }});
});

const CaseRegistration kBmm([](CaseList& c) {
  using L = Layout;
  add_pair_cases(c, "bmm", OpId::bmm,
                 {{"odd", {3, 5, 7}, {3, 7, 2}},
                  {"single", {1, 1, 1}, {1, 1, 1}},
                  {"empty_batch", {0, 3, 5}, {0, 5, 4}},
                  {"empty_inner", {2, 3, 0}, {2, 0, 4}},
                  {"transposed", {2, 7, 11}, {2, 11, 5}, L::kTransposed, L::kTransposed},
                  {"strided", {2, 6, 10}, {2, 10, 4}, L::kStrided, L::kStrided},
                  {"large", {4, 67, 53}, {4, 53, 131}}},
                 [](const Tensor& a, const Tensor& b) { return bmm(a, b); });
});

const CaseRegistration kAddmm([](CaseList& c) {
  struct AddmmCase {
    std::string what;
    Shape self;
    double beta, alpha;
    bool transposed = false;
    int64_t m = 5, k = 7, n = 3;
  };
  const std::vector<AddmmCase> list = {{"full_self", {5, 3}, 1, 1},
                                       {"row_self", {3}, 0.5, 2},
                                       {"row1_self", {1, 3}, 1, -1},
                                       {"column_self", {5, 1}, 2, 0.25},
                                       {"scalar_self", {}, 1, 1},
                                       {"beta_zero", {5, 3}, 0, 1.5},
                                       {"transposed", {5, 3}, 1, 1, true},
                                       {"empty", {0, 3}, 1, 1, false, 0},
                                       {"empty_inner", {5, 3}, 2, 1, false, 5, 0},
                                       {"large", {257}, 0.5, 1, false, 131, 97, 257}};
  for (const auto& s : list) {
    c.push_back({.name = "addmm/" + s.what,
                 .ops = {OpId::addmm},
                 .dtypes = kFloatTypes,
                 .make =
                     [s](DType t, Generator& g) {
                       Tensor m1 = s.transposed ? uniform_transposed({s.m, s.k}, t, g)
                                                : uniform({s.m, s.k}, t, g);
                       Tensor m2 = s.transposed ? uniform_transposed({s.k, s.n}, t, g)
                                                : uniform({s.k, s.n}, t, g);
                       return TensorList{uniform(s.self, t, g), m1, m2};
                     },
                 .run =
                     [s](TensorList& in) {
                       return TensorList{addmm(in[0], in[1], in[2], s.beta, s.alpha)};
                     }});
  }
});

const CaseRegistration kLinear([](CaseList& c) {
  struct LinearCase {
    std::string what;
    Shape input;
    int64_t out;
    bool bias;
    Layout layout = Layout::kPlain;
  };
  const std::vector<LinearCase> list = {{"matrix", {5, 7}, 3, true},
                                        {"no_bias", {5, 7}, 3, false},
                                        {"vector", {7}, 4, true},
                                        {"batched", {2, 3, 7}, 5, true},
                                        {"empty", {0, 7}, 3, true},
                                        {"single", {1, 1}, 1, true},
                                        {"transposed", {6, 9}, 4, true, Layout::kTransposed},
                                        {"strided", {2, 5, 8}, 3, true, Layout::kStrided},
                                        {"large", {3, 67, 129}, 257, true}};
  for (const auto& s : list) {
    c.push_back({.name = "linear/" + s.what,
                 .ops = {OpId::linear},
                 .dtypes = kFloatTypes,
                 .make =
                     [s](DType t, Generator& g) {
                       const int64_t in = s.input.back();
                       return TensorList{uniform_laid_out(s.input, s.layout, t, g),
                                         uniform_laid_out({s.out, in}, s.layout, t, g),
                                         s.bias ? uniform({s.out}, t, g) : Tensor()};
                     },
                 .run = [](TensorList& in) { return TensorList{linear(in[0], in[1], in[2])}; }});
  }
});

}  // namespace
}  // namespace kiln::testing
