// Consistency cases of the reductions, cumsum and softmax.
#include <limits>
#include <optional>

#include "kiln/ops/reduce.h"
#include "ops/consistency.h"

namespace kiln::testing {
namespace {

struct ReduceShape {
  Shape shape;
  Dims dims;
  bool keepdim = false;
  Layout layout = Layout::kPlain;
};

// Each layout path of the engine: rows (inner), columns (outer), a middle dim,
// non-adjacent dims (copied), strided views, parallel rows and columns, and a
// single long row or column split across threads.
const std::vector<ReduceShape> kReduceShapes = {
    {{}, {}},
    {{1}, {0}, true},
    {{7, 13}, {1}},
    {{7, 13}, {0}, true},
    {{3, 5, 11}, {1}},
    {{3, 5, 11}, {0, 2}, true},
    {{3, 5, 11}, {}},
    {{3, 5, 11}, {-1, -2}},
    {{9, 13}, {1}, false, Layout::kTransposed},
    {{9, 13}, {0}, false, Layout::kTransposed},
    {{4, 9, 13}, {0, 2}, false, Layout::kTransposed},
    {{6, 10}, {1}, true, Layout::kStrided},
    {{6, 10}, {}, false, Layout::kStrided},
    {{4, 0, 3}, {0}},
    {{0, 5}, {1}},
    {{300, 257}, {1}},
    {{300, 257}, {0}},
    {{1, 70001}, {1}},
    {{40000, 3}, {0}},
};

// Reductions over zero elements: only for ops with an identity.
const std::vector<ReduceShape> kEmptyReduceShapes = {
    {{0}, {}},
    {{4, 0, 3}, {1}},
    {{4, 0, 3}, {1}, true},
};

using ReduceFn = std::function<TensorList(const Tensor&, const Dims&, bool)>;

void add_reduce(CaseList& cases, const std::string& name, std::vector<OpId> ops, ReduceFn fn,
                std::vector<DType> dtypes, bool has_identity, double lo = -2, double hi = 2) {
  std::vector<ReduceShape> shapes = kReduceShapes;
  if (has_identity)
    shapes.insert(shapes.end(), kEmptyReduceShapes.begin(), kEmptyReduceShapes.end());
  for (size_t i = 0; i < shapes.size(); ++i) {
    const ReduceShape s = shapes[i];
    cases.push_back({.name = name + "/shape" + std::to_string(i),
                     .ops = ops,
                     .dtypes = dtypes,
                     .make =
                         [s, lo, hi](DType t, Generator& g) {
                           return TensorList{uniform_laid_out(s.shape, s.layout, t, g, lo, hi)};
                         },
                     .run = [s, fn](TensorList& in) { return fn(in[0], s.dims, s.keepdim); }});
  }
}

struct DimShape {
  Shape shape;
  std::optional<int64_t> dim;
  bool keepdim = false;
  Layout layout = Layout::kPlain;
};

// For the ops over one dim (an absent dim flattens, for argmax and argmin).
const std::vector<DimShape> kDimShapes = {
    {{}, 0},
    {{1}, 0, true},
    {{7, 13}, 1},
    {{7, 13}, 0, true},
    {{3, 5, 11}, 1},
    {{3, 5, 11}, -1, true},
    {{9, 13}, 1, false, Layout::kTransposed},
    {{9, 13}, 0, false, Layout::kTransposed},
    {{6, 10}, 1, false, Layout::kStrided},
    {{4, 0, 3}, 0},
    {{300, 257}, 1},
    {{300, 257}, 0},
    {{1, 70001}, 1},
    {{40000, 3}, 0},
};
const std::vector<DimShape> kFlattenShapes = {
    {{}, std::nullopt},
    {{3, 5, 11}, std::nullopt},
    {{3, 5, 11}, std::nullopt, true},
    {{9, 13}, std::nullopt, false, Layout::kTransposed},
    {{70001}, std::nullopt},
};

using DimFn = std::function<TensorList(const Tensor&, std::optional<int64_t>, bool)>;

void add_dim_cases(CaseList& cases, const std::string& name, OpId op, DimFn fn,
                   std::vector<DType> dtypes, const std::vector<DimShape>& shapes, double lo = -2,
                   double hi = 2) {
  for (size_t i = 0; i < shapes.size(); ++i) {
    const DimShape s = shapes[i];
    cases.push_back({.name = name + "/shape" + std::to_string(i),
                     .ops = {op},
                     .dtypes = dtypes,
                     .make =
                         [s, lo, hi](DType t, Generator& g) {
                           return TensorList{uniform_laid_out(s.shape, s.layout, t, g, lo, hi)};
                         },
                     .run = [s, fn](TensorList& in) { return fn(in[0], s.dim, s.keepdim); }});
  }
}

// Along-a-dim ops (cumsum, softmax) also see empty dims.
std::vector<DimShape> line_shapes() {
  std::vector<DimShape> shapes;
  for (const auto& s : kDimShapes) shapes.push_back(s);
  shapes.push_back({{0}, 0});
  shapes.push_back({{4, 0, 3}, 2});
  shapes.push_back({{64, 1031}, 1});
  return shapes;
}

const CaseRegistration kSums([](CaseList& c) {
  add_reduce(
      c, "sum", {OpId::sum}, [](auto& x, auto& d, bool k) { return TensorList{sum(x, d, k)}; },
      kAllTypes, true);
  add_reduce(
      c, "prod", {OpId::prod}, [](auto& x, auto& d, bool k) { return TensorList{prod(x, d, k)}; },
      kAllTypes, true, 0.9, 1.1);
  add_reduce(
      c, "prod_int", {OpId::prod},
      [](auto& x, auto& d, bool k) { return TensorList{prod(x, d, k)}; }, kIntTypes, true);
  add_reduce(
      c, "mean", {OpId::mean}, [](auto& x, auto& d, bool k) { return TensorList{mean(x, d, k)}; },
      kFloatTypes, true);
  add_reduce(
      c, "var", {OpId::var, OpId::std},
      [](auto& x, auto& d, bool k) {
        return TensorList{var(x, d, 1, k), var(x, d, 0, k), stddev(x, d, 1, k),
                          stddev(x, d, 2.5, k)};
      },
      kFloatTypes, true);
  for (double p : {2.0, 1.0, 0.0, 3.0, 0.5, -1.5}) {
    add_reduce(
        c, "norm_p" + std::to_string(static_cast<int>(p * 10)), {OpId::norm},
        [p](auto& x, auto& d, bool k) { return TensorList{norm(x, p, d, k)}; }, kFloatTypes, true);
  }
  const double inf = std::numeric_limits<double>::infinity();
  add_reduce(
      c, "norm_inf", {OpId::norm},
      [inf](auto& x, auto& d, bool k) {
        return TensorList{norm(x, inf, d, k), norm(x, -inf, d, k)};
      },
      kFloatTypes, false);
  add_reduce(
      c, "logsumexp", {OpId::logsumexp},
      [](auto& x, auto& d, bool k) { return TensorList{logsumexp(x, d, k)}; }, kFloatTypes, true,
      -30, 30);
  add_reduce(
      c, "logsumexp_int", {OpId::logsumexp},
      [](auto& x, auto& d, bool k) { return TensorList{logsumexp(x, d, k)}; }, {kInt32, kBool},
      true, -9, 9);
});

const CaseRegistration kExtremes([](CaseList& c) {
  add_reduce(
      c, "amax", {OpId::amax, OpId::amin},
      [](auto& x, auto& d, bool k) {
        return TensorList{amax(x, d, k), amin(x, d, k)};
      },
      kAllTypes, false);
  add_reduce(
      c, "any", {OpId::any, OpId::all},
      [](auto& x, auto& d, bool k) {
        return TensorList{any(x, d, k), all(x, d, k)};
      },
      kAllTypes, true, -0.5, 1.5);
  add_dim_cases(
      c, "max_dim", OpId::max_dim,
      [](auto& x, auto d, bool k) {
        auto [v, i] = max(x, *d, k);
        return TensorList{v, i};
      },
      kAllTypes, kDimShapes);
  add_dim_cases(
      c, "min_dim", OpId::min_dim,
      [](auto& x, auto d, bool k) {
        auto [v, i] = min(x, *d, k);
        return TensorList{v, i};
      },
      kAllTypes, kDimShapes);
  std::vector<DimShape> arg_shapes = kDimShapes;
  arg_shapes.insert(arg_shapes.end(), kFlattenShapes.begin(), kFlattenShapes.end());
  add_dim_cases(
      c, "argmax", OpId::argmax,
      [](auto& x, auto d, bool k) { return TensorList{argmax(x, d, k)}; }, kAllTypes, arg_shapes);
  add_dim_cases(
      c, "argmin", OpId::argmin,
      [](auto& x, auto d, bool k) { return TensorList{argmin(x, d, k)}; }, kAllTypes, arg_shapes);
});

const CaseRegistration kLines([](CaseList& c) {
  add_dim_cases(
      c, "cumsum", OpId::cumsum, [](auto& x, auto d, bool) { return TensorList{cumsum(x, *d)}; },
      kAllTypes, line_shapes());
  add_dim_cases(
      c, "softmax", OpId::softmax, [](auto& x, auto d, bool) { return TensorList{softmax(x, *d)}; },
      kFloatTypes, line_shapes(), -10, 10);
  add_dim_cases(
      c, "log_softmax", OpId::log_softmax,
      [](auto& x, auto d, bool) { return TensorList{log_softmax(x, *d)}; }, kFloatTypes,
      line_shapes(), -10, 10);
  // Large values along every dim, row and column paths alike: exp of them
  // overflows (or, negated, underflows) every float type, so a kernel that
  // skips subtracting the maximum gives inf or NaN here.
  for (const double lo : {200.0, -260.0}) {
    const std::string sign = lo > 0 ? "large" : "large_negative";
    add_dim_cases(
        c, "softmax_" + sign, OpId::softmax,
        [](auto& x, auto d, bool) { return TensorList{softmax(x, *d)}; }, kFloatTypes,
        line_shapes(), lo, lo + 60);
    add_dim_cases(
        c, "log_softmax_" + sign, OpId::log_softmax,
        [](auto& x, auto d, bool) { return TensorList{log_softmax(x, *d)}; }, kFloatTypes,
        line_shapes(), lo, lo + 60);
  }
});

// sort and topk: the line shapes but the two longest lines (the reference
// counts, in quadratic time), with lines of many ties (integer dtypes draw from a few
// values) and a long one.
std::vector<DimShape> order_shapes() {
  std::vector<DimShape> shapes;
  for (const auto& s : line_shapes())
    if (s.shape != Shape{1, 70001} && s.shape != Shape{40000, 3}) shapes.push_back(s);
  shapes.push_back({{3, 4099}, 1});
  return shapes;
}

// topk's k for a case: up to 5, and all of a short line.
int64_t topk_k(const Tensor& x, int64_t dim) {
  return x.dim() == 0 ? 1 : std::min<int64_t>(x.size(dim), 5);
}

const CaseRegistration kOrders([](CaseList& c) {
  add_dim_cases(
      c, "sort", OpId::sort,
      [](auto& x, auto d, bool) {
        auto [v, i] = sort(x, *d);
        auto [w, j] = sort(x, *d, /*descending=*/true);
        return TensorList{v, i, w, j};
      },
      kAllTypes, order_shapes());
  add_dim_cases(
      c, "topk", OpId::topk,
      [](auto& x, auto d, bool) {
        auto [v, i] = topk(x, topk_k(x, *d), *d);
        auto [w, j] = topk(x, topk_k(x, *d), *d, /*largest=*/false);
        return TensorList{v, i, w, j};
      },
      kAllTypes, order_shapes());
  c.push_back({.name = "topk/k_zero_and_whole_lines",
               .ops = {OpId::topk},
               .dtypes = {kFloat32, kFloat64, kInt32},
               .make =
                   [](DType t, Generator& g) {
                     return TensorList{uniform({6, 9}, t, g)};
                   },
               .run =
                   [](TensorList& in) {
                     auto [v, i] = topk(in[0], 0, 1);
                     auto [w, j] = topk(in[0], 9, 1, false);
                     auto [u, k] = topk(in[0], 6, 0);
                     return TensorList{v, i, w, j, u, k, argsort(in[0], 0, true)};
                   }});
});

// NaN in row 1, -inf filling row 2 and one +inf in row 3 of a [5, 9] tensor (and
// its transpose, which takes the column paths).
Tensor special_values(DType t, Generator& g) {
  Tensor x = uniform({5, 9}, t, g, -5, 5);
  x.index({1, 4}).fill_(std::numeric_limits<double>::quiet_NaN());
  x.index({1, 7}).fill_(std::numeric_limits<double>::quiet_NaN());
  x[2].fill_(-std::numeric_limits<double>::infinity());
  x.index({3, 0}).fill_(std::numeric_limits<double>::infinity());
  x.index({4, 5}).fill_(-std::numeric_limits<double>::infinity());
  return x;
}

const CaseRegistration kSpecial([](CaseList& c) {
  for (int64_t dim : {1, 0}) {
    const std::string suffix = dim == 1 ? "/rows" : "/columns";
    c.push_back({.name = "special_values/orders" + suffix,
                 .ops = {OpId::sort, OpId::topk},
                 .dtypes = kFloatTypes,
                 .make = [](DType t, Generator& g) { return TensorList{special_values(t, g)}; },
                 .run =
                     [dim](TensorList& in) {
                       auto [v, i] = sort(in[0], dim);
                       auto [w, j] = sort(in[0], dim, true);
                       auto [u, k] = topk(in[0], 3, dim);
                       auto [t, l] = topk(in[0], 3, dim, false);
                       return TensorList{v, i, w, j, u, k, t, l};
                     },
                 .check_grad = false});  // infinities and NaN: no finite differences
    c.push_back(
        {.name = "special_values/extremes" + suffix,
         .ops = {OpId::amax, OpId::amin, OpId::max_dim, OpId::min_dim, OpId::argmax, OpId::argmin},
         .dtypes = kFloatTypes,
         .make = [](DType t, Generator& g) { return TensorList{special_values(t, g)}; },
         .run =
             [dim](TensorList& in) {
               auto [v, i] = max(in[0], dim);
               auto [w, j] = min(in[0], dim);
               return TensorList{
                   amax(in[0], {dim}), amin(in[0], {dim}), v, i, w, j, argmax(in[0], dim),
                   argmin(in[0], dim), argmax(in[0])};
             }});
    c.push_back({.name = "special_values/sums" + suffix,
                 .ops = {OpId::sum, OpId::mean, OpId::logsumexp, OpId::norm, OpId::any},
                 .dtypes = kFloatTypes,
                 .make = [](DType t, Generator& g) { return TensorList{special_values(t, g)}; },
                 .run =
                     [dim](TensorList& in) {
                       const double inf = std::numeric_limits<double>::infinity();
                       return TensorList{sum(in[0], {dim}),       mean(in[0], {dim}),
                                         logsumexp(in[0], {dim}), norm(in[0], inf, {dim}),
                                         norm(in[0], 2, {dim}),   any(in[0], {dim}),
                                         all(in[0], {dim})};
                     }});
    c.push_back(
        {.name = "special_values/softmax" + suffix,
         .ops = {OpId::softmax, OpId::log_softmax, OpId::cumsum},
         .dtypes = kFloatTypes,
         .make = [](DType t, Generator& g) { return TensorList{special_values(t, g)}; },
         .run =
             [dim](TensorList& in) {
               return TensorList{softmax(in[0], dim), log_softmax(in[0], dim), cumsum(in[0], dim)};
             }});
  }
  c.push_back({.name = "var/fewer_elements_than_correction",
               .ops = {OpId::var, OpId::std},
               .dtypes = kFloatTypes,
               .make =
                   [](DType t, Generator& g) {
                     return TensorList{uniform({4, 2}, t, g)};
                   },
               .run =
                   [](TensorList& in) {
                     return TensorList{var(in[0], {1}, 3), stddev(in[0], {1}, 2),
                                       var(in[0].narrow(1, 0, 1), {1})};
                   }});
});

// [3, 50000]: NaN late in row 0, twice in row 1 (the first is the one the
// arg-reductions name), none in row 2 but both infinities. Long enough that
// the CUDA reductions split each row over blocks and merge the partial results.
Tensor long_special_values(DType t, Generator& g) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  Tensor x = uniform({3, 50000}, t, g, -5, 5);
  x.index({0, 40001}).fill_(nan);
  x.index({1, 7}).fill_(nan);
  x.index({1, 30000}).fill_(nan);
  x.index({2, 49999}).fill_(inf);
  x.index({2, 12345}).fill_(-inf);
  return x;
}

const CaseRegistration kLongSpecial([](CaseList& c) {
  for (int64_t dim : {1, 0}) {
    const std::string suffix = dim == 1 ? "/long_rows" : "/long_columns";
    c.push_back({.name = "special_values/extremes" + suffix,
                 .ops = {OpId::amax, OpId::amin, OpId::max_dim, OpId::min_dim, OpId::argmax,
                         OpId::argmin, OpId::logsumexp, OpId::sum, OpId::norm},
                 .dtypes = kFloatTypes,
                 .make =
                     [dim](DType t, Generator& g) {
                       Tensor x = long_special_values(t, g);
                       // dim 0: the transpose, laid out contiguously (the column paths).
                       return TensorList{dim == 1 ? x : x.t().contiguous()};
                     },
                 .run =
                     [dim](TensorList& in) {
                       auto [v, i] = max(in[0], dim);
                       auto [w, j] = min(in[0], dim);
                       const double inf = std::numeric_limits<double>::infinity();
                       return TensorList{amax(in[0], {dim}),
                                         amin(in[0], {dim}),
                                         v,
                                         i,
                                         w,
                                         j,
                                         argmax(in[0], dim),
                                         argmin(in[0], dim),
                                         argmax(in[0]),
                                         logsumexp(in[0], {dim}),
                                         sum(in[0], {dim}),
                                         norm(in[0], inf, {dim})};
                     }});
  }
});

const CaseRegistration kDTypes([](CaseList& c) {
  c.push_back({.name = "sum/dtype_argument",
               .ops = {OpId::sum, OpId::prod, OpId::mean, OpId::cumsum, OpId::copy},
               .dtypes = {kInt32, kInt8, kBool},
               .make =
                   [](DType t, Generator& g) {
                     return TensorList{uniform({5, 7}, t, g, -3, 3)};
                   },
               .run =
                   [](TensorList& in) {
                     return TensorList{
                         sum(in[0], {1}, false, kFloat64), sum(in[0], {}, false, kInt16),
                         prod(in[0], {0}, true, kFloat32), mean(in[0], {1}, false, kFloat32),
                         cumsum(in[0], 1, kFloat32),       cumsum(in[0], 0, kInt32)};
                   }});
  c.push_back({.name = "sum/half_to_float",
               .ops = {OpId::sum, OpId::mean, OpId::cumsum},
               .dtypes = {kFloat16, kBFloat16},
               .make =
                   [](DType t, Generator& g) {
                     return TensorList{uniform({33, 65}, t, g)};
                   },
               .run =
                   [](TensorList& in) {
                     return TensorList{sum(in[0], {0}, false, kFloat32),
                                       mean(in[0], {1}, false, kFloat64),
                                       cumsum(in[0], 1, kFloat32)};
                   }});
  // Values near 1000: a float32 sum in one accumulator would lose digits, and a
  // one-pass variance would cancel. Rows and columns both.
  c.push_back({.name = "sum/large_offset_accuracy",
               .ops = {OpId::sum, OpId::mean, OpId::var},
               .dtypes = {kFloat32},
               .make =
                   [](DType t, Generator& g) {
                     return TensorList{uniform({2, 300001}, t, g, 999, 1001),
                                       uniform({300001, 3}, t, g, 999, 1001)};
                   },
               .run =
                   [](TensorList& in) {
                     return TensorList{sum(in[0], {1}), mean(in[0]),     var(in[0], {1}),
                                       sum(in[1], {0}), var(in[1], {0}), sum(in[1].t(), {1})};
                   }});
});

// Layouts the shape lists do not reach: broadcast (stride 0) inputs and a
// permutation whose kept dims are out of memory order (both copied first).
const CaseRegistration kLayouts([](CaseList& c) {
  c.push_back({.name = "reduce/expanded_and_permuted_inputs",
               .ops = {OpId::sum, OpId::amax, OpId::argmax, OpId::var, OpId::cumsum, OpId::softmax},
               .dtypes = {kFloat32, kFloat64, kBFloat16},
               .make =
                   [](DType t, Generator& g) {
                     return TensorList{uniform({5, 1}, t, g), uniform({4, 5, 6}, t, g)};
                   },
               .run =
                   [](TensorList& in) {
                     Tensor wide = in[0].expand({5, 7});
                     Tensor perm = in[1].permute({2, 0, 1});
                     return TensorList{sum(wide, {0}),   sum(wide, {1}),  amax(wide, {}),
                                       argmax(wide, 1),  var(perm, {1}),  sum(perm, {0, 2}),
                                       argmax(perm),     argmax(perm, 2), cumsum(perm, 1),
                                       softmax(perm, 0), softmax(wide, 1)};
                   }});
});

}  // namespace
}  // namespace kiln::testing
