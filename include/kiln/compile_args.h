// What a compiled function takes and returns (docs/compile.md, "Arguments,
// results, guards"): kiln::compile flattens its arguments into their tensors
// and a key of everything else, and its results into tensors and a
// structure that rebuilds them. Both nest:
//
//   Tensor (defined or not), numbers, enums, std::string,
//   std::optional<V>, std::vector<V>, std::map<std::string, V>,
//   std::pair / std::tuple / std::array of Vs, and aggregates (structs of
//   public members without constructors) of Vs:
//
//   struct Out { Tensor logits; std::optional<Tensor> hidden; };
//   auto fast = kiln::compile([&](const Tensor& x) { return Out{net(x), std::nullopt}; });
//
// Numbers and strings are arguments only: a result is made of tensors.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::compiler::internal {

// A call's arguments flattened: its defined tensors, and a key of everything
// else the trace depends on (numbers, strings, list lengths, which tensors
// are absent). The key's grammar, per value: tensor 1; undefined tensor 5;
// float 3 bits; integer 4 value; string 9 text; optional 6 present [value];
// vector 2 n values; map 7 n (text value)...; tuple or aggregate 8 n values.
// A text is its length and its bytes packed eight to a number.
struct FlatArgs {
  TensorList tensors;
  std::vector<int64_t> key;
};

enum KeyTag : int64_t {
  kKeyTensor = 1,
  kKeyList = 2,
  kKeyFloat = 3,
  kKeyInt = 4,
  kKeyNoTensor = 5,
  kKeyOptional = 6,
  kKeyMap = 7,
  kKeyFields = 8,
  kKeyText = 9,
};

// Runs the user's function on the given tensors (proxies or real ones) and
// returns its results flattened; `structure` describes their nesting.
using Runner =
    std::function<TensorList(const TensorList& tensors, std::vector<int64_t>& structure)>;

// --- what a value is ---------------------------------------------------------------

template <class T>
struct IsOptional : std::false_type {};
template <class T>
struct IsOptional<std::optional<T>> : std::true_type {};
template <class T>
struct IsVector : std::false_type {};
template <class T, class A>
struct IsVector<std::vector<T, A>> : std::true_type {};
template <class T>
struct IsTextMap : std::false_type {};
template <class T, class C, class A>
struct IsTextMap<std::map<std::string, T, C, A>> : std::true_type {};

template <class T>
concept TupleLike = requires {
  std::tuple_size<T>::value;
};

// Converts to any member type but an optional (whose own converting
// constructor would make the conversion ambiguous): what counts an
// aggregate's members.
struct AnyMember {
  template <class T>
  requires(!IsOptional<T>::value) operator T()
      const;  // NOLINT(google-explicit-constructor): declared only, for counting
};

template <class T, size_t... I>
constexpr bool brace_initializable(std::index_sequence<I...>) {
  return requires { T{(void(I), AnyMember{})...}; };
}

template <class T, size_t N = 0>
constexpr size_t member_count() {
  if constexpr (N < 16 && brace_initializable<T>(std::make_index_sequence<N + 1>{})) {
    return member_count<T, N + 1>();
  } else {
    return N;
  }
}

template <class T>
concept Aggregate = std::is_aggregate_v<T> && !std::is_array_v<T> && !TupleLike<T>;

// An aggregate's members as a tuple of references (up to 12 members).
template <class T>
auto members_of(T& v) {
  constexpr size_t n = member_count<std::remove_const_t<T>>();
  static_assert(n <= 12, "kiln::compile: an aggregate argument or result has more than 12 members");
  if constexpr (n == 0) {
    return std::tie();
  } else if constexpr (n == 1) {
    auto& [a] = v;
    return std::tie(a);
  } else if constexpr (n == 2) {
    auto& [a, b] = v;
    return std::tie(a, b);
  } else if constexpr (n == 3) {
    auto& [a, b, c] = v;
    return std::tie(a, b, c);
  } else if constexpr (n == 4) {
    auto& [a, b, c, d] = v;
    return std::tie(a, b, c, d);
  } else if constexpr (n == 5) {
    auto& [a, b, c, d, e] = v;
    return std::tie(a, b, c, d, e);
  } else if constexpr (n == 6) {
    auto& [a, b, c, d, e, f] = v;
    return std::tie(a, b, c, d, e, f);
  } else if constexpr (n == 7) {
    auto& [a, b, c, d, e, f, g] = v;
    return std::tie(a, b, c, d, e, f, g);
  } else if constexpr (n == 8) {
    auto& [a, b, c, d, e, f, g, h] = v;
    return std::tie(a, b, c, d, e, f, g, h);
  } else if constexpr (n == 9) {
    auto& [a, b, c, d, e, f, g, h, i] = v;
    return std::tie(a, b, c, d, e, f, g, h, i);
  } else if constexpr (n == 10) {
    auto& [a, b, c, d, e, f, g, h, i, j] = v;
    return std::tie(a, b, c, d, e, f, g, h, i, j);
  } else if constexpr (n == 11) {
    auto& [a, b, c, d, e, f, g, h, i, j, k] = v;
    return std::tie(a, b, c, d, e, f, g, h, i, j, k);
  } else {
    auto& [a, b, c, d, e, f, g, h, i, j, k, l] = v;
    return std::tie(a, b, c, d, e, f, g, h, i, j, k, l);
  }
}

template <class Tuple>
struct DecayedTuple;
template <class... M>
struct DecayedTuple<std::tuple<M...>> {
  using type = std::tuple<std::remove_cvref_t<M>...>;
};
// The members' types of an aggregate, as a tuple of values.
template <class T>
using MemberTypes = typename DecayedTuple<decltype(members_of(std::declval<T&>()))>::type;

// --- texts in keys ------------------------------------------------------------------

inline void append_text(std::string_view s, std::vector<int64_t>& out) {
  out.push_back(static_cast<int64_t>(s.size()));
  for (size_t i = 0; i < s.size(); i += 8) {
    uint64_t word = 0;
    std::memcpy(&word, s.data() + i, std::min<size_t>(8, s.size() - i));
    out.push_back(static_cast<int64_t>(word));
  }
}

inline std::string read_text(const std::vector<int64_t>& in, size_t& at) {
  const auto n = static_cast<size_t>(in.at(at++));
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i += 8) {
    const auto word = static_cast<uint64_t>(in.at(at++));
    std::memcpy(s.data() + i, &word, std::min<size_t>(8, n - i));
  }
  return s;
}

// --- arguments ----------------------------------------------------------------------

template <class A>
void flatten_arg(const A& a, FlatArgs& out) {
  using T = std::remove_cvref_t<A>;
  if constexpr (std::is_same_v<T, Tensor>) {
    if (a.defined()) {
      out.key.push_back(kKeyTensor);
      out.tensors.push_back(a);
    } else {
      out.key.push_back(kKeyNoTensor);
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    out.key.push_back(kKeyFloat);
    out.key.push_back(std::bit_cast<int64_t>(static_cast<double>(a)));
  } else if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T>) {
    out.key.push_back(kKeyInt);
    out.key.push_back(static_cast<int64_t>(a));
  } else if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    out.key.push_back(kKeyText);
    append_text(std::string_view(a), out.key);
  } else if constexpr (IsOptional<T>::value) {
    out.key.push_back(kKeyOptional);
    out.key.push_back(a.has_value());
    if (a) flatten_arg(*a, out);
  } else if constexpr (IsVector<T>::value) {
    out.key.push_back(kKeyList);
    out.key.push_back(static_cast<int64_t>(a.size()));
    for (const auto& item : a) flatten_arg(item, out);
  } else if constexpr (IsTextMap<T>::value) {
    out.key.push_back(kKeyMap);
    out.key.push_back(static_cast<int64_t>(a.size()));
    for (const auto& [name, item] : a) {
      append_text(name, out.key);
      flatten_arg(item, out);
    }
  } else if constexpr (TupleLike<T>) {
    out.key.push_back(kKeyFields);
    out.key.push_back(static_cast<int64_t>(std::tuple_size_v<T>));
    std::apply([&](const auto&... part) { (flatten_arg(part, out), ...); }, a);
  } else if constexpr (Aggregate<T>) {
    const auto members = members_of(a);
    out.key.push_back(kKeyFields);
    out.key.push_back(static_cast<int64_t>(std::tuple_size_v<decltype(members)>));
    std::apply([&](const auto&... part) { (flatten_arg(part, out), ...); }, members);
  } else {
    static_assert(sizeof(T) == 0,
                  "kiln::compile: an argument must be a Tensor, a number, an enum, a string, or an "
                  "optional, vector, string-keyed map, tuple or aggregate of those");
  }
}

// A value of the argument's type as the function sees it: tensors from
// `tensors` (proxies while tracing) in flatten_arg's order, the rest as in `a`.
template <class T>
T rebuild_value(const T& a, const TensorList& tensors, size_t& next) {
  if constexpr (std::is_same_v<T, Tensor>) {
    return a.defined() ? tensors[next++] : Tensor();
  } else if constexpr (IsOptional<T>::value) {
    return a ? T(rebuild_value(*a, tensors, next)) : T();
  } else if constexpr (IsVector<T>::value) {
    T out;
    out.reserve(a.size());
    for (const auto& item : a) out.push_back(rebuild_value(item, tensors, next));
    return out;
  } else if constexpr (IsTextMap<T>::value) {
    T out;
    for (const auto& [name, item] : a) out.emplace(name, rebuild_value(item, tensors, next));
    return out;
  } else if constexpr (TupleLike<T> && !std::is_convertible_v<const T&, std::string_view>) {
    return [&]<size_t... I>(std::index_sequence<I...>) {
      // Braced initialization evaluates the parts in order.
      return T{rebuild_value(std::get<I>(a), tensors, next)...};
    }
    (std::make_index_sequence<std::tuple_size_v<T>>{});
  } else if constexpr (Aggregate<T>) {
    const auto members = members_of(a);
    return [&]<size_t... I>(std::index_sequence<I...>) {
      return T{rebuild_value(std::get<I>(members), tensors, next)...};
    }
    (std::make_index_sequence<std::tuple_size_v<decltype(members)>>{});
  } else {
    return a;
  }
}

// The argument as the function sees it: numbers and strings forwarded as
// they are, values holding tensors rebuilt.
template <class A>
decltype(auto) rebuild_arg(A&& a, const TensorList& tensors, size_t& next) {
  using T = std::remove_cvref_t<A>;
  if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T> ||
                std::is_convertible_v<const T&, std::string_view>) {
    return std::forward<A>(a);
  } else {
    return rebuild_value<T>(a, tensors, next);
  }
}

// --- results ------------------------------------------------------------------------
// The structure of a result, per value: tensor 1 (defined) or 0; optional
// present [value]; vector n values; map n (text value)...; tuples and
// aggregates their members.

template <class R>
void flatten_result(const R& r, TensorList& out, std::vector<int64_t>& structure) {
  if constexpr (std::is_same_v<R, Tensor>) {
    structure.push_back(r.defined());
    if (r.defined()) out.push_back(r);
  } else if constexpr (IsOptional<R>::value) {
    structure.push_back(r.has_value());
    if (r) flatten_result(*r, out, structure);
  } else if constexpr (IsVector<R>::value) {
    structure.push_back(static_cast<int64_t>(r.size()));
    for (const auto& item : r) flatten_result(item, out, structure);
  } else if constexpr (IsTextMap<R>::value) {
    structure.push_back(static_cast<int64_t>(r.size()));
    for (const auto& [name, item] : r) {
      append_text(name, structure);
      flatten_result(item, out, structure);
    }
  } else if constexpr (TupleLike<R>) {
    std::apply([&](const auto&... parts) { (flatten_result(parts, out, structure), ...); }, r);
  } else if constexpr (Aggregate<R>) {
    std::apply([&](const auto&... parts) { (flatten_result(parts, out, structure), ...); },
               members_of(r));
  } else {
    static_assert(sizeof(R) == 0,
                  "kiln::compile: a result must be a Tensor, or an optional, vector, string-keyed "
                  "map, tuple or aggregate of those");
  }
}

template <class R>
R unflatten_result(const TensorList& flat, const std::vector<int64_t>& structure, size_t& next,
                   size_t& at) {
  if constexpr (std::is_same_v<R, Tensor>) {
    return structure.at(at++) != 0 ? flat.at(next++) : Tensor();
  } else if constexpr (IsOptional<R>::value) {
    if (structure.at(at++) == 0) return R();
    return R(unflatten_result<typename R::value_type>(flat, structure, next, at));
  } else if constexpr (IsVector<R>::value) {
    const auto n = static_cast<size_t>(structure.at(at++));
    R v;
    v.reserve(n);
    for (size_t i = 0; i < n; ++i)
      v.push_back(unflatten_result<typename R::value_type>(flat, structure, next, at));
    return v;
  } else if constexpr (IsTextMap<R>::value) {
    const auto n = static_cast<size_t>(structure.at(at++));
    R m;
    for (size_t i = 0; i < n; ++i) {
      std::string name = read_text(structure, at);
      m.emplace(std::move(name),
                unflatten_result<typename R::mapped_type>(flat, structure, next, at));
    }
    return m;
  } else if constexpr (TupleLike<R>) {
    return [&]<size_t... I>(std::index_sequence<I...>) {
      // Braced initialization evaluates the parts in order.
      return R{unflatten_result<std::tuple_element_t<I, R>>(flat, structure, next, at)...};
    }
    (std::make_index_sequence<std::tuple_size_v<R>>{});
  } else {
    using Members = MemberTypes<R>;
    return [&]<size_t... I>(std::index_sequence<I...>) {
      return R{unflatten_result<std::tuple_element_t<I, Members>>(flat, structure, next, at)...};
    }
    (std::make_index_sequence<std::tuple_size_v<Members>>{});
  }
}

}  // namespace kiln::compiler::internal
