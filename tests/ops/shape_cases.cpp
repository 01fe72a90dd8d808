// Consistency cases of the shape, view and indexing ops. View ops have no
// kernels: their cases copy the view (clone reads it through its strides) or
// write through it, so a wrong stride or offset shows up as a wrong value.
#include "ops/consistency.h"

namespace kiln::testing {
namespace {

// Options that put a tensor made inside a case on its input's device.
TensorOptions same_device(const Tensor& like) {
  TensorOptions o;
  o.device = like.device();
  return o;
}

using MakeFn = std::function<TensorList(DType, Generator&)>;
using RunFn = std::function<TensorList(TensorList&)>;

void add(CaseList& cases, std::string name, std::vector<OpId> ops, MakeFn make, RunFn run,
         std::vector<DType> dtypes = kAllTypes, bool check_grad = true) {
  cases.push_back({.name = std::move(name),
                   .ops = std::move(ops),
                   .dtypes = std::move(dtypes),
                   .make = std::move(make),
                   .run = std::move(run),
                   .check_grad = check_grad});
}

// Scatter cases whose random indices repeat: which write wins is unspecified, so
// gradients are only checked on the cases with distinct indices.
constexpr bool kDuplicateIndices = false;

// One input of the given shape; transposed or strided when asked.
MakeFn one(Shape shape, char layout = 'c') {
  return [shape, layout](DType t, Generator& g) {
    if (layout == 't') return TensorList{uniform_transposed(shape, t, g)};
    if (layout == 's') return TensorList{uniform_strided(shape, t, g)};
    return TensorList{uniform(shape, t, g)};
  };
}

Tensor indices(int64_t high, const Shape& shape, Generator& g) {
  return randint(0, high, shape, {.dtype = kInt64}, &g);
}

// --- view ops ---------------------------------------------------------------------

const CaseRegistration kViews([](CaseList& c) {
  add(c, "view/split_and_merge_dims", {OpId::view}, one({6, 35}), [](TensorList& in) {
    return TensorList{in[0].view({-1, 5, 7}).clone(), in[0].view({210}).clone(),
                      in[0].view({2, 3, 35}).clone()};
  });
  add(c, "view/0dim_and_ones", {OpId::view}, one({}), [](TensorList& in) {
    return TensorList{in[0].view({1, 1}).clone(), in[0].view({1}).view({}).clone()};
  });
  add(c, "view/empty", {OpId::view}, one({0, 3}), [](TensorList& in) {
    return TensorList{in[0].view({3, 0}).clone(), in[0].view({-1, 3}).clone()};
  });
  add(c, "view/transposed_split_last_dim", {OpId::view}, one({5, 9}, 't'), [](TensorList& in) {
    return TensorList{in[0].view({5, 3, 3}).clone(), in[0].view({5, 9, 1}).clone()};
  });
  add(c, "view/strided", {OpId::view}, one({4, 6}, 's'), [](TensorList& in) {
    return TensorList{in[0].view({4, 2, 3}).clone(), in[0].view({2, 2, 6}).clone()};
  });
  add(c, "view/large", {OpId::view}, one({257, 131}), [](TensorList& in) {
    return TensorList{in[0].view({131, 257}).t().clone()};
  });
  add(c, "permute/three_dims", {OpId::permute}, one({3, 5, 7}), [](TensorList& in) {
    return TensorList{in[0].permute({2, 0, 1}).clone(), in[0].permute({-1, -3, -2}).clone(),
                      in[0].permute({0, 1, 2}).clone()};
  });
  add(c, "permute/0dim_and_empty", {OpId::permute}, one({}), [](TensorList& in) {
    return TensorList{in[0].permute({}).clone(),
                      zeros({0, 4}, same_device(in[0])).permute({1, 0}).clone()};
  });
  add(c, "permute/transposed_input", {OpId::permute}, one({4, 6, 5}, 't'), [](TensorList& in) {
    return TensorList{in[0].permute({1, 2, 0}).clone(), in[0].transpose(0, 2).clone()};
  });
  add(c, "permute/large", {OpId::permute}, one({64, 33, 17}), [](TensorList& in) {
    return TensorList{in[0].permute({2, 0, 1}).clone()};
  });
  add(c, "squeeze/all_and_some", {OpId::squeeze}, one({1, 5, 1, 7}), [](TensorList& in) {
    return TensorList{in[0].squeeze().clone(), squeeze(in[0], {0}).clone(),
                      in[0].squeeze(-2).clone(), in[0].squeeze(1).clone(),
                      squeeze(in[0], {0, 2}).clone()};
  });
  add(c, "squeeze/0dim_and_strided", {OpId::squeeze}, one({1, 6, 1}, 's'), [](TensorList& in) {
    return TensorList{in[0].squeeze().clone(), in[0].squeeze(-1).clone(),
                      in[0].select(1, 2).squeeze().clone()};
  });
  add(c, "squeeze/large", {OpId::squeeze}, one({1, 300, 1, 131}),
      [](TensorList& in) { return TensorList{in[0].squeeze().t().clone()}; });
  add(c, "unsqueeze/positions", {OpId::unsqueeze}, one({5, 7}, 't'), [](TensorList& in) {
    return TensorList{in[0].unsqueeze(0).clone(), in[0].unsqueeze(1).clone(),
                      in[0].unsqueeze(2).clone(), in[0].unsqueeze(-1).clone(),
                      in[0].select(0, 1).unsqueeze(0).clone()};
  });
  add(c, "unsqueeze/0dim", {OpId::unsqueeze}, one({}), [](TensorList& in) {
    return TensorList{in[0].unsqueeze(0).clone(), in[0].unsqueeze(-1).unsqueeze(0).clone()};
  });
  add(c, "unsqueeze/large", {OpId::unsqueeze}, one({257, 131}, 't'),
      [](TensorList& in) { return TensorList{in[0].unsqueeze(1).clone()}; });
  add(c, "flatten/ranges", {OpId::flatten}, one({3, 4, 5}), [](TensorList& in) {
    return TensorList{in[0].flatten().clone(), in[0].flatten(1).clone(),
                      in[0].flatten(0, 1).clone(), in[0].flatten(-3, -2).clone()};
  });
  add(c, "flatten/strided_views_and_copies", {OpId::flatten}, one({4, 6, 5}, 't'),
      [](TensorList& in) {
        return TensorList{in[0].flatten(1).clone(), in[0].flatten().clone(),
                          in[0].slice(2, 1, 4).flatten(0, 1).clone(),
                          in[0].select(1, 2).flatten().clone()};
      });
  add(c, "flatten/0dim_and_empty", {OpId::flatten}, one({}), [](TensorList& in) {
    return TensorList{in[0].flatten().clone(),
                      zeros({0, 4, 2}, same_device(in[0])).flatten(1).clone()};
  });
  add(c, "flatten/large", {OpId::flatten}, one({3, 257, 131}, 's'),
      [](TensorList& in) { return TensorList{in[0].flatten(1).clone()}; });
  add(c, "unflatten/parts", {OpId::unflatten}, one({6, 20}), [](TensorList& in) {
    return TensorList{in[0].unflatten(1, {4, 5}).clone(), in[0].unflatten(-1, {2, -1, 2}).clone(),
                      in[0].unflatten(0, {6}).clone(), in[0].unflatten(0, {1, 2, 3}).clone()};
  });
  add(c, "unflatten/transposed_and_empty", {OpId::unflatten}, one({8, 6}, 't'), [](TensorList& in) {
    return TensorList{in[0].unflatten(0, {2, 4}).clone(),
                      in[0].t().unflatten(1, {-1, 2}).flatten(1).clone(),
                      zeros({0, 6}, same_device(in[0])).unflatten(1, {3, 2}).clone()};
  });
  add(c, "unflatten/large", {OpId::unflatten}, one({262, 300}, 't'), [](TensorList& in) {
    return TensorList{in[0].unflatten(1, {-1, 3}).clone()};
  });
  add(c, "expand/broadcast_dims", {OpId::expand}, one({5, 1}), [](TensorList& in) {
    return TensorList{in[0].expand({3, 5, 4}).clone(), in[0].expand({-1, 6}).clone(),
                      in[0].expand({2, -1, -1}).clone(), in[0].expand({0, 5, 2}).clone()};
  });
  add(c, "expand/0dim_and_strided", {OpId::expand}, one({}), [](TensorList& in) {
    return TensorList{in[0].expand({2, 3}).clone(),
                      in[0].expand({7}).unsqueeze(0).expand({3, 7}).t().clone()};
  });
  add(c, "expand/large", {OpId::expand}, one({1, 131}, 's'), [](TensorList& in) {
    return TensorList{in[0].expand({300, 131}).clone()};
  });
  // Shapes with sizes of tensors' dims (SymSize): the sized views.
  add(c, "view_sized/sizes_of_dims", {OpId::view_sized}, one({6, 35}), [](TensorList& in) {
    const Tensor& x = in[0];
    const Tensor other = x.t();
    return TensorList{x.view({x.sym_size(0), 5, -1}).clone(),
                      x.view({other.sym_size(0), -1}).clone(),
                      x.reshape({x.sym_size(1), x.sym_size(0)}).clone(),
                      x.t().reshape({x.sym_size(1), -1}).clone()};
  });
  add(c, "expand_sized/sizes_of_dims", {OpId::expand_sized}, one({5, 1}), [](TensorList& in) {
    const Tensor& x = in[0];
    const Tensor big = x.expand({5, 4});
    return TensorList{x.expand({x.sym_size(0), big.sym_size(1)}).clone(),
                      x.expand({2, -1, big.sym_size(1)}).clone(), x.expand_as(big).clone(),
                      x.select(1, 0).expand_as(x.t()).clone()};
  });
  add(c, "slice/steps_and_bounds", {OpId::slice}, one({7, 13}), [](TensorList& in) {
    return TensorList{
        in[0].slice(1, 1, 10, 3).clone(),   in[0].slice(0, -3, std::nullopt).clone(),
        in[0].slice(1, 2, 100, 20).clone(), in[0].slice(0, 5, 2).clone(),
        in[0].slice(1, -100, -2).clone(),   in[0].slice(0, std::nullopt, std::nullopt, 2).clone()};
  });
  add(c, "slice/transposed_and_nested", {OpId::slice}, one({6, 11}, 't'), [](TensorList& in) {
    return TensorList{in[0].slice(0, 1, 5).slice(1, 2, std::nullopt, 4).clone(),
                      in[0].slice(-1, 3, 4).clone()};
  });
  add(c, "slice/large", {OpId::slice}, one({300, 262}),
      [](TensorList& in) { return TensorList{in[0].slice(1, 1, std::nullopt, 2).clone()}; });
  add(c, "select/dims_and_negative_index", {OpId::select}, one({5, 7, 3}, 't'), [](TensorList& in) {
    return TensorList{in[0].select(0, -1).clone(), in[0].select(1, 2).clone(),
                      in[0].select(2, 0).clone(), in[0].select(0, 0).select(0, 6).clone()};
  });
  add(c, "select/large", {OpId::select}, one({3, 300, 131}, 't'),
      [](TensorList& in) { return TensorList{in[0].select(0, 1).clone()}; });
  add(c, "split/views", {OpId::slice}, one({7, 10}, 't'), [](TensorList& in) {
    TensorList out;
    for (auto& t : split(in[0], 3, 0)) out.push_back(t.clone());
    for (auto& t : split(in[0], std::vector<int64_t>{4, 0, 6}, 1)) out.push_back(t.clone());
    for (auto& t : chunk(in[0], 3, 1)) out.push_back(t.clone());
    for (auto& t : chunk(in[0], 4, -2)) out.push_back(t.clone());
    return out;
  });
  add(c, "split/large", {OpId::slice}, one({300, 257}), [](TensorList& in) {
    TensorList out;
    for (auto& t : chunk(in[0], 3, 1)) out.push_back(t.clone());
    return out;
  });
});

// In-place ops write through views into the base tensor.
const CaseRegistration kViewWrites([](CaseList& c) {
  add(c, "view_writes/fill_through_slices", {OpId::slice, OpId::select, OpId::fill}, one({6, 9}),
      [](TensorList& in) {
        in[0].slice(1, 0, std::nullopt, 2).fill_(1);
        in[0].select(0, 3).zero_();
        in[0].t().slice(0, 7, 9).select(1, 5).fill_(0);
        return TensorList{in[0]};
      });
  add(
      c, "view_writes/mul_through_permute_and_view", {OpId::permute, OpId::view, OpId::unsqueeze},
      one({4, 5, 6}),
      [](TensorList& in) {
        Tensor p = in[0].permute({2, 0, 1});
        p.mul_(p.select(0, 0).unsqueeze(0));
        in[0].view({20, 6}).slice(0, 3, 9).add_(in[0].view({120}).slice(0, 0, 6));
        return TensorList{in[0]};
      },
      kNumericTypes);
  add(c, "view_writes/copy_into_expanded_source", {OpId::expand, OpId::squeeze, OpId::copy},
      one({1, 7, 1}), [](TensorList& in) {
        Tensor dst = zeros({5, 7}, {.dtype = in[0].dtype(), .device = in[0].device()});
        dst.t().copy_(in[0].squeeze().unsqueeze(1).expand({7, 5}));
        return TensorList{dst};
      });
  add(
      c, "view_writes/large", {OpId::slice, OpId::select}, one({600, 131}),
      [](TensorList& in) {
        in[0].slice(0, 1, std::nullopt, 2).mul_(in[0].slice(0, 0, -1, 2));
        return TensorList{in[0]};
      },
      kNumericTypes);
});

// --- cat and stack --------------------------------------------------------------------

const CaseRegistration kCatStack([](CaseList& c) {
  add(
      c, "cat/dim0", {OpId::cat},
      [](DType t, Generator& g) {
        return TensorList{uniform({3, 5}, t, g), uniform({4, 5}, t, g), uniform({1, 5}, t, g)};
      },
      [](TensorList& in) { return TensorList{cat(in, 0)}; });
  add(
      c, "cat/dim1_mixed_layouts", {OpId::cat},
      [](DType t, Generator& g) {
        return TensorList{uniform({5, 3}, t, g), uniform_transposed({5, 7}, t, g),
                          uniform_strided({5, 2}, t, g)};
      },
      [](TensorList& in) {
        return TensorList{cat(in, 1), cat(in, -1)};
      });
  add(
      c, "cat/inner_dim_of_3d", {OpId::cat},
      [](DType t, Generator& g) {
        return TensorList{uniform({2, 3, 5}, t, g), uniform({2, 1, 5}, t, g),
                          uniform_transposed({2, 4, 5}, t, g)};
      },
      [](TensorList& in) {
        return TensorList{cat(in, 1), cat(in, -2)};
      });
  add(
      c, "cat/skips_1d_empty_and_size0", {OpId::cat},
      [](DType t, Generator& g) {
        return TensorList{uniform({3, 4}, t, g), uniform({0}, t, g), uniform({0, 4}, t, g),
                          uniform({2, 4}, t, g)};
      },
      [](TensorList& in) {
        return TensorList{cat(in, 0), cat({in[1], in[1]}, 0), cat({in[2], in[2]}, 1)};
      });
  add(
      c, "cat/single_and_1d", {OpId::cat},
      [](DType t, Generator& g) {
        return TensorList{uniform({7}, t, g), uniform({1}, t, g)};
      },
      [](TensorList& in) {
        return TensorList{cat({in[0]}, 0), cat(in, 0), cat({in[1], in[0], in[1]})};
      });
  add(
      c, "cat/promotes_to_float", {OpId::cat},
      [](DType t, Generator& g) {
        return TensorList{uniform({2, 3}, t, g), uniform({2, 2}, kFloat32, g)};
      },
      [](TensorList& in) { return TensorList{cat(in, 1)}; });
  add(
      c, "cat/promotes_with_bool", {OpId::cat},
      [](DType t, Generator& g) {
        return TensorList{random_mask({3}, g), uniform({4}, t, g)};
      },
      [](TensorList& in) {
        return TensorList{cat(in, 0), cat({in[1], in[0]}, 0)};
      });
  add(
      c, "cat/large_rows", {OpId::cat},
      [](DType t, Generator& g) {
        return TensorList{uniform({200, 100}, t, g), uniform({200, 81}, t, g)};
      },
      [](TensorList& in) { return TensorList{cat(in, 1)}; });
  add(
      c, "cat/large_few_rows", {OpId::cat},
      [](DType t, Generator& g) {
        return TensorList{uniform({2, 20000}, t, g), uniform_transposed({2, 17001}, t, g)};
      },
      [](TensorList& in) {
        return TensorList{cat(in, 1), cat({in[0].t(), in[1].t()}, 0)};
      });
  add(
      c, "stack/every_dim", {OpId::stack},
      [](DType t, Generator& g) {
        return TensorList{uniform({3, 5}, t, g), uniform_transposed({3, 5}, t, g),
                          uniform({3, 5}, t, g)};
      },
      [](TensorList& in) {
        return TensorList{stack(in, 0), stack(in, 1), stack(in, 2), stack(in, -1),
                          stack({in[1]}, 1)};
      });
  add(
      c, "stack/0dim_and_empty", {OpId::stack},
      [](DType t, Generator& g) {
        return TensorList{uniform({}, t, g), uniform({}, t, g), uniform({0, 3}, t, g)};
      },
      [](TensorList& in) {
        return TensorList{stack({in[0], in[1]}), stack({in[2], in[2]}, 1)};
      });
  add(
      c, "stack/promotes", {OpId::stack},
      [](DType t, Generator& g) {
        return TensorList{uniform({4}, t, g), uniform({4}, kInt16, g)};
      },
      [](TensorList& in) { return TensorList{stack(in, 0)}; });
  add(
      c, "stack/large", {OpId::stack},
      [](DType t, Generator& g) {
        return TensorList{uniform({150, 101}, t, g), uniform({150, 101}, t, g),
                          uniform_strided({150, 101}, t, g)};
      },
      [](TensorList& in) {
        return TensorList{stack(in, 1), stack(in, 0)};
      });
});

// --- indexing -------------------------------------------------------------------------

const CaseRegistration kIndexing([](CaseList& c) {
  add(
      c, "index_select/every_dim", {OpId::index_select},
      [](DType t, Generator& g) {
        return TensorList{uniform({4, 5, 6}, t, g), indices(4, {7}, g), indices(5, {3}, g),
                          indices(6, {11}, g)};
      },
      [](TensorList& in) {
        return TensorList{index_select(in[0], 0, in[1]), index_select(in[0], 1, in[2]),
                          index_select(in[0], 2, in[3]), index_select(in[0], -1, in[3])};
      });
  add(
      c, "index_select/int32_transposed_empty", {OpId::index_select},
      [](DType t, Generator& g) {
        return TensorList{uniform_transposed({7, 13}, t, g), indices(13, {9}, g).to(kInt32),
                          indices(7, {0}, g)};
      },
      [](TensorList& in) {
        return TensorList{index_select(in[0], 1, in[1]), index_select(in[0], 0, in[2])};
      });
  add(
      c, "index_select/0dim", {OpId::index_select},
      [](DType t, Generator& g) {
        return TensorList{uniform({}, t, g), zeros({1}, {.dtype = kInt64}), uniform({5}, t, g),
                          full({}, 3, {.dtype = kInt64})};
      },
      [](TensorList& in) {
        return TensorList{index_select(in[0], 0, in[1]), index_select(in[2], 0, in[3])};
      });
  add(
      c, "index_select/large", {OpId::index_select},
      [](DType t, Generator& g) {
        return TensorList{uniform({400, 129}, t, g), indices(400, {300}, g),
                          indices(129, {300}, g)};
      },
      [](TensorList& in) {
        return TensorList{index_select(in[0], 0, in[1]), index_select(in[0], 1, in[2])};
      });
  add(
      c, "gather/every_dim_smaller_index", {OpId::gather},
      [](DType t, Generator& g) {
        return TensorList{uniform({4, 5, 6}, t, g), indices(4, {7, 3, 2}, g),
                          indices(5, {2, 9, 6}, g), indices(6, {3, 4, 8}, g)};
      },
      [](TensorList& in) {
        return TensorList{gather(in[0], 0, in[1]), gather(in[0], 1, in[2]), gather(in[0], 2, in[3]),
                          gather(in[0], -1, in[3])};
      });
  add(
      c, "gather/transposed_input_and_index", {OpId::gather},
      [](DType t, Generator& g) {
        return TensorList{uniform_transposed({6, 9}, t, g), indices(9, {4, 6}, g).t(),
                          indices(6, {3, 9}, g)};
      },
      [](TensorList& in) {
        return TensorList{gather(in[0], 1, in[1]), gather(in[0], 0, in[2])};
      });
  add(
      c, "gather/0dim_and_empty", {OpId::gather},
      [](DType t, Generator& g) {
        return TensorList{uniform({}, t, g), zeros({}, {.dtype = kInt64}), uniform({3, 4}, t, g),
                          indices(3, {0, 4}, g)};
      },
      [](TensorList& in) {
        return TensorList{gather(in[0], 0, in[1]), gather(in[2], 0, in[3])};
      });
  add(
      c, "gather/large", {OpId::gather},
      [](DType t, Generator& g) {
        return TensorList{uniform({300, 200}, t, g), indices(200, {300, 150}, g),
                          indices(300, {250, 200}, g)};
      },
      [](TensorList& in) {
        return TensorList{gather(in[0], 1, in[1]), gather(in[0], 0, in[2])};
      });
  // Random indices repeat: duplicates must resolve the same way on every backend.
  add(
      c, "scatter/every_dim_with_duplicates", {OpId::scatter},
      [](DType t, Generator& g) {
        return TensorList{uniform({4, 5, 6}, t, g), indices(4, {7, 3, 2}, g),
                          uniform({7, 5, 6}, t, g), indices(5, {2, 9, 6}, g),
                          uniform({3, 9, 6}, t, g), indices(6, {3, 4, 8}, g),
                          uniform({4, 5, 9}, t, g)};
      },
      [](TensorList& in) {
        return TensorList{scatter(in[0], 0, in[1], in[2]), scatter(in[0], 1, in[3], in[4]),
                          scatter(in[0], 2, in[5], in[6]), scatter(in[0], -1, in[5], in[6])};
      },
      kAllTypes, kDuplicateIndices);
  add(
      c, "scatter/transposed_and_0dim", {OpId::scatter},
      [](DType t, Generator& g) {
        return TensorList{uniform_transposed({6, 9}, t, g), indices(6, {5, 9}, g),
                          uniform_transposed({7, 9}, t, g), uniform({}, t, g),
                          zeros({}, {.dtype = kInt64}),     uniform({}, t, g)};
      },
      [](TensorList& in) {
        return TensorList{scatter(in[0], 0, in[1], in[2]),
                          scatter(in[0], 1, in[1].t().slice(0, 0, 6), in[2].t()),
                          scatter(in[3], 0, in[4], in[5])};
      },
      kAllTypes, kDuplicateIndices);
  add(
      c, "scatter/distinct_indices", {OpId::scatter},
      [](DType t, Generator& g) {
        // Rows 0..2 of column j hit (j, j + 2, j + 4) mod 7: distinct in every column.
        Tensor rows = arange(0, 3).unsqueeze(1) * 2 + arange(0, 4).unsqueeze(0);
        return TensorList{uniform_transposed({7, 4}, t, g), remainder(rows, 7),
                          uniform({5, 6}, t, g)};
      },
      [](TensorList& in) {
        Tensor x = in[0].clone();
        const TensorOptions on{.dtype = kInt64, .device = in[0].device()};
        Tensor along_rows = arange(0, 3, 1, on).unsqueeze(0) + arange(0, 2, 1, on).unsqueeze(1);
        scatter_(x, 1, along_rows, in[2].slice(1, 0, 4));
        return TensorList{scatter(in[0], 0, in[1], in[2].t()), x};
      },
      kFloatTypes);
  add(
      c, "scatter_/in_place", {OpId::scatter},
      [](DType t, Generator& g) {
        return TensorList{uniform({6, 9}, t, g), indices(9, {6, 4}, g), uniform({6, 4}, t, g)};
      },
      [](TensorList& in) {
        Tensor row = in[0].select(0, 2);
        scatter_(row, 0, in[1].select(0, 0), in[2].select(0, 0));
        Tensor column = in[0].select(1, 3);  // strided: goes through a temporary
        scatter_(column, 0, remainder(in[1].select(1, 1), 6), in[2].select(1, 1));
        scatter_(in[0], 1, in[1], in[2]);
        return TensorList{in[0]};
      },
      kAllTypes, kDuplicateIndices);
  add(
      c, "scatter/large", {OpId::scatter},
      [](DType t, Generator& g) {
        return TensorList{uniform({300, 200}, t, g), indices(200, {300, 150}, g),
                          uniform({300, 150}, t, g), indices(300, {250, 200}, g)};
      },
      [](TensorList& in) {
        return TensorList{scatter(in[0], 1, in[1], in[2]), scatter(in[0], 0, in[3], in[0])};
      },
      kAllTypes, kDuplicateIndices);
});

// --- repeat, flip, tril/triu, one_hot ---------------------------------------------------

const CaseRegistration kRearrange([](CaseList& c) {
  add(c, "repeat/same_rank_and_leading", {OpId::repeat}, one({2, 3}), [](TensorList& in) {
    return TensorList{repeat(in[0], {2, 3}), repeat(in[0], {2, 1, 3}), repeat(in[0], {1, 1}),
                      repeat(in[0], {0, 2}), repeat(in[0], {3, 1, 1, 1})};
  });
  add(c, "repeat/0dim_and_empty", {OpId::repeat}, one({}), [](TensorList& in) {
    return TensorList{repeat(in[0], {3, 2}), repeat(in[0], {}),
                      repeat(zeros({0, 2}, same_device(in[0])), {2, 3})};
  });
  add(c, "repeat/transposed", {OpId::repeat}, one({5, 7}, 't'), [](TensorList& in) {
    return TensorList{repeat(in[0], {3, 2}), repeat(in[0], {2, 1, 1})};
  });
  add(c, "repeat/large", {OpId::repeat}, one({100, 37}, 's'), [](TensorList& in) {
    return TensorList{repeat(in[0], {3, 4}), repeat(in[0].select(1, 0), {400})};
  });
  add(c, "flip/dims", {OpId::flip}, one({4, 5, 6}), [](TensorList& in) {
    return TensorList{flip(in[0], {0}),    flip(in[0], {1}),       flip(in[0], {-1}),
                      flip(in[0], {0, 2}), flip(in[0], {2, 1, 0}), flip(in[0], {})};
  });
  add(c, "flip/0dim_empty_and_strided", {OpId::flip}, one({5, 7}, 's'), [](TensorList& in) {
    return TensorList{flip(in[0], {1}), flip(in[0].t(), {0, 1}),
                      flip(in[0].select(0, 0).select(0, 0), {0}),
                      flip(zeros({0, 3}, same_device(in[0])), {0, 1})};
  });
  add(c, "flip/large", {OpId::flip}, one({300, 131}, 't'), [](TensorList& in) {
    return TensorList{flip(in[0], {0}), flip(in[0], {1}), flip(in[0].flatten(), {0})};
  });
  add(c, "tril/diagonals", {OpId::tril, OpId::triu}, one({5, 7}), [](TensorList& in) {
    TensorList out;
    for (int64_t d : {0, 1, -1, 3, -4, 100, -100}) {
      out.push_back(tril(in[0], d));
      out.push_back(triu(in[0], d));
    }
    return out;
  });
  add(c, "tril/batched_transposed_empty", {OpId::tril, OpId::triu}, one({2, 3, 6, 4}, 't'),
      [](TensorList& in) {
        return TensorList{tril(in[0]), triu(in[0], 1),
                          tril(zeros({3, 0, 4}, same_device(in[0])), 0),
                          triu(in[0].select(0, 1).select(0, 2), -2)};
      });
  add(c, "tril_/in_place", {OpId::tril, OpId::triu}, one({3, 6, 6}), [](TensorList& in) {
    Tensor m = in[0].select(0, 0);
    tril_(m, -1);
    Tensor strided = in[0].select(1, 2).unsqueeze(0);  // not contiguous: through a temporary
    triu_(strided, 2);
    triu_(in[0], -2);
    return TensorList{in[0]};
  });
  add(c, "tril/large", {OpId::tril, OpId::triu}, one({3, 150, 101}), [](TensorList& in) {
    Tensor x = in[0].clone();
    tril_(x, 5);
    return TensorList{tril(in[0], -3), triu(in[0], 7), x};
  });
  add(
      c, "one_hot/explicit_and_inferred", {OpId::one_hot},
      [](DType, Generator& g) {
        return TensorList{indices(6, {4, 7}, g), indices(3, {0}, g)};
      },
      [](TensorList& in) {
        return TensorList{one_hot(in[0], 6), one_hot(in[0], 9), one_hot(in[0]), one_hot(in[1], 3),
                          one_hot(in[0].t().select(0, 2))};
      },
      {kInt64});
  add(
      c, "one_hot/0dim", {OpId::one_hot},
      [](DType, Generator&) { return TensorList{full({}, 2, {.dtype = kInt64})}; },
      [](TensorList& in) {
        return TensorList{one_hot(in[0], 4), one_hot(in[0])};
      },
      {kInt64});
  add(
      c, "one_hot/large", {OpId::one_hot},
      [](DType, Generator& g) { return TensorList{indices(7, {40000}, g)}; },
      [](TensorList& in) {
        return TensorList{one_hot(in[0]), one_hot(in[0].slice(0, 0, std::nullopt, 3), 10)};
      },
      {kInt64});
});

}  // namespace
}  // namespace kiln::testing
