// Reference kernels of the shape and indexing ops: one element at a time by
// multi-index, through any strides. Values move as int64 (integers and bool) or
// double (floats), so every dtype round-trips exactly.
#include "backends/reference/ref_util.h"
#include "backends/reference/reference.h"

namespace kiln::backend {
namespace {

using ops::OpId;
using Index = std::vector<int64_t>;

// Element offset of a full multi-index (no broadcasting); a 0-dim tensor is offset 0.
int64_t element_offset(const Tensor& t, const Index& index) {
  int64_t off = 0;
  for (int64_t d = 0; d < t.dim(); ++d) off += index[d] * t.strides()[d];
  return off;
}

void move_element(const Tensor& out, int64_t out_off, const Tensor& in, int64_t in_off) {
  if (is_floating(out.dtype())) {
    ref::write(out, out_off, ref::read<double>(in, in_off));
  } else {
    ref::write(out, out_off, ref::read<int64_t>(in, in_off));
  }
}

int64_t index_value(const Tensor& index, const Index& at) {
  return ref::read<int64_t>(index, element_offset(index, at));
}

void check_index(std::string_view op, int64_t v, int64_t dim, int64_t size) {
  if (v < 0 || v >= size) {
    throw IndexError(
        detail::str_cat(op, ": index ", v, " is out of range for dim ", dim, " of size ", size));
  }
}

// The size of t in dim, counting a 0-dim tensor as one of size 1.
int64_t size_or_1(const Tensor& t, int64_t dim) { return t.dim() == 0 ? 1 : t.sizes()[dim]; }

void copy_all(const Tensor& out, const Tensor& in) {
  ref::for_each_index(out.sizes(), [&](const Index& i) {
    move_element(out, element_offset(out, i), in, element_offset(in, i));
  });
}

bool same_view(const Tensor& a, const Tensor& b) {
  return a.data_ptr() == b.data_ptr() && a.strides() == b.strides();
}

void cat_kernel(const KernelCall& c) {
  const int64_t dim = c.attrs.i(0);
  int64_t start = 0;  // where the current input begins along dim
  for (const Tensor& in : c.inputs) {
    if (in.numel() == 0) continue;  // contributes nothing (and may be a skipped [0])
    ref::for_each_index(in.sizes(), [&](const Index& i) {
      Index o = i;
      o[dim] += start;
      move_element(c.out(), element_offset(c.out(), o), in, element_offset(in, i));
    });
    start += in.sizes()[dim];
  }
}

void stack_kernel(const KernelCall& c) {
  const int64_t dim = c.attrs.i(0);
  ref::for_each_index(c.out().sizes(), [&](const Index& o) {
    Index i = o;
    const Tensor& in = c.in(static_cast<size_t>(o[dim]));
    i.erase(i.begin() + dim);
    move_element(c.out(), element_offset(c.out(), o), in, element_offset(in, i));
  });
}

void index_select_kernel(const KernelCall& c) {
  const Tensor& x = c.in(0);
  const Tensor& index = c.in(1);
  const int64_t dim = c.attrs.i(0);
  const Tensor flat_index = index.dim() == 0 ? index.reshape({1}) : index;
  for (int64_t j = 0; j < flat_index.numel(); ++j) {
    check_index("index_select", index_value(flat_index, {j}), dim, size_or_1(x, dim));
  }
  ref::for_each_index(c.out().sizes(), [&](const Index& o) {
    Index i = o;
    if (x.dim() > 0) i[dim] = index_value(flat_index, {o[dim]});
    move_element(c.out(), element_offset(c.out(), o), x, element_offset(x, i));
  });
}

void gather_kernel(const KernelCall& c) {
  const Tensor& x = c.in(0);
  const Tensor& index = c.in(1);
  const int64_t dim = c.attrs.i(0);
  ref::for_each_index(index.sizes(), [&](const Index& o) {
    const int64_t v = index_value(index, o);
    check_index("gather", v, dim, size_or_1(x, dim));
    Index i = o;
    if (x.dim() > 0) i[dim] = v;
    move_element(c.out(), element_offset(c.out(), o), x, element_offset(x, i));
  });
}

// Writes happen in row-major order of index, so the last duplicate wins.
void scatter_kernel(const KernelCall& c) {
  const Tensor& index = c.in(1);
  const Tensor& src = c.in(2);
  const int64_t dim = c.attrs.i(0);
  const int64_t size = size_or_1(c.out(), dim);
  ref::for_each_index(index.sizes(), [&](const Index& i) {
    check_index("scatter", index_value(index, i), dim, size);
  });
  if (!same_view(c.out(), c.in(0))) copy_all(c.out(), c.in(0));
  ref::for_each_index(index.sizes(), [&](const Index& i) {
    Index o = i;
    if (c.out().dim() > 0) o[dim] = index_value(index, i);
    move_element(c.out(), element_offset(c.out(), o), src, element_offset(src, i));
  });
}

void repeat_kernel(const KernelCall& c) {
  const Tensor& x = c.in(0);
  const int64_t lead = c.out().dim() - x.dim();
  ref::for_each_index(c.out().sizes(), [&](const Index& o) {
    Index i(x.dim());
    for (int64_t d = 0; d < x.dim(); ++d) i[d] = o[lead + d] % x.sizes()[d];
    move_element(c.out(), element_offset(c.out(), o), x, element_offset(x, i));
  });
}

void flip_kernel(const KernelCall& c) {
  const Tensor& x = c.in(0);
  const auto& dims = c.attrs.ints(0);
  ref::for_each_index(c.out().sizes(), [&](const Index& o) {
    Index i = o;
    for (int64_t d : dims) i[d] = x.sizes()[d] - 1 - o[d];
    move_element(c.out(), element_offset(c.out(), o), x, element_offset(x, i));
  });
}

// keep(row, col) says which elements survive; the others become zero.
template <typename Keep>
void triangle_kernel(const KernelCall& c, Keep keep) {
  const Tensor& x = c.in(0);
  const int64_t n = x.dim();
  ref::for_each_index(c.out().sizes(), [&](const Index& o) {
    const int64_t out_off = element_offset(c.out(), o);
    if (keep(o[n - 2], o[n - 1])) {
      move_element(c.out(), out_off, x, element_offset(x, o));
    } else {
      ref::write<int64_t>(c.out(), out_off, 0);
    }
  });
}

void one_hot_kernel(const KernelCall& c) {
  const Tensor& indices = c.in(0);
  const int64_t classes = c.attrs.i(0);
  ref::for_each_index(c.out().sizes(), [&](const Index& o) {
    ref::write<int64_t>(c.out(), element_offset(c.out(), o), 0);
  });
  ref::for_each_index(indices.sizes(), [&](const Index& i) {
    const int64_t v = index_value(indices, i);
    if (v < 0) {
      throw IndexError(detail::str_cat("one_hot: class values must be non-negative, got ", v));
    }
    if (v >= classes) {
      throw IndexError(detail::str_cat("one_hot: class value ", v, " is out of range for ",
                                       "num_classes ", classes));
    }
    Index o = i;
    o.push_back(v);
    ref::write<int64_t>(c.out(), element_offset(c.out(), o), 1);
  });
}

}  // namespace

void register_reference_shape_kernels(KernelTable& t) {
  t.set(OpId::cat, cat_kernel);
  t.set(OpId::stack, stack_kernel);
  t.set(OpId::index_select, index_select_kernel);
  t.set(OpId::gather, gather_kernel);
  t.set(OpId::scatter, scatter_kernel);
  t.set(OpId::repeat, repeat_kernel);
  t.set(OpId::flip, flip_kernel);
  t.set(OpId::tril, [](const KernelCall& c) {
    const int64_t diagonal = c.attrs.i(0);
    triangle_kernel(c, [diagonal](int64_t r, int64_t col) { return col - r <= diagonal; });
  });
  t.set(OpId::triu, [](const KernelCall& c) {
    const int64_t diagonal = c.attrs.i(0);
    triangle_kernel(c, [diagonal](int64_t r, int64_t col) { return col - r >= diagonal; });
  });
  t.set(OpId::one_hot, one_hot_kernel);
}

}  // namespace kiln::backend
