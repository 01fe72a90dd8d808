// kiln against tables whose values come from PyTorch (tests/parity/make_op_tables.py
// writes tests/data/op_tables/*.json). The CPU and reference kernels share the
// shape rules and the pad and interpolate index formulas, so the op-consistency
// test cannot see a bug there; these tables can.
//
// shapes.json: every entry is an op call, run on meta tensors (only the shape
// rule runs), whose output sizes must be the table's, or which must throw a
// kiln::Error where the table says "error". resample.json: pad and interpolate
// of arange values, run on the CPU backend, the reference kernels and CUDA, whose
// every element must be the table's. Where kiln differs from PyTorch on purpose
// (docs/ops.md: interpolate's scale_factor samples with in / out), the tables
// hold kiln's documented semantics.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/kiln.h"
#include "ops/dispatch.h"

using namespace kiln;
using json = nlohmann::json;
namespace F = kiln::nn::functional;

namespace {

json read_table(const std::string& file) {
  // The environment's KILN_TEST_DATA_DIR wins: a build run from another checkout.
  const char* env = std::getenv("KILN_TEST_DATA_DIR");
  const std::string dir = env && *env ? env : KILN_TEST_DATA_DIR;
  const std::string path = dir + "/op_tables/" + file;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  return json::parse(in);
}

const json& shape_table() {
  static const json table = read_table("shapes.json");
  return table;
}

const json& resample_table() {
  static const json table = read_table("resample.json");
  return table;
}

DType dtype_of(const json& input) {
  const std::string name = input.value("dtype", "float32");
  if (name == "float32") return kFloat32;
  if (name == "float64") return kFloat64;
  if (name == "int64") return kInt64;
  if (name == "bool") return kBool;
  throw std::runtime_error("unknown dtype in the table: " + name);
}

// A JSON number as a Scalar that keeps whether it is an integer (arange's dtype depends on it).
Scalar scalar_of(const json& v) {
  if (v.is_number_integer()) return Scalar(v.get<int64_t>());
  return Scalar(v.get<double>());
}

// A table entry's call: its inputs (undefined where the entry has null) and attributes.
struct OpCall {
  const json& entry;
  std::vector<Tensor> inputs;

  const Tensor& in(size_t i) const { return inputs.at(i); }
  const json& attrs() const { return entry.at("attrs"); }
  bool has(const char* name) const { return attrs().contains(name) && !attrs()[name].is_null(); }
  template <class T>
  T get(const char* name) const {
    return attrs().at(name).get<T>();
  }
  Shape ints(const char* name) const { return get<Shape>(name); }
  int64_t i(const char* name) const { return get<int64_t>(name); }
  bool b(const char* name) const { return get<bool>(name); }
  double f(const char* name) const { return get<double>(name); }
  std::optional<int64_t> maybe_i(const char* name) const {
    return has(name) ? std::optional<int64_t>(i(name)) : std::nullopt;
  }
  std::optional<Scalar> maybe_scalar(const char* name) const {
    return has(name) ? std::optional<Scalar>(scalar_of(attrs()[name])) : std::nullopt;
  }
};

using Outputs = std::vector<Tensor>;
using OpFn = std::function<Outputs(const OpCall&)>;

// How each op name of the tables is called. family groups the ops into one
// TEST each; needs_values marks the calls that run on real zeros (modules
// whose weights are real tensors).
struct OpRow {
  std::string family;
  OpFn run;
  bool needs_values = false;
};
using OpRows = std::map<std::string, OpRow>;

Outputs one(Tensor t) { return {std::move(t)}; }

void add_pointwise_rows(OpRows& rows) {
  const std::string f = "pointwise";
  rows["add"] = {f, [](const OpCall& c) { return one(add(c.in(0), c.in(1))); }};
  rows["mul"] = {f, [](const OpCall& c) { return one(mul(c.in(0), c.in(1))); }};
  rows["eq"] = {f, [](const OpCall& c) { return one(eq(c.in(0), c.in(1))); }};
  rows["maximum"] = {f, [](const OpCall& c) { return one(maximum(c.in(0), c.in(1))); }};
  rows["masked_fill"] = {
      f, [](const OpCall& c) { return one(masked_fill(c.in(0), c.in(1), c.f("value"))); }};
  rows["where"] = {f, [](const OpCall& c) { return one(where(c.in(0), c.in(1), c.in(2))); }};
  rows["clamp"] = {f, [](const OpCall& c) {
                     return one(clamp(c.in(0), c.maybe_scalar("min"), c.maybe_scalar("max")));
                   }};
}

void add_linalg_rows(OpRows& rows) {
  const std::string f = "linalg";
  rows["matmul"] = {f, [](const OpCall& c) { return one(matmul(c.in(0), c.in(1))); }};
  rows["bmm"] = {f, [](const OpCall& c) { return one(bmm(c.in(0), c.in(1))); }};
  rows["addmm"] = {f, [](const OpCall& c) {
                     return one(addmm(c.in(0), c.in(1), c.in(2), scalar_of(c.attrs()["beta"]),
                                      scalar_of(c.attrs()["alpha"])));
                   }};
  rows["linear"] = {f, [](const OpCall& c) { return one(linear(c.in(0), c.in(1), c.in(2))); }};
}

template <class Options>
Options conv_options(const OpCall& c) {
  Options o;
  o.stride = c.ints("stride");
  if (c.has("padding")) o.padding = c.ints("padding");
  o.dilation = c.ints("dilation");
  o.groups = c.i("groups");
  if (c.has("padding_mode")) o.padding_mode = c.get<std::string>("padding_mode");
  return o;
}

void add_conv_pool_rows(OpRows& rows) {
  const std::string f = "conv_pool";
  rows["conv1d"] = {f, [](const OpCall& c) {
                      return one(conv1d(c.in(0), c.in(1), c.in(2), conv_options<Conv1dOptions>(c)));
                    }};
  rows["conv2d"] = {f, [](const OpCall& c) {
                      return one(conv2d(c.in(0), c.in(1), c.in(2), conv_options<Conv2dOptions>(c)));
                    }};
  rows["max_pool2d"] = {
      f, [](const OpCall& c) {
        return one(max_pool2d(c.in(0), c.ints("kernel_size"), c.ints("stride"), c.ints("padding"),
                              c.ints("dilation"), c.b("ceil_mode")));
      }};
  rows["max_pool2d_with_indices"] = {f, [](const OpCall& c) {
                                       auto [values, indices] = max_pool2d_with_indices(
                                           c.in(0), c.ints("kernel_size"), c.ints("stride"),
                                           c.ints("padding"), c.ints("dilation"), c.b("ceil_mode"));
                                       return Outputs{values, indices};
                                     }};
  rows["avg_pool2d"] = {
      f, [](const OpCall& c) {
        return one(avg_pool2d(c.in(0), c.ints("kernel_size"), c.ints("stride"), c.ints("padding"),
                              c.b("ceil_mode"), c.b("count_include_pad")));
      }};
  rows["adaptive_avg_pool2d"] = {
      f, [](const OpCall& c) { return one(adaptive_avg_pool2d(c.in(0), c.ints("output_size"))); }};
}

F::InterpolateOptions interpolate_options(const OpCall& c) {
  F::InterpolateOptions o;
  if (c.has("size")) o.size = c.ints("size");
  if (c.has("scale_factor")) o.scale_factor = c.get<std::vector<double>>("scale_factor");
  o.mode = c.get<std::string>("mode");
  if (c.has("align_corners")) o.align_corners = c.b("align_corners");
  return o;
}

void add_resample_rows(OpRows& rows) {
  const std::string f = "resample";
  rows["pad"] = {
      f, [](const OpCall& c) {
        return one(F::pad(c.in(0), c.ints("pad"), c.get<std::string>("mode"), c.f("value")));
      }};
  rows["interpolate"] = {
      f, [](const OpCall& c) { return one(F::interpolate(c.in(0), interpolate_options(c))); }};
}

// norm's p: a number, or "inf" / "-inf" (JSON has no infinities).
double norm_p(const OpCall& c) {
  if (!c.has("p")) return 2;
  const json& p = c.attrs()["p"];
  if (!p.is_string()) return p.get<double>();
  const double inf = std::numeric_limits<double>::infinity();
  if (p == "inf") return inf;
  if (p == "-inf") return -inf;
  throw std::runtime_error("unknown norm p in the table: " + p.dump());
}

void add_reduce_rows(OpRows& rows) {
  const std::string f = "reduce";
  auto dims_op = [&](const char* name, Tensor (*fn)(const Tensor&, const Dims&, bool)) {
    rows[name] = {
        f, [fn](const OpCall& c) { return one(fn(c.in(0), c.ints("dims"), c.b("keepdim"))); }};
  };
  dims_op("amax", amax);
  dims_op("amin", amin);
  dims_op("logsumexp", logsumexp);
  dims_op("any", any);
  dims_op("all", all);
  rows["sum"] = {f,
                 [](const OpCall& c) { return one(sum(c.in(0), c.ints("dims"), c.b("keepdim"))); }};
  rows["mean"] = {
      f, [](const OpCall& c) { return one(mean(c.in(0), c.ints("dims"), c.b("keepdim"))); }};
  rows["var"] = {
      f, [](const OpCall& c) { return one(var(c.in(0), c.ints("dims"), 1, c.b("keepdim"))); }};
  rows["norm"] = {f, [](const OpCall& c) {
                    return one(norm(c.in(0), norm_p(c), c.ints("dims"), c.b("keepdim")));
                  }};
  rows["argmax"] = {
      f, [](const OpCall& c) { return one(argmax(c.in(0), c.maybe_i("dim"), c.b("keepdim"))); }};
  rows["max_dim"] = {f, [](const OpCall& c) {
                       auto [values, indices] = max(c.in(0), c.i("dim"), c.b("keepdim"));
                       return Outputs{values, indices};
                     }};
  rows["cumsum"] = {f, [](const OpCall& c) { return one(cumsum(c.in(0), c.i("dim"))); }};
  rows["softmax"] = {f, [](const OpCall& c) { return one(softmax(c.in(0), c.i("dim"))); }};
  rows["log_softmax"] = {f, [](const OpCall& c) { return one(log_softmax(c.in(0), c.i("dim"))); }};
}

void add_view_rows(OpRows& rows) {
  const std::string f = "view";
  rows["view"] = {f, [](const OpCall& c) { return one(view(c.in(0), c.ints("shape"))); }};
  rows["reshape"] = {f, [](const OpCall& c) { return one(reshape(c.in(0), c.ints("shape"))); }};
  rows["flatten"] = {
      f, [](const OpCall& c) { return one(flatten(c.in(0), c.i("start_dim"), c.i("end_dim"))); }};
  rows["unflatten"] = {
      f, [](const OpCall& c) { return one(unflatten(c.in(0), c.i("dim"), c.ints("sizes"))); }};
  rows["squeeze"] = {
      f, [](const OpCall& c) {
        return one(c.has("dims") ? squeeze(c.in(0), c.ints("dims")) : squeeze(c.in(0)));
      }};
  rows["unsqueeze"] = {f, [](const OpCall& c) { return one(unsqueeze(c.in(0), c.i("dim"))); }};
  rows["permute"] = {f, [](const OpCall& c) { return one(permute(c.in(0), c.ints("dims"))); }};
  rows["transpose"] = {
      f, [](const OpCall& c) { return one(transpose(c.in(0), c.i("dim0"), c.i("dim1"))); }};
  rows["expand"] = {f, [](const OpCall& c) { return one(expand(c.in(0), c.ints("shape"))); }};
  rows["slice"] = {
      f, [](const OpCall& c) {
        return one(slice(c.in(0), c.i("dim"), c.maybe_i("start"), c.maybe_i("stop"), c.i("step")));
      }};
  rows["select"] = {f,
                    [](const OpCall& c) { return one(select(c.in(0), c.i("dim"), c.i("index"))); }};
  rows["narrow"] = {f, [](const OpCall& c) {
                      return one(narrow(c.in(0), c.i("dim"), c.i("start"), c.i("length")));
                    }};
}

void add_indexing_rows(OpRows& rows) {
  const std::string f = "indexing";
  rows["cat"] = {f, [](const OpCall& c) { return one(cat(c.inputs, c.i("dim"))); }};
  rows["stack"] = {f, [](const OpCall& c) { return one(stack(c.inputs, c.i("dim"))); }};
  rows["split"] = {f, [](const OpCall& c) {
                     return c.has("sizes") ? split(c.in(0), c.ints("sizes"), c.i("dim"))
                                           : split(c.in(0), c.i("split_size"), c.i("dim"));
                   }};
  rows["chunk"] = {f, [](const OpCall& c) { return chunk(c.in(0), c.i("chunks"), c.i("dim")); }};
  rows["index_select"] = {
      f, [](const OpCall& c) { return one(index_select(c.in(0), c.i("dim"), c.in(1))); }};
  rows["gather"] = {f, [](const OpCall& c) { return one(gather(c.in(0), c.i("dim"), c.in(1))); }};
  rows["scatter"] = {
      f, [](const OpCall& c) { return one(scatter(c.in(0), c.i("dim"), c.in(1), c.in(2))); }};
  rows["scatter_add"] = {
      f, [](const OpCall& c) { return one(scatter_add(c.in(0), c.i("dim"), c.in(1), c.in(2))); }};
  rows["repeat"] = {f, [](const OpCall& c) { return one(repeat(c.in(0), c.ints("repeats"))); }};
  rows["flip"] = {f, [](const OpCall& c) { return one(flip(c.in(0), c.ints("dims"))); }};
  rows["tril"] = {f, [](const OpCall& c) { return one(tril(c.in(0), c.i("diagonal"))); }};
  rows["triu"] = {f, [](const OpCall& c) { return one(triu(c.in(0), c.i("diagonal"))); }};
  rows["one_hot"] = {f, [](const OpCall& c) { return one(one_hot(c.in(0), c.i("num_classes"))); }};
  rows["embedding"] = {f, [](const OpCall& c) {
                         return one(F::embedding(c.in(0), c.in(1), c.maybe_i("padding_idx")));
                       }};
}

nn::RNNOptions rnn_options(const OpCall& c) {
  return {.num_layers = c.i("num_layers"),
          .batch_first = c.b("batch_first"),
          .bidirectional = c.b("bidirectional")};
}

void add_nn_rows(OpRows& rows) {
  const std::string f = "nn";
  rows["scaled_dot_product_attention"] = {
      f, [](const OpCall& c) {
        return one(F::scaled_dot_product_attention(
            c.in(0), c.in(1), c.in(2), {.attn_mask = c.in(3), .is_causal = c.b("is_causal")}));
      }};
  rows["layer_norm"] = {
      f, [](const OpCall& c) {
        return one(F::layer_norm(c.in(0), c.ints("normalized_shape"), c.in(1), c.in(2)));
      }};
  rows["group_norm"] = {f, [](const OpCall& c) {
                          return one(F::group_norm(c.in(0), c.i("num_groups"), c.in(1), c.in(2)));
                        }};
  rows["batch_norm"] = {
      f, [](const OpCall& c) {
        return one(F::batch_norm(c.in(0), c.in(1), c.in(2), c.in(3), c.in(4), c.b("training")));
      }};
  rows["nll_loss"] = {
      f, [](const OpCall& c) {
        return one(F::nll_loss(c.in(0), c.in(1),
                               {.weight = c.in(2), .reduction = c.get<std::string>("reduction")}));
      }};
  rows["lstm"] = {f,
                  [](const OpCall& c) {
                    nn::LSTM lstm{c.i("input_size"), c.i("hidden_size"), rnn_options(c)};
                    auto [output, state] = lstm(c.in(0));
                    return Outputs{output, state.h, state.c};
                  },
                  /*needs_values=*/true};
  rows["gru"] = {f,
                 [](const OpCall& c) {
                   nn::GRU gru{c.i("input_size"), c.i("hidden_size"), rnn_options(c)};
                   auto [output, h_n] = gru(c.in(0));
                   return Outputs{output, h_n};
                 },
                 /*needs_values=*/true};
}

void add_factory_rows(OpRows& rows) {
  const std::string f = "factory";
  rows["arange"] = {
      f, [](const OpCall& c) {
        const json& a = c.attrs();
        return one(arange(scalar_of(a["start"]), scalar_of(a["end"]), scalar_of(a["step"])));
      }};
  rows["linspace"] = {
      f, [](const OpCall& c) { return one(linspace(c.f("start"), c.f("end"), c.i("steps"))); }};
  rows["eye"] = {f, [](const OpCall& c) { return one(eye(c.i("n"), c.maybe_i("m"))); }};
  rows["full"] = {f, [](const OpCall& c) { return one(full(c.ints("sizes"), c.f("value"))); }};
}

const OpRows& op_rows() {
  static const OpRows rows = [] {
    OpRows r;
    add_pointwise_rows(r);
    add_linalg_rows(r);
    add_conv_pool_rows(r);
    add_resample_rows(r);
    add_reduce_rows(r);
    add_view_rows(r);
    add_indexing_rows(r);
    add_nn_rows(r);
    add_factory_rows(r);
    return r;
  }();
  return rows;
}

// An entry as its failure message names it: op, inputs and attributes.
std::string describe(const json& entry) {
  json call = {{"op", entry.at("op")}, {"attrs", entry.at("attrs")}};
  if (entry.contains("inputs")) call["inputs"] = entry["inputs"];
  if (entry.contains("shape")) call["shape"] = entry["shape"];
  return call.dump();
}

std::string shapes_text(const Outputs& outputs) {
  json shapes = json::array();
  for (const auto& t : outputs) shapes.push_back(t.defined() ? json(t.sizes()) : json(nullptr));
  return shapes.dump();
}

std::vector<Tensor> make_inputs(const json& entry, bool needs_values) {
  std::vector<Tensor> inputs;
  for (const json& input : entry.at("inputs")) {
    if (input.is_null()) {
      inputs.emplace_back();
      continue;
    }
    const Shape shape = input.at("shape").get<Shape>();
    const DType dtype = dtype_of(input);
    inputs.push_back(needs_values ? zeros(shape, {.dtype = dtype})
                                  : ops::make_tensor(shape, dtype, Device::cpu(), /*meta=*/true));
  }
  return inputs;
}

void check_shape_entry(const json& entry, const OpRow& row) {
  const std::string what = describe(entry);
  const bool refused = entry.value("error", false);
  Outputs got;
  try {
    got = row.run(OpCall{entry, make_inputs(entry, row.needs_values)});
  } catch (const Error& e) {
    if (!refused) {
      ADD_FAILURE() << what << "\n  expected shapes " << entry.at("out").dump()
                    << "\n  kiln threw: " << e.what();
    }
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << "\n  threw something other than a kiln::Error: " << e.what();
    return;
  }
  if (refused) {
    ADD_FAILURE() << what << "\n  expected a kiln::Error (PyTorch: " << entry.value("why", "")
                  << ")\n  kiln gave shapes " << shapes_text(got);
    return;
  }
  const json& expected = entry.at("out");
  bool same = got.size() == expected.size();
  for (size_t i = 0; same && i < got.size(); ++i) {
    same = got[i].defined() && got[i].sizes() == expected[i].get<Shape>();
  }
  EXPECT_TRUE(same) << what << "\n  expected shapes " << expected.dump() << "\n  got shapes "
                    << shapes_text(got);
}

// Runs every shapes entry of the family's ops; returns how many there were.
size_t check_shape_family(const std::string& family) {
  size_t count = 0;
  for (const json& entry : shape_table()) {
    const auto row = op_rows().find(entry.at("op").get<std::string>());
    if (row == op_rows().end() || row->second.family != family) continue;
    check_shape_entry(entry, row->second);
    ++count;
  }
  return count;
}

}  // namespace

TEST(OpTableShapes, EveryEntryNamesAnOpTheTestCalls) {
  std::map<std::string, size_t> per_op;
  for (const json& entry : shape_table()) {
    const std::string op = entry.at("op").get<std::string>();
    if (!op_rows().contains(op)) {
      ADD_FAILURE() << describe(entry) << "\n  names an op this test does not know";
      continue;
    }
    ++per_op[op];
    EXPECT_NE(entry.contains("out"), entry.value("error", false)) << describe(entry);
  }
  for (const auto& [op, row] : op_rows()) {
    EXPECT_GT(per_op[op], 0u) << "shapes.json has no entry for " << op;
  }
}

TEST(OpTableShapes, BroadcastingElementwiseOpsMatchPyTorch) {
  EXPECT_GT(check_shape_family("pointwise"), 0u);
}
TEST(OpTableShapes, MatrixProductsMatchPyTorch) { EXPECT_GT(check_shape_family("linalg"), 0u); }
TEST(OpTableShapes, ConvolutionAndPoolingMatchPyTorch) {
  EXPECT_GT(check_shape_family("conv_pool"), 0u);
}
TEST(OpTableShapes, PadAndInterpolateMatchPyTorch) {
  EXPECT_GT(check_shape_family("resample"), 0u);
}
TEST(OpTableShapes, ReductionsMatchPyTorch) { EXPECT_GT(check_shape_family("reduce"), 0u); }
TEST(OpTableShapes, ViewsMatchPyTorch) { EXPECT_GT(check_shape_family("view"), 0u); }
TEST(OpTableShapes, IndexingOpsMatchPyTorch) { EXPECT_GT(check_shape_family("indexing"), 0u); }
TEST(OpTableShapes, NetworkOpsMatchPyTorch) { EXPECT_GT(check_shape_family("nn"), 0u); }
TEST(OpTableShapes, FactoriesMatchPyTorch) { EXPECT_GT(check_shape_family("factory"), 0u); }

namespace {

// bilinear's weights and sums may round differently from PyTorch's: a few ulps.
constexpr double kBilinearRelativeBound = 1e-12;

// Compares y with the entry's values; reports the first few elements that differ.
void expect_values(const json& entry, const Tensor& y, const char* backend) {
  const std::string what = describe(entry) + " on the " + backend;
  const Shape expected_shape = entry.at("out_shape").get<Shape>();
  if (y.sizes() != expected_shape) {
    ADD_FAILURE() << what << "\n  expected shape " << json(expected_shape).dump()
                  << "\n  got shape " << json(y.sizes()).dump();
    return;
  }
  const auto expected = entry.at("values").get<std::vector<double>>();
  const auto got = y.contiguous().to_vector<double>();
  ASSERT_EQ(expected.size(), got.size()) << what;
  const bool bilinear = entry.at("attrs").value("mode", "") == "bilinear";
  std::ostringstream diffs;
  diffs.precision(17);
  size_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound =
        bilinear ? kBilinearRelativeBound * std::max(1.0, std::abs(expected[i])) : 0.0;
    if (std::abs(got[i] - expected[i]) <= bound) continue;
    if (++wrong <= 5) {
      diffs << "\n  element " << i << ": expected " << expected[i] << ", got " << got[i];
    }
  }
  EXPECT_EQ(wrong, 0u) << what << " (shape " << json(expected_shape).dump() << "): " << wrong
                       << " of " << got.size() << " elements differ" << diffs.str();
}

void check_resample_entry(const json& entry) {
  const Shape shape = entry.at("shape").get<Shape>();
  std::vector<double> values(static_cast<size_t>(
      std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>())));
  std::iota(values.begin(), values.end(), 0.0);
  const Tensor x = from_vector(values, shape);
  const OpRow& row = op_rows().at(entry.at("op").get<std::string>());
  // The CPU backend, the reference kernels, and the CUDA backend when a device is present.
  for (const int backend_index : {0, 1, 2}) {
    if (backend_index == 2 && !cuda::is_available()) continue;
    const char* backend = backend_index == 0   ? "CPU backend"
                          : backend_index == 1 ? "reference kernels"
                                               : "CUDA backend";
    std::optional<ops::ReferenceModeGuard> guard;
    if (backend_index == 1) guard.emplace();
    const Tensor input = backend_index == 2 ? x.to(Device::cuda(0)) : x;
    try {
      const Outputs out = row.run(OpCall{entry, {input}});
      ASSERT_EQ(out.size(), 1u) << describe(entry);
      expect_values(entry, out[0].to(Device::cpu()), backend);
    } catch (const Error& e) {
      ADD_FAILURE() << describe(entry) << " on the " << backend << "\n  threw: " << e.what();
    }
  }
}

}  // namespace

TEST(OpTableResample, PadAndInterpolateValuesMatchPyTorchOnEveryBackend) {
  std::map<std::string, size_t> per_kind;
  for (const json& entry : resample_table()) {
    const std::string op = entry.at("op").get<std::string>();
    const std::string kind = op + " " + entry.at("attrs").value("mode", "");
    ASSERT_TRUE(op == "pad" || op == "interpolate") << describe(entry);
    ++per_kind[kind];
    check_resample_entry(entry);
  }
  for (const char* kind : {"pad constant", "pad reflect", "pad replicate", "interpolate nearest",
                           "interpolate bilinear"}) {
    EXPECT_GT(per_kind[kind], 0u) << "no " << kind << " entries in resample.json";
  }
}
