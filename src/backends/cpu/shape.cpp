// CPU kernels of the shape and indexing ops. They only move elements, so they
// are instantiated per element size (1, 2, 4, 8 bytes), not per dtype: Half and
// int16 share a kernel, bool and uint8 another. Contiguous blocks go through
// memcpy; loops split across OpenMP threads above kParallelGrain elements.
// Index values are validated on the calling thread before any parallel loop.
#include <algorithm>
#include <array>
#include <cstring>
#include <optional>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "backends/element_size.h"
#include "core/shape_util.h"
#include "ops/dispatch.h"

namespace kiln::backend {
namespace cpu {
namespace {

// Walks the multi-indices of sizes in row-major order, keeping the element
// offset of each of N strided operands. Every size must be positive.
template <size_t N>
class StridedCursor {
 public:
  StridedCursor(const Shape& sizes, const std::array<Shape, N>& strides, int64_t start)
      : sizes_(sizes), strides_(strides), idx_(sizes.size(), 0) {
    for (size_t d = sizes.size(); d-- > 0;) {
      idx_[d] = start % sizes[d];
      start /= sizes[d];
    }
    for (size_t k = 0; k < N; ++k) {
      off_[k] = 0;
      for (size_t d = 0; d < sizes.size(); ++d) off_[k] += idx_[d] * strides_[k][d];
    }
  }
  int64_t offset(size_t k) const noexcept { return off_[k]; }
  void next() noexcept {
    for (size_t d = sizes_.size(); d-- > 0;) {
      for (size_t k = 0; k < N; ++k) off_[k] += strides_[k][d];
      if (++idx_[d] < sizes_[d]) return;
      for (size_t k = 0; k < N; ++k) off_[k] -= strides_[k][d] * sizes_[d];
      idx_[d] = 0;
    }
  }

 private:
  Shape sizes_;
  std::array<Shape, N> strides_;
  Shape idx_;
  std::array<int64_t, N> off_{};
};

// A copy between two strided layouts of the same sizes, with size-1 dims
// dropped and dims merged where both layouts are contiguous across them.
struct CopyPlan {
  Shape sizes, dst_strides, src_strides;
};

CopyPlan plan_copy(const Shape& sizes, const Shape& dst_strides, const Shape& src_strides) {
  CopyPlan p;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    if (!p.sizes.empty() && p.dst_strides.back() == dst_strides[d] * sizes[d] &&
        p.src_strides.back() == src_strides[d] * sizes[d]) {
      p.sizes.back() *= sizes[d];
      p.dst_strides.back() = dst_strides[d];
      p.src_strides.back() = src_strides[d];
      continue;
    }
    p.sizes.push_back(sizes[d]);
    p.dst_strides.push_back(dst_strides[d]);
    p.src_strides.push_back(src_strides[d]);
  }
  if (p.sizes.empty()) p = {{1}, {1}, {1}};
  return p;
}

// dst[i] = src[i * ss] for n elements (ss may be 0 or negative); dst contiguous.
template <typename E>
void copy_run(E* dst, const E* src, int64_t ss, int64_t n) {
  if (ss == 1 && n <= 8) {  // a call to memcpy costs more than a few moves
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
  } else if (ss == 1) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(E));
  } else if (ss == 0) {
    std::fill(dst, dst + n, *src);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i * ss];
  }
}

template <typename E>
void copy_planned(E* dst, const E* src, const CopyPlan& p) {
  const int64_t inner = p.sizes.back();
  const int64_t ds = p.dst_strides.back(), ss = p.src_strides.back();
  const Shape outer(p.sizes.begin(), p.sizes.end() - 1);
  const Shape outer_ds(p.dst_strides.begin(), p.dst_strides.end() - 1);
  const Shape outer_ss(p.src_strides.begin(), p.src_strides.end() - 1);
  const int64_t numel = inner * shape_numel(outer);
  parallel_for(numel, kParallelGrain, [&](int64_t begin, int64_t end) {
    StridedCursor<2> rows(outer, {outer_ds, outer_ss}, begin / inner);
    int64_t col = begin % inner;
    for (int64_t pos = begin; pos < end; col = 0, rows.next()) {
      const int64_t n = std::min(inner - col, end - pos);
      E* d = dst + rows.offset(0) + col * ds;
      const E* s = src + rows.offset(1) + col * ss;
      if (ds == 1) {
        copy_run(d, s, ss, n);
      } else {
        for (int64_t i = 0; i < n; ++i) d[i * ds] = s[i * ss];
      }
      pos += n;
    }
  });
}

// Copies elements of the given sizes between two strided layouts (source
// strides may be 0 or negative); pointers are to the first element.
void copy_strided(void* dst, const Shape& dst_strides, const void* src, const Shape& src_strides,
                  const Shape& sizes, size_t element_size) {
  if (shape_numel(sizes) == 0) return;
  const CopyPlan plan = plan_copy(sizes, dst_strides, src_strides);
  visit_element_size(element_size, [&]<typename E>() {
    copy_planned(static_cast<E*>(dst), static_cast<const E*>(src), plan);
  });
}

void copy_tensor(const Tensor& dst, const Tensor& src) {
  copy_strided(dst.data_ptr(), dst.strides(), src.data_ptr(), src.strides(), src.sizes(),
               src.element_size());
}

bool same_view(const Tensor& a, const Tensor& b) {
  return a.shares_storage(b) && a.storage_offset() == b.storage_offset() &&
         a.strides() == b.strides();
}

char* byte_ptr(const Tensor& t) { return static_cast<char*>(t.data_ptr()); }

// The first value of p[0, n) outside [0, size), if any. The min/max pass
// vectorizes; only a failing call searches again.
std::optional<int64_t> find_bad_index(const int64_t* p, int64_t n, int64_t size) {
  if (n == 0) return std::nullopt;
  int64_t lo = p[0], hi = p[0];
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, p[i]);
    hi = std::max(hi, p[i]);
  }
  if (lo >= 0 && hi < size) return std::nullopt;
  return *std::find_if(p, p + n, [size](int64_t v) { return v < 0 || v >= size; });
}

void check_indices(std::string_view op, const Tensor& index, int64_t dim, int64_t size) {
  if (auto bad = find_bad_index(index.data<int64_t>(), index.numel(), size)) {
    throw IndexError(
        detail::str_cat(op, ": index ", *bad, " is out of range for dim ", dim, " of size ", size));
  }
}

// Sizes and strides of t with a 0-dim tensor read as a 1-D tensor of one element.
Shape sizes_1d(const Tensor& t) { return t.dim() == 0 ? Shape{1} : t.sizes(); }
Shape strides_1d(const Tensor& t) { return t.dim() == 0 ? Shape{1} : t.strides(); }

Shape without_dim(Shape s, int64_t dim) {
  s.erase(s.begin() + dim);
  return s;
}

int64_t product(const Shape& s, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end && i < s.size(); ++i) n *= s[i];
  return n;
}

// --- cat and stack --------------------------------------------------------------

// One input of a concatenation, as sizes and strides of the output's rank.
struct Piece {
  const char* data;
  Shape sizes, strides;
};

bool contiguous_layout(const Shape& sizes, const Shape& strides) {
  int64_t expected = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] != 1 && strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

// Contiguous pieces with many outer rows: one parallel loop over the rows, each
// row a memcpy per piece. Otherwise each piece is one strided copy into its
// slab of the output, parallel inside.
void concat(const Tensor& out, const std::vector<Piece>& pieces, int64_t dim) {
  if (out.numel() == 0) return;
  const size_t es = out.element_size();
  const int64_t outer = product(out.sizes(), 0, static_cast<size_t>(dim));
  bool all_contiguous = true;
  for (const auto& p : pieces)
    all_contiguous = all_contiguous && contiguous_layout(p.sizes, p.strides);
  if (all_contiguous && outer >= omp_get_max_threads()) {
    std::vector<int64_t> block;  // elements per outer row of each piece
    for (const auto& p : pieces) block.push_back(shape_numel(p.sizes) / outer);
    const int64_t row = out.numel() / outer;
    visit_element_size(es, [&]<typename E>() {
      E* base = static_cast<E*>(out.data_ptr());
      parallel_for(outer, std::max<int64_t>(1, kParallelGrain / row), [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o) {
          E* d = base + o * row;
          for (size_t k = 0; k < pieces.size(); ++k) {
            copy_run(d, reinterpret_cast<const E*>(pieces[k].data) + o * block[k], 1, block[k]);
            d += block[k];
          }
        }
      });
    });
    return;
  }
  int64_t start = 0;
  for (const auto& p : pieces) {
    if (shape_numel(p.sizes) == 0) continue;
    char* d = byte_ptr(out) + start * out.strides()[dim] * static_cast<int64_t>(es);
    copy_strided(d, out.strides(), p.data, p.strides, p.sizes, es);
    start += p.sizes[dim];
  }
}

void cat_kernel(const KernelCall& c) {
  std::vector<Piece> pieces;
  for (const Tensor& t : c.inputs) {
    // Skipped inputs ([0] among tensors of another rank) hold no elements.
    if (t.numel() == 0) continue;
    pieces.push_back({byte_ptr(t), t.sizes(), t.strides()});
  }
  concat(c.out(), pieces, c.attrs.i(0));
}

void stack_kernel(const KernelCall& c) {
  const int64_t dim = c.attrs.i(0);
  std::vector<Piece> pieces;
  for (const Tensor& t : c.inputs) {
    Piece p{byte_ptr(t), t.sizes(), t.strides()};
    p.sizes.insert(p.sizes.begin() + dim, 1);
    p.strides.insert(p.strides.begin() + dim, 0);
    pieces.push_back(std::move(p));
  }
  concat(c.out(), pieces, dim);
}

// --- indexing -------------------------------------------------------------------

void index_select_kernel(const KernelCall& c) {
  const Tensor x = c.in(0).contiguous();
  const Tensor index = c.in(1).to(kInt64).contiguous();
  const int64_t dim = c.attrs.i(0);
  const Shape xs = sizes_1d(x);
  const int64_t n = xs[dim];
  check_indices("index_select", index, dim, n);
  const int64_t outer = product(xs, 0, static_cast<size_t>(dim));
  const int64_t inner = product(xs, static_cast<size_t>(dim) + 1, xs.size());
  const int64_t k = index.numel();
  if (c.out().numel() == 0) return;
  const int64_t* iv = index.data<int64_t>();
  visit_element_size(x.element_size(), [&]<typename E>() {
    const E* src = static_cast<const E*>(x.data_ptr());
    E* dst = static_cast<E*>(c.out().data_ptr());
    const int64_t grain = std::max<int64_t>(1, kParallelGrain / inner);
    parallel_for(outer * k, grain, [&](int64_t b, int64_t e) {
      int64_t o = b / k, j = b % k;  // output row r is (o, j)
      for (int64_t r = b; r < e; ++r) {
        copy_run(dst + r * inner, src + (o * n + iv[j]) * inner, 1, inner);
        if (++j == k) j = 0, ++o;
      }
    });
  });
}

// Rows of the index along its last dim; the input's offset of a row leaves out
// dim, whose coordinate comes from the index values.
void gather_kernel(const KernelCall& c) {
  const Tensor& x = c.in(0);
  const Tensor index = c.in(1).contiguous();
  const int64_t dim = c.attrs.i(0);
  const Shape xs = sizes_1d(x), xst = strides_1d(x), is = sizes_1d(index);
  check_indices("gather", index, dim, xs[dim]);
  if (index.numel() == 0) return;
  const size_t last = is.size() - 1;
  const int64_t inner = is[last];
  Shape row_strides(xst.begin(), xst.begin() + static_cast<int64_t>(last));
  if (static_cast<size_t>(dim) < last) row_strides[dim] = 0;
  const Shape row_sizes(is.begin(), is.begin() + static_cast<int64_t>(last));
  const int64_t dim_stride = xst[dim], last_stride = xst[last];
  const bool along_last = static_cast<size_t>(dim) == last;
  const int64_t* iv = index.data<int64_t>();
  visit_element_size(x.element_size(), [&]<typename E>() {
    const E* src = static_cast<const E*>(x.data_ptr());
    E* dst = static_cast<E*>(c.out().data_ptr());
    const int64_t rows = index.numel() / inner;
    parallel_for(rows, std::max<int64_t>(1, kParallelGrain / inner), [&](int64_t b, int64_t e) {
      StridedCursor<1> cursor(row_sizes, {row_strides}, b);
      for (int64_t r = b; r < e; ++r, cursor.next()) {
        const E* s = src + cursor.offset(0);
        const int64_t* v = iv + r * inner;
        E* d = dst + r * inner;
        if (along_last) {
          for (int64_t j = 0; j < inner; ++j) d[j] = s[v[j] * dim_stride];
        } else {
          for (int64_t j = 0; j < inner; ++j) d[j] = s[v[j] * dim_stride + j * last_stride];
        }
      }
    });
  });
}

// Lines of the index along dim run on one thread each, in index order: two
// writes to one output element can only come from the same line, so the last
// one in row-major order wins, as in the reference.
void scatter_kernel(const KernelCall& c) {
  const Tensor& out = c.out();
  const Tensor index = c.in(1).contiguous();
  const Tensor& src = c.in(2);
  const int64_t dim = c.attrs.i(0);
  check_indices("scatter", index, dim, sizes_1d(out)[dim]);
  if (!same_view(out, c.in(0))) copy_tensor(out, c.in(0));
  if (index.numel() == 0) return;
  const Shape is = sizes_1d(index), ist = strides_1d(index);
  const Shape sst = strides_1d(src), ost = strides_1d(out);
  const Shape line_sizes = without_dim(is, dim);
  const std::array<Shape, 3> line_strides = {without_dim(ist, dim), without_dim(sst, dim),
                                             without_dim(ost, dim)};
  const int64_t len = is[dim];
  const int64_t istep = ist[dim], sstep = sst[dim], ostep = ost[dim];
  const int64_t* iv = index.data<int64_t>();
  visit_element_size(out.element_size(), [&]<typename E>() {
    const E* s = static_cast<const E*>(src.data_ptr());
    E* d = static_cast<E*>(out.data_ptr());
    const int64_t lines = index.numel() / len;
    parallel_for(lines, std::max<int64_t>(1, kParallelGrain / len), [&](int64_t b, int64_t e) {
      StridedCursor<3> cursor(line_sizes, line_strides, b);
      for (int64_t l = b; l < e; ++l, cursor.next()) {
        const int64_t* v = iv + cursor.offset(0);
        const E* sl = s + cursor.offset(1);
        E* dl = d + cursor.offset(2);
        for (int64_t j = 0; j < len; ++j) dl[v[j * istep] * ostep] = sl[j * sstep];
      }
    });
  });
}

// --- copies through a rearranged view ---------------------------------------------

// The output viewed as [r0, x0, r1, x1, ...] is x broadcast along the r dims.
void repeat_kernel(const KernelCall& c) {
  const Tensor& x = c.in(0);
  const auto& repeats = c.attrs.ints(0);
  const size_t lead = repeats.size() - static_cast<size_t>(x.dim());
  Shape sizes, src_strides;
  for (size_t i = 0; i < repeats.size(); ++i) {
    sizes.push_back(repeats[i]);
    src_strides.push_back(0);
    if (i < lead) continue;
    sizes.push_back(x.sizes()[i - lead]);
    src_strides.push_back(x.strides()[i - lead]);
  }
  copy_strided(c.out().data_ptr(), ops::contiguous_strides(sizes), x.data_ptr(), src_strides, sizes,
               x.element_size());
}

// Flipped dims are read through negative strides from their last element.
void flip_kernel(const KernelCall& c) {
  const Tensor& x = c.in(0);
  if (x.numel() == 0) return;
  Shape strides = x.strides();
  int64_t offset = 0;
  for (int64_t d : c.attrs.ints(0)) {
    offset += (x.sizes()[d] - 1) * strides[d];
    strides[d] = -strides[d];
  }
  const char* src = byte_ptr(x) + offset * static_cast<int64_t>(x.element_size());
  copy_strided(c.out().data_ptr(), c.out().strides(), src, strides, x.sizes(), x.element_size());
}

// --- tril, triu, one_hot ----------------------------------------------------------

// Each row keeps the columns [keep_begin, keep_end) and zeroes the rest (zero
// bytes are zero in every dtype). In place, the kept part is already there.
template <bool kLower>
void triangle_kernel(const KernelCall& c) {
  const Tensor& out = c.out();
  const bool in_place = same_view(out, c.in(0));
  const Tensor x = in_place ? out : c.in(0).contiguous();
  if (out.numel() == 0) return;
  const int64_t rows_per_matrix = out.sizes()[out.dim() - 2], cols = out.sizes()[out.dim() - 1];
  // Clamped so that row + diagonal cannot overflow; beyond the matrix it changes nothing.
  const int64_t diagonal = std::clamp<int64_t>(c.attrs.i(0), -rows_per_matrix - 1, cols + 1);
  const int64_t es = static_cast<int64_t>(out.element_size());
  const char* src = byte_ptr(x);
  char* dst = byte_ptr(out);
  const int64_t rows = out.numel() / cols;
  parallel_for(rows, std::max<int64_t>(1, kParallelGrain / cols), [&](int64_t b, int64_t e) {
    for (int64_t q = b; q < e; ++q) {
      const int64_t r = q % rows_per_matrix;
      const int64_t keep_begin = kLower ? 0 : std::clamp<int64_t>(r + diagonal, 0, cols);
      const int64_t keep_end = kLower ? std::clamp<int64_t>(r + diagonal + 1, 0, cols) : cols;
      char* d = dst + q * cols * es;
      if (!in_place && keep_end > keep_begin) {
        std::memcpy(d + keep_begin * es, src + q * cols * es + keep_begin * es,
                    static_cast<size_t>((keep_end - keep_begin) * es));
      }
      std::memset(d, 0, static_cast<size_t>(keep_begin * es));
      std::memset(d + keep_end * es, 0, static_cast<size_t>((cols - keep_end) * es));
    }
  });
}

void one_hot_kernel(const KernelCall& c) {
  const Tensor indices = c.in(0).contiguous();
  const int64_t classes = c.attrs.i(0);
  const int64_t* iv = indices.data<int64_t>();
  if (auto bad = find_bad_index(iv, indices.numel(), classes)) {
    if (*bad < 0) {
      throw IndexError(detail::str_cat("one_hot: class values must be non-negative, got ", *bad));
    }
    throw IndexError(detail::str_cat("one_hot: class value ", *bad,
                                     " is out of range for num_classes ", classes));
  }
  int64_t* out = c.out().data<int64_t>();
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(classes, 1));
  parallel_for(indices.numel(), grain, [&](int64_t b, int64_t e) {
    std::memset(out + b * classes, 0, static_cast<size_t>((e - b) * classes) * sizeof(int64_t));
    for (int64_t i = b; i < e; ++i) out[i * classes + iv[i]] = 1;
  });
}

}  // namespace
}  // namespace cpu

void register_cpu_shape_kernels(KernelTable& t) {
  using ops::OpId;
  t.set(OpId::cat, cpu::cat_kernel);
  t.set(OpId::stack, cpu::stack_kernel);
  t.set(OpId::index_select, cpu::index_select_kernel);
  t.set(OpId::gather, cpu::gather_kernel);
  t.set(OpId::scatter, cpu::scatter_kernel);
  t.set(OpId::repeat, cpu::repeat_kernel);
  t.set(OpId::flip, cpu::flip_kernel);
  t.set(OpId::tril, cpu::triangle_kernel<true>);
  t.set(OpId::triu, cpu::triangle_kernel<false>);
  t.set(OpId::one_hot, cpu::one_hot_kernel);
}

}  // namespace kiln::backend
