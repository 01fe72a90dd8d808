// einsum, composed of permutes, sums and batched products: each operand's
// repeated labels become diagonals and its labels no one else needs are summed
// out; then the operands are multiplied left to right, each pair as one bmm
// over [shared kept labels, own labels, contracted labels].
#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <string_view>

#include "kiln/ops/factory.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"

namespace kiln {
namespace {

// Labels are letters; the dims an ellipsis stands for get labels from 256 up,
// aligned from the right across operands (so they broadcast).
using Labels = std::vector<int>;
constexpr int kEllipsisBase = 256;

struct Operand {
  Tensor t;
  Labels labels;  // one per dim of t
};

[[noreturn]] void bad_equation(std::string_view equation, const std::string& why) {
  throw ValueError(detail::str_cat("einsum: ", why, " in '", equation, "'"));
}

// One operand's subscripts, with its ellipsis expanded for a tensor of `rank` dims.
Labels parse_term(std::string_view term, int64_t rank, int64_t* ellipsis_dims,
                  std::string_view equation) {
  Labels labels;
  bool ellipsis = false;
  int64_t letters = 0;
  for (char ch : term)
    if (std::isalpha(static_cast<unsigned char>(ch))) ++letters;
  for (size_t i = 0; i < term.size(); ++i) {
    const char ch = term[i];
    if (ch == ' ') continue;
    if (ch == '.') {
      if (ellipsis || term.substr(i, 3) != "...") bad_equation(equation, "a malformed ellipsis");
      ellipsis = true;
      const int64_t n = rank - letters;
      if (n < 0) bad_equation(equation, "more subscripts than dims");
      *ellipsis_dims = std::max(*ellipsis_dims, n);
      for (int64_t k = 0; k < n; ++k) labels.push_back(kEllipsisBase + static_cast<int>(n - k));
      i += 2;
      continue;
    }
    if (!std::isalpha(static_cast<unsigned char>(ch))) {
      bad_equation(equation, detail::str_cat("the subscript '", ch, "' is not a letter"));
    }
    labels.push_back(ch);
  }
  if (static_cast<int64_t>(labels.size()) != rank) {
    bad_equation(equation, detail::str_cat("an operand of ", rank, " dims has ", labels.size(),
                                           " subscripts"));
  }
  return labels;
}

// The output's subscripts; its ellipsis stands for all the operands' ellipsis dims.
Labels parse_output(std::string_view term, int64_t ellipsis_dims, std::string_view equation) {
  Labels labels;
  for (size_t i = 0; i < term.size(); ++i) {
    const char ch = term[i];
    if (ch == ' ') continue;
    if (ch == '.' && term.substr(i, 3) == "...") {
      for (int64_t k = ellipsis_dims; k > 0; --k)
        labels.push_back(kEllipsisBase + static_cast<int>(k));
      i += 2;
    } else if (std::isalpha(static_cast<unsigned char>(ch))) {
      labels.push_back(ch);
    } else {
      bad_equation(equation, detail::str_cat("the output subscript '", ch, "' is not a letter"));
    }
  }
  return labels;
}

// The diagonal over every label an operand repeats, then the sum over the
// labels no one else needs.
Operand reduce_alone(Operand op, const std::map<int, int>& needed_elsewhere) {
  for (size_t a = 0; a < op.labels.size(); ++a) {
    for (size_t b = a + 1; b < op.labels.size();) {
      if (op.labels[b] != op.labels[a]) {
        ++b;
        continue;
      }
      const int64_t n = op.t.size(static_cast<int64_t>(a));
      KILN_CHECK(op.t.size(static_cast<int64_t>(b)) == n, ShapeError, "einsum: the repeated ",
                 "subscript has sizes ", n, " and ", op.t.size(static_cast<int64_t>(b)));
      Shape eye_shape(op.t.dim(), 1);
      eye_shape[a] = n;
      eye_shape[b] = n;
      const Tensor diagonal = eye(n, n, {.dtype = op.t.dtype(), .device = op.t.device()});
      op.t = sum(op.t * diagonal.reshape(eye_shape), {static_cast<int64_t>(b)});
      op.labels.erase(op.labels.begin() + static_cast<int64_t>(b));
    }
  }
  Dims alone;
  Labels kept;
  for (size_t d = 0; d < op.labels.size(); ++d) {
    if (needed_elsewhere.count(op.labels[d]))
      kept.push_back(op.labels[d]);
    else
      alone.push_back(static_cast<int64_t>(d));
  }
  if (!alone.empty()) op.t = sum(op.t, alone);
  op.labels = kept;
  return op;
}

int64_t label_size(const Operand& op, int label) {
  const auto at = std::find(op.labels.begin(), op.labels.end(), label);
  return at == op.labels.end() ? 1 : op.t.size(at - op.labels.begin());
}

// t permuted to the labels `order` (which it all holds), then reshaped to
// groups of them, each group one dim (of the product of its sizes, broadcast to `sizes`).
Tensor grouped(const Operand& op, const std::vector<Labels>& groups,
               const std::map<int, int64_t>& sizes) {
  Shape order, expanded, merged;
  for (const Labels& g : groups) {
    int64_t product = 1;
    for (int label : g) {
      order.push_back(std::find(op.labels.begin(), op.labels.end(), label) - op.labels.begin());
      expanded.push_back(sizes.at(label));
      product *= sizes.at(label);
    }
    merged.push_back(product);
  }
  return op.t.permute(order).expand(expanded).reshape(merged);
}

// a * b summed over the labels they share that `keep` does not hold.
Operand contract(const Operand& a, const Operand& b, const std::map<int, int>& keep) {
  Labels batch, a_only, b_only, summed;
  std::map<int, int64_t> sizes;
  for (int label : a.labels) {
    const bool in_b = std::count(b.labels.begin(), b.labels.end(), label) > 0;
    const int64_t sa = label_size(a, label), sb = label_size(b, label);
    KILN_CHECK(!in_b || sa == sb || sa == 1 || sb == 1, ShapeError, "einsum: a subscript has ",
               "sizes ", sa, " and ", sb, " in two operands");
    sizes[label] = std::max(sa, sb);
    if (!in_b)
      a_only.push_back(label);
    else if (keep.count(label))
      batch.push_back(label);
    else
      summed.push_back(label);
  }
  for (int label : b.labels) {
    sizes.emplace(label, label_size(b, label));
    if (std::count(a.labels.begin(), a.labels.end(), label) == 0) b_only.push_back(label);
  }
  const Tensor left = grouped(a, {batch, a_only, summed}, sizes);
  const Tensor right = grouped(b, {batch, summed, b_only}, sizes);
  Shape out;
  Labels labels;
  for (const Labels* g : {&batch, &a_only, &b_only}) {
    for (int label : *g) {
      out.push_back(sizes[label]);
      labels.push_back(label);
    }
  }
  return {matmul(left, right).reshape(out), labels};
}

}  // namespace

Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands) {
  KILN_CHECK(!operands.empty(), ValueError, "einsum: no operands for '", equation, "'");
  const size_t arrow = equation.find("->");
  const std::string_view inputs = equation.substr(0, arrow);
  std::vector<std::string_view> terms;
  for (size_t start = 0;;) {
    const size_t comma = inputs.find(',', start);
    terms.push_back(inputs.substr(start, comma == std::string_view::npos ? comma : comma - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  KILN_CHECK(terms.size() == operands.size(), ValueError, "einsum: '", equation, "' has ",
             terms.size(), " operand terms for ", operands.size(), " operands");
  std::vector<Operand> ops;
  int64_t ellipsis_dims = 0;
  std::map<int, int> count;
  for (size_t i = 0; i < terms.size(); ++i) {
    Operand op{operands[i], parse_term(terms[i], operands[i].dim(), &ellipsis_dims, equation)};
    for (int label : op.labels) ++count[label];
    ops.push_back(std::move(op));
  }
  Labels output;
  if (arrow == std::string_view::npos) {
    // Implicit output: the ellipsis dims, then the labels used once, in order.
    for (int64_t k = ellipsis_dims; k > 0; --k)
      output.push_back(kEllipsisBase + static_cast<int>(k));
    for (const auto& [label, n] : count)
      if (label < kEllipsisBase && n == 1) output.push_back(label);
  } else {
    output = parse_output(equation.substr(arrow + 2), ellipsis_dims, equation);
    for (int label : output) {
      KILN_CHECK(count.count(label), ValueError, "einsum: the output subscript '",
                 static_cast<char>(label), "' is in no operand of '", equation, "'");
      KILN_CHECK(std::count(output.begin(), output.end(), label) == 1, ValueError,
                 "einsum: the output repeats a subscript in '", equation, "'");
    }
  }
  std::map<int, int> wanted;  // labels the output or a later operand needs
  for (int label : output) ++wanted[label];
  auto needs_after = [&](size_t i) {
    std::map<int, int> need = wanted;
    for (size_t j = i + 1; j < ops.size(); ++j)
      for (int label : ops[j].labels) ++need[label];
    return need;
  };
  Operand acc = reduce_alone(ops[0], needs_after(0));
  for (size_t i = 1; i < ops.size(); ++i) {
    std::map<int, int> need = needs_after(i);
    std::map<int, int> need_b = need;
    for (int label : acc.labels) ++need_b[label];
    const Operand b = reduce_alone(ops[i], need_b);
    acc = contract(acc, b, need);
  }
  acc = reduce_alone(acc, wanted);
  Shape order;
  for (int label : output)
    order.push_back(std::find(acc.labels.begin(), acc.labels.end(), label) - acc.labels.begin());
  return acc.t.permute(order);
}

}  // namespace kiln
