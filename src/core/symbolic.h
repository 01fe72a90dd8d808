// Symbolic sizes (docs/architecture.md, "Symbolic sizes"): integer expressions over symbols
// s0, s1, ... that stand for the dynamic dims of a compiled function's arguments.
//
// An Expr is a polynomial with integer coefficients over atoms (symbols and
// floor divisions that do not divide exactly), kept in a canonical form, so
// that two expressions that are equal as polynomials compare equal. A
// remainder is written a - b * (a // b). Every symbol is at least 2: sizes 0
// and 1 are never symbolic (a 1 broadcasts, a 0 is empty), as in PyTorch.
//
// A SymInt is a size as a shape rule computes it: its value for the traced
// sizes (the hint) and, when it depends on a symbol, its expression. Shape
// rules are written once, as templates over the size type (int64_t for eager
// mode, SymInt for the compiler): arithmetic on SymInts builds expressions,
// and a comparison answers from the hints and, when the expressions alone do
// not decide it, records a guard (the condition under which the rule takes
// the same branch for other values of the symbols) in the GuardScope active
// on the thread.
#pragma once

#include <compare>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kiln::sym {

class Expr;

// A factor of a term: a symbol, or a floor division that does not divide exactly.
struct Atom {
  enum class Kind : uint8_t { kSymbol, kFloorDiv };
  Kind kind = Kind::kSymbol;
  int32_t symbol = 0;                    // kSymbol
  std::shared_ptr<const Expr> num, den;  // kFloorDiv: num // den
};

class Expr {
 public:
  Expr() = default;        // 0
  Expr(int64_t constant);  // NOLINT(google-explicit-constructor): constants mix freely
  static Expr symbol(int32_t id);

  bool is_constant() const noexcept;
  // The constant term (the whole value when is_constant()).
  int64_t constant() const noexcept;
  // The symbols it names, sorted, each once.
  std::vector<int32_t> symbols() const;

  // Its value for symbol values `values` (by id); floor division as in Python.
  int64_t eval(std::span<const int64_t> values) const;
  // A lower bound given that every symbol is in [2, 2^62]; nullopt-like
  // INT64_MIN when none is known (a negative coefficient, say).
  int64_t lower_bound() const;

  // "s0", "64*s0*s1 + 3", "(s0 - 1)//2 + 1".
  std::string str() const;

  friend Expr operator+(const Expr& a, const Expr& b);
  friend Expr operator-(const Expr& a, const Expr& b);
  friend Expr operator*(const Expr& a, const Expr& b);
  friend Expr operator-(const Expr& a);
  // Floor division and its remainder (a - b * (a // b)); b's hint is positive where they are used.
  friend Expr floordiv(const Expr& a, const Expr& b);
  friend Expr mod(const Expr& a, const Expr& b);

  friend bool operator==(const Expr& a, const Expr& b) noexcept;
  friend std::strong_ordering operator<=>(const Expr& a, const Expr& b) noexcept;

  struct Term {
    int64_t coeff = 0;
    std::vector<std::shared_ptr<const Atom>> factors;  // sorted; empty for the constant term
  };
  const std::vector<Term>& terms() const noexcept { return terms_; }

 private:
  static Expr from_terms(std::vector<Term> terms);
  std::vector<Term> terms_;  // sorted by factors, no zero coefficient
};

std::ostream& operator<<(std::ostream& os, const Expr& e);

// A condition on the symbols: expr == 0, expr != 0 or expr >= 0.
struct Guard {
  enum class Rel : uint8_t { kEq, kNe, kGe };
  Expr expr;
  Rel rel = Rel::kEq;
  std::string origin;  // where it was made ("add", "the function's read of size(1) of %0")

  bool holds(std::span<const int64_t> values) const;
  // "s0 == 16", "s0 - s1 != 0", "s0 >= 3": the terms moved to read naturally.
  std::string str() const;
  friend bool operator==(const Guard& a, const Guard& b) noexcept {
    return a.rel == b.rel && a.expr == b.expr;
  }
};

// Collects the guards comparisons make on this thread while alive; scopes
// nest (the innermost collects).
class GuardScope {
 public:
  GuardScope() noexcept;
  ~GuardScope();
  GuardScope(const GuardScope&) = delete;
  GuardScope& operator=(const GuardScope&) = delete;

  static GuardScope* active() noexcept;
  // Adds g unless it is already there or holds for every symbol value >= 2.
  void add(Guard g);
  // What new guards are said to come from.
  void set_origin(std::string origin) { origin_ = std::move(origin); }
  const std::vector<Guard>& guards() const noexcept { return guards_; }
  std::vector<Guard> take() { return std::move(guards_); }

 private:
  std::vector<Guard> guards_;
  std::string origin_;
  GuardScope* previous_ = nullptr;
};

class SymInt {
 public:
  SymInt(int64_t value = 0) noexcept : hint_(value) {}  // NOLINT(google-explicit-constructor)
  SymInt(int64_t hint, Expr expr);
  // A value made from another's parts (hint() and expr_ptr()).
  SymInt(int64_t hint, std::shared_ptr<const Expr> expr) noexcept
      : hint_(hint), expr_(std::move(expr)) {}

  int64_t hint() const noexcept { return hint_; }
  bool is_symbolic() const noexcept { return expr_ != nullptr; }
  Expr expr() const { return expr_ ? *expr_ : Expr(hint_); }
  const std::shared_ptr<const Expr>& expr_ptr() const noexcept { return expr_; }
  // The hint, guarding that the expression equals it (the caller needs a
  // plain number: the graph is specialized to this value).
  int64_t specialize() const;

  SymInt& operator+=(const SymInt& o) { return *this = *this + o; }
  SymInt& operator-=(const SymInt& o) { return *this = *this - o; }
  SymInt& operator*=(const SymInt& o) { return *this = *this * o; }
  SymInt& operator/=(const SymInt& o) { return *this = *this / o; }

  friend SymInt operator+(const SymInt& a, const SymInt& b);
  friend SymInt operator-(const SymInt& a, const SymInt& b);
  friend SymInt operator*(const SymInt& a, const SymInt& b);
  // C++'s division and remainder, on sizes: the operands' signs are guarded
  // where they are not known, so that truncation and floor division agree.
  friend SymInt operator/(const SymInt& a, const SymInt& b);
  friend SymInt operator%(const SymInt& a, const SymInt& b);
  friend SymInt operator-(const SymInt& a);

  friend bool operator==(const SymInt& a, const SymInt& b);
  friend bool operator!=(const SymInt& a, const SymInt& b) { return !(a == b); }
  friend bool operator<(const SymInt& a, const SymInt& b);
  friend bool operator>(const SymInt& a, const SymInt& b) { return b < a; }
  friend bool operator<=(const SymInt& a, const SymInt& b) { return !(b < a); }
  friend bool operator>=(const SymInt& a, const SymInt& b) { return !(a < b); }

 private:
  int64_t hint_ = 0;
  std::shared_ptr<const Expr> expr_;  // null: the constant hint_
};

// The hint, for error messages (a shape rule that throws in symbolic mode
// throws for the traced sizes too).
std::ostream& operator<<(std::ostream& os, const SymInt& v);

using SymShape = std::vector<SymInt>;
std::ostream& operator<<(std::ostream& os, const SymShape& s);
std::vector<int64_t> hints(const SymShape& s);
// Plain numbers as constant SymInts.
SymShape constants(const std::vector<int64_t>& s);
// "[s0, 64]"
std::string str(const SymShape& s);

// The plain number of a size of either kind (the hint of a SymInt,
// specialized: see SymInt::specialize).
inline int64_t as_int(int64_t v) noexcept { return v; }
inline int64_t as_int(const SymInt& v) { return v.specialize(); }
// The hint, unguarded: for what does not decide the rule's results (an
// attribute a rule canonicalizes, which symbolic mode does not keep).
inline int64_t hint_of(int64_t v) noexcept { return v; }
inline int64_t hint_of(const SymInt& v) noexcept { return v.hint(); }
inline std::vector<int64_t> hint_of(const std::vector<int64_t>& v) { return v; }
inline std::vector<int64_t> hint_of(const SymShape& v) { return hints(v); }

}  // namespace kiln::sym

namespace kiln {
using sym::SymInt;
using sym::SymShape;
}  // namespace kiln
