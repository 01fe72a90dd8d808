// Consistency cases of the factories.
#include "ops/consistency.h"

namespace kiln::testing {
namespace {

TensorList no_inputs(DType, Generator&) { return {}; }

const CaseRegistration kFactories([](CaseList& c) {
  c.push_back({.name = "empty/shape_only",
               .ops = {OpId::empty},
               .dtypes = kAllTypes,
               .make = no_inputs,
               .run = [](TensorList&) {
                 Tensor e = empty({3, 0, 2});
                 Tensor f = empty({4, 5}, {.dtype = kInt16});
                 return TensorList{e, zeros_like(f)};
               }});
  c.push_back({.name = "full/values",
               .ops = {OpId::full},
               .dtypes = kAllTypes,
               .make = no_inputs,
               .run = [](TensorList&) {
                 return TensorList{full({3, 7}, 2.5, {.dtype = kFloat16}), ones({0}), zeros({}),
                                   full({5}, true), full({2, 2}, -3, {.dtype = kInt8}),
                                   full({300, 200}, 1.25)};
               }});
  c.push_back({.name = "arange/ranges",
               .ops = {OpId::arange},
               .dtypes = {kFloat32},
               .make = no_inputs,
               .run = [](TensorList&) {
                 return TensorList{arange(10), arange(1, 10, 3), arange(10, 1, -2), arange(0.0, 1.0, 0.1),
                                   arange(-1.5, 2.5, 0.5, {.dtype = kFloat64}), arange(0, 5, 1, {.dtype = kBFloat16}),
                                   arange(3, 3)};
               }});
  c.push_back({.name = "linspace/ends",
               .ops = {OpId::linspace},
               .dtypes = {kFloat32},
               .make = no_inputs,
               .run = [](TensorList&) {
                 return TensorList{linspace(0, 1, 11), linspace(-3, 7, 1), linspace(2, -2, 0),
                                   linspace(0, 10, 6, {.dtype = kInt32}), linspace(1e-3, 1e3, 97, {.dtype = kFloat64})};
               }});
  c.push_back({.name = "eye/shapes",
               .ops = {OpId::eye},
               .dtypes = {kFloat32},
               .make = no_inputs,
               .run = [](TensorList&) {
                 return TensorList{eye(4), eye(3, 5), eye(0), eye(2, 1, {.dtype = kBool})};
               }});
  c.push_back({.name = "rand/seeded",
               .ops = {OpId::rand, OpId::randn, OpId::randint},
               .dtypes = {kFloat32, kFloat64, kFloat16, kBFloat16},
               .make = no_inputs,
               .run = [](TensorList&) {
                 Generator g(42);
                 return TensorList{rand({7, 13}, {}, &g), rand({5}, {.dtype = kFloat64}, &g),
                                   randn({301, 129}, {}, &g), randn({3}, {.dtype = kBFloat16}, &g),
                                   randint(-5, 17, {9, 4}, {}, &g), randint(0, 3, {6}, {.dtype = kUInt8}, &g)};
               }});
});

}  // namespace
}  // namespace kiln::testing
