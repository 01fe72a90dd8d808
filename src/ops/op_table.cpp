#include "ops/op_table.h"

#include <cassert>
#include <string>
#include <unordered_map>

namespace kiln::ops {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split_commas(std::string_view s) {
  std::vector<std::string_view> parts;
  if (trim(s).empty()) return parts;
  size_t start = 0;
  while (true) {
    size_t comma = s.find(',', start);
    parts.push_back(trim(s.substr(start, comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return parts;
}

std::vector<InputSpec> parse_inputs(std::string_view text) {
  std::vector<InputSpec> specs;
  for (auto part : split_commas(text)) {
    InputSpec spec{part, false, false};
    if (part.ends_with('?')) spec = {part.substr(0, part.size() - 1), true, false};
    if (part.ends_with('*')) spec = {part.substr(0, part.size() - 1), false, true};
    specs.push_back(spec);
  }
  return specs;
}

AttrType parse_attr_type(std::string_view t) {
  static const std::unordered_map<std::string_view, AttrType> kTypes = {
      {"int", AttrType::Int},       {"float", AttrType::Float},   {"bool", AttrType::Bool},
      {"ints", AttrType::Ints},     {"dtype", AttrType::DType},   {"device", AttrType::Device},
      {"scalar", AttrType::Scalar}, {"str", AttrType::Str}};
  auto it = kTypes.find(t);
  assert(it != kTypes.end() && "unknown attribute type in the op table");
  return it->second;
}

std::vector<AttrSpec> parse_attrs(std::string_view text) {
  std::vector<AttrSpec> specs;
  for (auto part : split_commas(text)) {
    size_t colon = part.find(':');
    assert(colon != std::string_view::npos && "attribute without a type in the op table");
    std::string_view type = part.substr(colon + 1);
    bool optional = type.ends_with('?');
    if (optional) type.remove_suffix(1);
    specs.push_back({part.substr(0, colon), parse_attr_type(type), optional});
  }
  return specs;
}

std::vector<OpSchema> build_schemas() {
  std::vector<OpSchema> schemas;
  schemas.reserve(kNumOps);
#define KILN_OP(name_, inputs_, attrs_, outputs_, rule_, flags_)                              \
  schemas.push_back(OpSchema{OpId::name_, #name_, parse_inputs(inputs_), parse_attrs(attrs_), \
                             outputs_, &rule_<ShapeCtx>, flags_, &rule_<SymShapeCtx>});
#include "ops/defs/all.def"
#undef KILN_OP
  return schemas;
}

const std::vector<OpSchema>& schemas() {
  static const std::vector<OpSchema> kSchemas = build_schemas();
  return kSchemas;
}

}  // namespace

const OpSchema& op_schema(OpId id) { return schemas()[static_cast<size_t>(id)]; }

std::span<const OpSchema> all_op_schemas() { return schemas(); }

std::optional<OpId> find_op(std::string_view name) {
  for (const auto& s : schemas())
    if (s.name == name) return s.id;
  return std::nullopt;
}

size_t OpSchema::min_inputs() const noexcept {
  size_t n = 0;
  for (const auto& in : inputs)
    if (!in.optional && !in.variadic) ++n;
  return n;
}

template <class T>
std::string_view BasicShapeCtx<T>::name() const noexcept {
  return schema.name;
}

template <class T>
Device BasicShapeCtx<T>::common_device() const {
  // A 0-dim CPU tensor may join a computation on another device, as in
  // PyTorch, wherever it comes in the inputs.
  std::optional<Device> device;
  for (const auto& t : inputs) {
    if (!t.defined() || t.is_wrapped_number() || (t.dim() == 0 && t.device().is_cpu())) continue;
    if (!device) {
      device = t.device();
    } else if (*device != t.device()) {
      throw DeviceError(detail::str_cat(name(), ": expected all tensors on one device, got ",
                                        *device, " and ", t.device()));
    }
  }
  return device.value_or(Device::cpu());
}

template struct BasicShapeCtx<Tensor>;
template struct BasicShapeCtx<SymTensor>;

}  // namespace kiln::ops
