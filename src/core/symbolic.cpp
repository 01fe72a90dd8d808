#include "core/symbolic.h"

#include <algorithm>
#include <limits>
#include <ostream>
#include <sstream>

#include "kiln/error.h"

namespace kiln::sym {
namespace {

constexpr int64_t kUnknown = std::numeric_limits<int64_t>::min();
constexpr int64_t kSymbolMin = 2;  // every symbol is at least 2
// ... and at most 2^62: no tensor of more elements can be made, so no larger
// size is admitted (a guard that holds up to it holds for every size).
constexpr int64_t kSymbolMax = int64_t{1} << 62;

void check_overflow(bool overflow) {
  if (overflow) throw ValueError("symbolic sizes: an expression's coefficient overflows int64");
}
int64_t add(int64_t a, int64_t b) {
  int64_t r = 0;
  check_overflow(__builtin_add_overflow(a, b, &r));
  return r;
}
int64_t mul(int64_t a, int64_t b) {
  int64_t r = 0;
  check_overflow(__builtin_mul_overflow(a, b, &r));
  return r;
}
int64_t floor_div(int64_t a, int64_t b) {
  if (b == 0) throw ValueError("symbolic sizes: division by zero");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

std::strong_ordering compare_atoms(const Atom& a, const Atom& b) noexcept {
  if (a.kind != b.kind) return a.kind <=> b.kind;
  if (a.kind == Atom::Kind::kSymbol) return a.symbol <=> b.symbol;
  if (auto c = *a.num <=> *b.num; c != 0) return c;
  return *a.den <=> *b.den;
}

using Factors = std::vector<std::shared_ptr<const Atom>>;

std::strong_ordering compare_factors(const Factors& a, const Factors& b) noexcept {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i)
    if (auto c = compare_atoms(*a[i], *b[i]); c != 0) return c;
  return a.size() <=> b.size();
}

Factors merge(const Factors& a, const Factors& b) {
  Factors out;
  out.reserve(a.size() + b.size());
  std::merge(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out),
             [](const auto& x, const auto& y) { return compare_atoms(*x, *y) < 0; });
  return out;
}

// a's factors without b's (a multiset difference), if b's are all in a.
bool divide_factors(const Factors& a, const Factors& b, Factors& out) {
  out.clear();
  size_t j = 0;
  for (const auto& f : a) {
    if (j < b.size() && compare_atoms(*f, *b[j]) == 0) {
      ++j;
    } else {
      out.push_back(f);
    }
  }
  return j == b.size();
}

int64_t atom_lower_bound(const Atom& a) {
  if (a.kind == Atom::Kind::kSymbol) return kSymbolMin;
  const int64_t n = a.num->lower_bound();
  if (n == kUnknown || n < 0) return kUnknown;
  if (a.den->is_constant()) return a.den->constant() > 0 ? n / a.den->constant() : kUnknown;
  return a.den->lower_bound() > 0 ? 0 : kUnknown;
}

int64_t atom_value(const Atom& a, std::span<const int64_t> values) {
  if (a.kind == Atom::Kind::kSymbol) {
    if (a.symbol < 0 || static_cast<size_t>(a.symbol) >= values.size())
      throw ValueError(detail::str_cat("symbolic sizes: no value for s", a.symbol));
    return values[static_cast<size_t>(a.symbol)];
  }
  return floor_div(a.num->eval(values), a.den->eval(values));
}

std::string atom_str(const Atom& a) {
  if (a.kind == Atom::Kind::kSymbol) return detail::str_cat("s", a.symbol);
  const auto wrap = [](const Expr& e) {
    const std::string s = e.str();
    const bool simple = e.terms().size() <= 1 && (e.terms().empty() || e.terms()[0].coeff >= 0);
    return simple ? s : "(" + s + ")";
  };
  return wrap(*a.num) + "//" + wrap(*a.den);
}

}  // namespace

Expr::Expr(int64_t constant) {
  if (constant != 0) terms_.push_back({constant, {}});
}

Expr Expr::symbol(int32_t id) {
  auto atom = std::make_shared<Atom>();
  atom->kind = Atom::Kind::kSymbol;
  atom->symbol = id;
  Expr e;
  e.terms_.push_back({1, {std::move(atom)}});
  return e;
}

Expr Expr::from_terms(std::vector<Term> terms) {
  std::sort(terms.begin(), terms.end(),
            [](const Term& a, const Term& b) { return compare_factors(a.factors, b.factors) < 0; });
  Expr e;
  for (Term& t : terms) {
    if (!e.terms_.empty() && compare_factors(e.terms_.back().factors, t.factors) == 0) {
      e.terms_.back().coeff = add(e.terms_.back().coeff, t.coeff);
    } else {
      e.terms_.push_back(std::move(t));
    }
  }
  std::erase_if(e.terms_, [](const Term& t) { return t.coeff == 0; });
  return e;
}

bool Expr::is_constant() const noexcept {
  return terms_.empty() || (terms_.size() == 1 && terms_[0].factors.empty());
}

int64_t Expr::constant() const noexcept {
  return !terms_.empty() && terms_[0].factors.empty() ? terms_[0].coeff : 0;
}

std::vector<int32_t> Expr::symbols() const {
  std::vector<int32_t> out;
  const auto visit = [&](const auto& self, const Expr& e) -> void {
    for (const Term& t : e.terms_) {
      for (const auto& f : t.factors) {
        if (f->kind == Atom::Kind::kSymbol) {
          out.push_back(f->symbol);
        } else {
          self(self, *f->num);
          self(self, *f->den);
        }
      }
    }
  };
  visit(visit, *this);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

int64_t Expr::eval(std::span<const int64_t> values) const {
  int64_t sum = 0;
  for (const Term& t : terms_) {
    int64_t p = t.coeff;
    for (const auto& f : t.factors) p = mul(p, atom_value(*f, values));
    sum = add(sum, p);
  }
  return sum;
}

int64_t Expr::lower_bound() const {
  // In 128 bits: a constant near 2^63 less a symbol's largest value stays exact.
  __int128 sum = 0;
  for (const Term& t : terms_) {
    if (t.factors.empty()) {
      sum += t.coeff;
      continue;
    }
    if (t.coeff < 0) {
      // -c*s is at least -c*kSymbolMax; products and quotients are not bounded here.
      if (t.factors.size() != 1 || t.factors[0]->kind != Atom::Kind::kSymbol) return kUnknown;
      sum += static_cast<__int128>(t.coeff) * kSymbolMax;
      continue;
    }
    __int128 p = t.coeff;
    for (const auto& f : t.factors) {
      const int64_t b = atom_lower_bound(*f);
      if (b == kUnknown) return kUnknown;
      p *= b;
      if (p > std::numeric_limits<int64_t>::max()) p = std::numeric_limits<int64_t>::max();
    }
    sum += p;
  }
  if (sum > std::numeric_limits<int64_t>::max()) return std::numeric_limits<int64_t>::max();
  if (sum <= kUnknown) return kUnknown;
  return static_cast<int64_t>(sum);
}

std::string Expr::str() const {
  if (terms_.empty()) return "0";
  std::ostringstream os;
  // The constant term last: "s0 + 1", not "1 + s0".
  std::vector<const Term*> order;
  for (const Term& t : terms_)
    if (!t.factors.empty()) order.push_back(&t);
  if (terms_[0].factors.empty()) order.push_back(&terms_[0]);
  bool first = true;
  for (const Term* t : order) {
    int64_t c = t->coeff;
    if (first) {
      if (c < 0) os << "-";
    } else {
      os << (c < 0 ? " - " : " + ");
    }
    c = c < 0 ? -c : c;
    if (t->factors.empty()) {
      os << c;
    } else {
      if (c != 1) os << c << "*";
      for (size_t i = 0; i < t->factors.size(); ++i)
        os << (i ? "*" : "") << atom_str(*t->factors[i]);
    }
    first = false;
  }
  return os.str();
}

Expr operator+(const Expr& a, const Expr& b) {
  std::vector<Expr::Term> terms = a.terms_;
  terms.insert(terms.end(), b.terms_.begin(), b.terms_.end());
  return Expr::from_terms(std::move(terms));
}

Expr operator-(const Expr& a) {
  Expr e = a;
  for (Expr::Term& t : e.terms_) t.coeff = mul(t.coeff, -1);
  return e;
}

Expr operator-(const Expr& a, const Expr& b) { return a + (-b); }

Expr operator*(const Expr& a, const Expr& b) {
  std::vector<Expr::Term> terms;
  terms.reserve(a.terms_.size() * b.terms_.size());
  for (const Expr::Term& x : a.terms_)
    for (const Expr::Term& y : b.terms_)
      terms.push_back({mul(x.coeff, y.coeff), merge(x.factors, y.factors)});
  return Expr::from_terms(std::move(terms));
}

Expr floordiv(const Expr& a, const Expr& b) {
  if (b.is_constant()) {
    const int64_t c = b.constant();
    if (c == 0) throw ValueError("symbolic sizes: division by zero");
    if (a.is_constant()) return Expr(floor_div(a.constant(), c));
    // The terms c divides come out exactly: (c*k*X + r) // c = k*X + r // c.
    std::vector<Expr::Term> exact, rest;
    for (const Expr::Term& t : a.terms_) {
      if (t.coeff % c == 0) {
        exact.push_back({t.coeff / c, t.factors});
      } else {
        rest.push_back(t);
      }
    }
    Expr out = Expr::from_terms(std::move(exact));
    if (rest.empty()) return out;
    const Expr r = Expr::from_terms(std::move(rest));
    if (r.is_constant()) return out + Expr(floor_div(r.constant(), c));
    // x // a // c is x // (a*c) for positive a and c.
    if (c > 0 && r.terms_.size() == 1 && r.terms_[0].coeff == 1 &&
        r.terms_[0].factors.size() == 1) {
      const Atom& f = *r.terms_[0].factors[0];
      if (f.kind == Atom::Kind::kFloorDiv && f.den->is_constant() && f.den->constant() > 0)
        return out + floordiv(*f.num, Expr(mul(f.den->constant(), c)));
    }
    auto atom = std::make_shared<Atom>();
    atom->kind = Atom::Kind::kFloorDiv;
    atom->num = std::make_shared<const Expr>(r);
    atom->den = std::make_shared<const Expr>(b);
    Expr q;
    q.terms_.push_back({1, {std::move(atom)}});
    return out + q;
  }
  // A monomial divisor that divides every term exactly.
  if (b.terms_.size() == 1) {
    const Expr::Term& d = b.terms_[0];
    std::vector<Expr::Term> terms;
    Factors f;
    bool exact = true;
    for (const Expr::Term& t : a.terms_) {
      if (t.coeff % d.coeff != 0 || !divide_factors(t.factors, d.factors, f)) {
        exact = false;
        break;
      }
      terms.push_back({t.coeff / d.coeff, f});
    }
    if (exact) return Expr::from_terms(std::move(terms));
  }
  if (a == b) return Expr(1);
  auto atom = std::make_shared<Atom>();
  atom->kind = Atom::Kind::kFloorDiv;
  atom->num = std::make_shared<const Expr>(a);
  atom->den = std::make_shared<const Expr>(b);
  Expr q;
  q.terms_.push_back({1, {std::move(atom)}});
  return q;
}

Expr mod(const Expr& a, const Expr& b) { return a - b * floordiv(a, b); }

bool operator==(const Expr& a, const Expr& b) noexcept { return (a <=> b) == 0; }

std::strong_ordering operator<=>(const Expr& a, const Expr& b) noexcept {
  const size_t n = std::min(a.terms_.size(), b.terms_.size());
  for (size_t i = 0; i < n; ++i) {
    if (auto c = compare_factors(a.terms_[i].factors, b.terms_[i].factors); c != 0) return c;
    if (auto c = a.terms_[i].coeff <=> b.terms_[i].coeff; c != 0) return c;
  }
  return a.terms_.size() <=> b.terms_.size();
}

std::ostream& operator<<(std::ostream& os, const Expr& e) { return os << e.str(); }

// --- guards ----------------------------------------------------------------

bool Guard::holds(std::span<const int64_t> values) const {
  const int64_t v = expr.eval(values);
  switch (rel) {
    case Rel::kEq:
      return v == 0;
    case Rel::kNe:
      return v != 0;
    case Rel::kGe:
      return v >= 0;
  }
  return false;
}

std::string Guard::str() const {
  // Terms with a negative coefficient go to the right: s0 - 16 == 0 reads s0 == 16.
  Expr left, right;
  for (const Expr::Term& t : expr.terms()) {
    Expr one;
    one = Expr(t.coeff < 0 ? -t.coeff : t.coeff);
    for (const auto& f : t.factors) {
      Expr a;
      if (f->kind == Atom::Kind::kSymbol) {
        a = Expr::symbol(f->symbol);
      } else {
        a = floordiv(*f->num, *f->den);
      }
      one = one * a;
    }
    if (t.coeff < 0) {
      right = right + one;
    } else {
      left = left + one;
    }
  }
  const char* op = rel == Rel::kEq ? " == " : rel == Rel::kNe ? " != " : " >= ";
  return left.str() + op + right.str();
}

namespace {
thread_local GuardScope* t_scope = nullptr;
}

GuardScope::GuardScope() noexcept : previous_(t_scope) { t_scope = this; }
GuardScope::~GuardScope() { t_scope = previous_; }
GuardScope* GuardScope::active() noexcept { return t_scope; }

namespace {

// Whether e >= 0 for every symbol value: its lower bound, or e is a
// remainder a - k*(a//k) (k > 0, at least 0) plus what is at least 0.
bool always_nonnegative(const Expr& e) {
  const int64_t lb = e.lower_bound();
  if (lb != kUnknown && lb >= 0) return true;
  for (const Expr::Term& t : e.terms()) {
    for (const auto& f : t.factors) {
      if (f->kind != Atom::Kind::kFloorDiv || !f->den->is_constant() || f->den->constant() <= 0)
        continue;
      const int64_t rest = (e - mod(*f->num, *f->den)).lower_bound();
      if (rest != kUnknown && rest >= 0) return true;
    }
  }
  return false;
}

}  // namespace

void GuardScope::add(Guard g) {
  const int64_t lb = g.expr.lower_bound();
  if (g.rel == Guard::Rel::kGe && always_nonnegative(g.expr)) return;
  if (g.rel == Guard::Rel::kNe && lb != kUnknown && lb > 0) return;
  if (g.origin.empty()) g.origin = origin_;
  // e == 0 and -e == 0 are one guard: its first term that names a symbol
  // counts up (s0 == s2, not s2 == s0).
  if (g.rel != Guard::Rel::kGe) {
    for (const Expr::Term& t : g.expr.terms()) {
      if (t.factors.empty()) continue;
      if (t.coeff < 0) g.expr = -g.expr;
      break;
    }
  }
  if (std::find(guards_.begin(), guards_.end(), g) != guards_.end()) return;
  guards_.push_back(std::move(g));
}

// --- SymInt ----------------------------------------------------------------

namespace {

SymInt make(int64_t hint, Expr e) {
  if (e.is_constant()) return SymInt(e.constant());
  return SymInt(hint, std::move(e));
}

void guard(Expr e, Guard::Rel rel) {
  if (GuardScope* scope = GuardScope::active()) scope->add(Guard{std::move(e), rel, {}});
}

// Whether e >= 0, from the hint, guarded when the expression does not decide it.
bool nonnegative(const Expr& e, int64_t hint) {
  if (e.is_constant()) return e.constant() >= 0;
  const int64_t lb = e.lower_bound();
  if (lb != kUnknown && lb >= 0) return true;
  const bool yes = hint >= 0;
  guard(yes ? e : -e - Expr(1), Guard::Rel::kGe);
  return yes;
}

}  // namespace

SymInt::SymInt(int64_t hint, Expr expr) : hint_(hint) {
  if (!expr.is_constant()) expr_ = std::make_shared<const Expr>(std::move(expr));
}

int64_t SymInt::specialize() const {
  if (expr_) guard(*expr_ - Expr(hint_), Guard::Rel::kEq);
  return hint_;
}

SymInt operator+(const SymInt& a, const SymInt& b) {
  const int64_t h = add(a.hint_, b.hint_);
  if (!a.expr_ && !b.expr_) return SymInt(h);
  return make(h, a.expr() + b.expr());
}

SymInt operator-(const SymInt& a, const SymInt& b) {
  const int64_t h = add(a.hint_, mul(b.hint_, -1));
  if (!a.expr_ && !b.expr_) return SymInt(h);
  return make(h, a.expr() - b.expr());
}

SymInt operator-(const SymInt& a) { return SymInt(0) - a; }

SymInt operator*(const SymInt& a, const SymInt& b) {
  const int64_t h = mul(a.hint_, b.hint_);
  if (!a.expr_ && !b.expr_) return SymInt(h);
  return make(h, a.expr() * b.expr());
}

SymInt operator/(const SymInt& a, const SymInt& b) {
  if (b.hint_ == 0) throw ValueError("symbolic sizes: division by zero");
  const int64_t h = a.hint_ / b.hint_;
  if (!a.expr_ && !b.expr_) return SymInt(h);
  // Truncation is floor division where the signs agree: guard them.
  const bool an = nonnegative(a.expr(), a.hint_);
  const bool bn = nonnegative(b.expr(), b.hint_);
  if (an != bn) {
    // Rare in shape rules: fix the value.
    a.specialize();
    b.specialize();
    return SymInt(h);
  }
  return make(h, floordiv(a.expr(), b.expr()));
}

SymInt operator%(const SymInt& a, const SymInt& b) { return a - (a / b) * b; }

bool operator==(const SymInt& a, const SymInt& b) {
  const bool eq = a.hint_ == b.hint_;
  if (!a.expr_ && !b.expr_) return eq;
  const Expr d = a.expr() - b.expr();
  if (d.is_constant()) return d.constant() == 0;
  const int64_t lo = d.lower_bound(), hi = (-d).lower_bound();
  if ((lo != kUnknown && lo > 0) || (hi != kUnknown && hi > 0)) return false;
  guard(d, eq ? Guard::Rel::kEq : Guard::Rel::kNe);
  return eq;
}

bool operator<(const SymInt& a, const SymInt& b) {
  const bool lt = a.hint_ < b.hint_;
  if (!a.expr_ && !b.expr_) return lt;
  // a < b  <=>  b - a - 1 >= 0.
  const Expr d = b.expr() - a.expr() - Expr(1);
  if (d.is_constant()) return d.constant() >= 0;
  const int64_t lo = d.lower_bound(), hi = (-d - Expr(1)).lower_bound();
  if (lo != kUnknown && lo >= 0) return true;
  if (hi != kUnknown && hi >= 0) return false;
  guard(lt ? d : -d - Expr(1), Guard::Rel::kGe);
  return lt;
}

std::ostream& operator<<(std::ostream& os, const SymInt& v) { return os << v.hint(); }

std::ostream& operator<<(std::ostream& os, const SymShape& s) {
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i].hint();
  return os << "]";
}

SymShape constants(const std::vector<int64_t>& s) { return SymShape(s.begin(), s.end()); }

std::vector<int64_t> hints(const SymShape& s) {
  std::vector<int64_t> out;
  out.reserve(s.size());
  for (const SymInt& v : s) out.push_back(v.hint());
  return out;
}

std::string str(const SymShape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += s[i].is_symbolic() ? s[i].expr().str() : std::to_string(s[i].hint());
  }
  return out + "]";
}

}  // namespace kiln::sym
