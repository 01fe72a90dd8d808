// Consistency cases of the factories.
#include "ops/consistency.h"

namespace kiln::testing {
namespace {

// Factories have no tensor inputs: the one input is an empty marker whose
// device the factories use, so that each backend's run makes them there.
TensorList device_marker(DType, Generator&) { return {empty({0})}; }

TensorOptions on(const TensorList& in, std::optional<DType> dtype = std::nullopt) {
  return {.dtype = dtype, .device = in[0].device()};
}

const CaseRegistration kFactories([](CaseList& c) {
  c.push_back({.name = "empty/shape_only",
               .ops = {OpId::empty},
               .dtypes = kAllTypes,
               .make = device_marker,
               .run = [](TensorList& in) {
                 Tensor e = empty({3, 0, 2}, on(in));
                 Tensor f = empty({4, 5}, on(in, kInt16));
                 return TensorList{e, zeros_like(f)};
               }});
  c.push_back({.name = "full/values",
               .ops = {OpId::full},
               .dtypes = kAllTypes,
               .make = device_marker,
               .run = [](TensorList& in) {
                 return TensorList{full({3, 7}, 2.5, on(in, kFloat16)),
                                   ones({0}, on(in)),
                                   zeros({}, on(in)),
                                   full({5}, true, on(in)),
                                   full({2, 2}, -3, on(in, kInt8)),
                                   full({300, 200}, 1.25, on(in))};
               }});
  // full_like takes its input's sizes, dtype and device, whatever its layout.
  c.push_back({.name = "full_like/values_and_layouts",
               .ops = {OpId::full_like},
               .dtypes = kAllTypes,
               .make =
                   [](DType t, Generator& g) {
                     return TensorList{uniform({3, 7}, t, g), uniform_transposed({5, 4}, t, g),
                                       uniform_strided({300, 20}, t, g)};
                   },
               .run =
                   [](TensorList& in) {
                     return TensorList{zeros_like(in[0]), ones_like(in[1]), full_like(in[2], 2),
                                       full_like(in[0].slice(0, 0, 0), 1),
                                       full_like(in[0].select(0, 1).select(0, 2), true)};
                   }});
  // full with sizes of its inputs' dims (SymSize): the inputs give sizes only.
  c.push_back({.name = "full_sized/sizes_of_dims",
               .ops = {OpId::full_sized},
               .dtypes = kAllTypes,
               .make =
                   [](DType t, Generator& g) {
                     return TensorList{uniform({3, 7}, t, g), uniform_transposed({5, 4}, t, g)};
                   },
               .run =
                   [](TensorList& in) {
                     const Tensor &a = in[0], &b = in[1];
                     const TensorOptions o = on(in, a.dtype());
                     return TensorList{zeros({a.sym_size(0), 2}, o),
                                       ones({b.sym_size(1), a.sym_size(1)}, o),
                                       full({a.sym_size(1), b.sym_size(0), 3}, true, o),
                                       zeros({a.sym_size(0), 0}, o),
                                       full({300, a.sym_size(1)}, 1, on(in, kFloat32))};
                   }});
  c.push_back({.name = "arange/ranges",
               .ops = {OpId::arange},
               .dtypes = {kFloat32},
               .make = device_marker,
               .run = [](TensorList& in) {
                 return TensorList{arange(10, on(in)),
                                   arange(1, 10, 3, on(in)),
                                   arange(10, 1, -2, on(in)),
                                   arange(0.0, 1.0, 0.1, on(in)),
                                   arange(-1.5, 2.5, 0.5, on(in, kFloat64)),
                                   arange(0, 5, 1, on(in, kBFloat16)),
                                   arange(3, 3, 1, on(in))};
               }});
  c.push_back({.name = "linspace/ends",
               .ops = {OpId::linspace},
               .dtypes = {kFloat32},
               .make = device_marker,
               .run = [](TensorList& in) {
                 return TensorList{linspace(0, 1, 11, on(in)), linspace(-3, 7, 1, on(in)),
                                   linspace(2, -2, 0, on(in)), linspace(0, 10, 6, on(in, kInt32)),
                                   linspace(1e-3, 1e3, 97, on(in, kFloat64))};
               }});
  c.push_back({.name = "eye/shapes",
               .ops = {OpId::eye},
               .dtypes = {kFloat32},
               .make = device_marker,
               .run = [](TensorList& in) {
                 return TensorList{eye(4, std::nullopt, on(in)), eye(3, 5, on(in)),
                                   eye(0, std::nullopt, on(in)), eye(2, 1, on(in, kBool))};
               }});
  c.push_back({.name = "rand/seeded",
               .ops = {OpId::rand, OpId::randn, OpId::randint},
               .dtypes = {kFloat32, kFloat64, kFloat16, kBFloat16},
               .make = device_marker,
               .run = [](TensorList& in) {
                 Generator g(42);
                 return TensorList{
                     rand({7, 13}, on(in), &g),           rand({5}, on(in, kFloat64), &g),
                     randn({301, 129}, on(in), &g),       randn({3}, on(in, kBFloat16), &g),
                     randint(-5, 17, {9, 4}, on(in), &g), randint(0, 3, {6}, on(in, kUInt8), &g)};
               }});
});

}  // namespace
}  // namespace kiln::testing
