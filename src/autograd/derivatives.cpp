// The derivative table: derivatives.def read against the op table.
#include <algorithm>
#include <array>
#include <cassert>
#include <string_view>

#include "autograd/rules.h"

namespace kiln::autograd {
namespace {

std::vector<std::string_view> split_names(std::string_view s) {
  std::vector<std::string_view> names;
  while (!s.empty()) {
    const size_t comma = s.find(',');
    std::string_view part = s.substr(0, comma);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
    if (!part.empty()) names.push_back(part);
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return names;
}

// "self, other" against the schema's input names; "result" / "result1" against outputs.
Derivative make_derivative(ops::OpId op, BackwardRule rule, std::string_view inputs,
                           std::string_view results) {
  const ops::OpSchema& schema = ops::op_schema(op);
  Derivative d;
  d.rule = rule;
  d.save_inputs.assign(schema.inputs.size(), false);
  d.save_results.assign(static_cast<size_t>(std::max(schema.num_outputs, 0)), false);
  for (auto name : split_names(inputs)) {
    bool found = false;
    for (size_t i = 0; i < schema.inputs.size(); ++i) {
      if (schema.inputs[i].name == name) d.save_inputs[i] = found = true;
    }
    assert(found && "derivatives.def names an input the op does not have");
  }
  for (auto name : split_names(results)) {
    if (name == "result*") {  // every output, however many there are
      d.save_every_result = true;
      continue;
    }
    const size_t index = name == "result" ? 0 : static_cast<size_t>(name.back() - '0');
    assert(name.starts_with("result") && index < d.save_results.size() &&
           "derivatives.def names an output the op does not have");
    d.save_results[index] = true;
  }
  return d;
}

std::array<Derivative, ops::kNumOps> build_table() {
  std::array<Derivative, ops::kNumOps> table;
  for (const auto& schema : ops::all_op_schemas()) {
    auto& d = table[static_cast<size_t>(schema.id)];
    d.save_inputs.assign(schema.inputs.size(), false);
    d.save_results.assign(static_cast<size_t>(std::max(schema.num_outputs, 0)), false);
  }
#define KILN_GRAD(op, inputs, results) \
  table[static_cast<size_t>(ops::OpId::op)] = make_derivative(ops::OpId::op, &grad_##op, inputs, results);
#include "autograd/derivatives.def"
#undef KILN_GRAD
  return table;
}

}  // namespace

const Derivative& derivative(ops::OpId op) {
  static const std::array<Derivative, ops::kNumOps> kTable = build_table();
  return kTable[static_cast<size_t>(op)];
}

}  // namespace kiln::autograd
