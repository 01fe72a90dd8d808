// retrace: a trace made again for other sizes by the shape rules alone, the
// program not run, equals the program's own trace for them; and it refuses
// where the program read a size that changed, or where the new arguments
// alias, or are typed, otherwise than traced.
#include <gtest/gtest.h>

#include <optional>

#include "compiler/capture/capture.h"
#include "compiler/compiler_testing.h"
#include "compiler/ir/graph.h"
#include "kiln/kiln.h"
#include "unit/expect_error.h"

namespace kiln::compiler {
namespace {

namespace F = nn::functional;
using testing::Program;
using testing::same;
using testing::trace_of;

struct Traced {
  Trace trace;
  std::vector<LayoutRead> reads;
  bool unmapped = false;
};

Traced traced_with_reads(const Program& f, const TensorList& args) {
  Tracer tracer;
  TensorList proxies;
  for (const Tensor& a : args) proxies.push_back(tracer.input(a));
  Trace t = tracer.finish(f(proxies));
  return {std::move(t), tracer.layout_reads(), tracer.unmapped_read()};
}

std::string reads_text(const std::vector<LayoutRead>& reads) {
  std::string out;
  for (const LayoutRead& r : reads) out += r.describe() + "\n";
  return out;
}

// Views, in-place writes (one through a view), broadcasting, a captured
// tensor, constants, a reduction. The one read is contiguous() asking
// whether the transpose is contiguous: for 1 row it is, and the program
// differs (no copy), so 1 row is refused.
TEST(Retrace, EqualsTheProgramsOwnTraceForNewSizes) {
  const Tensor w = randn({5, 3});
  const Program f = [&](const TensorList& a) {
    Tensor z = a[0].matmul(w) * 2.0 + a[1];
    z.add_(1.0);
    const Tensor flat = z.view({-1});
    const Tensor t = z.t().contiguous();
    z.select(1, 0).mul_(0.5);
    return TensorList{z.softmax(1), flat.slice(0, 0, 2), t.sum({1}),
                      relu(z.unsqueeze(0) - a[1]).sum({0})};
  };
  const Traced a = traced_with_reads(f, {randn({4, 5}), randn({3})});
  ASSERT_EQ(a.reads.size(), 1u) << reads_text(a.reads);
  EXPECT_NE(a.reads[0].describe().find("is_contiguous() of %"), std::string::npos)
      << reads_text(a.reads);
  EXPECT_FALSE(a.unmapped);
  std::string refused;
  EXPECT_FALSE(retrace(a.trace, a.reads, {randn({1, 5}), randn({3})}, refused));
  EXPECT_NE(refused.find("which gave false (now true)"), std::string::npos) << refused;
  for (int64_t n : {2, 7, 33}) {
    const TensorList args{randn({n, 5}), randn({3})};
    std::string why;
    const std::optional<Trace> made = retrace(a.trace, a.reads, args, why);
    ASSERT_TRUE(made) << why;
    verify(made->graph);
    const Trace own = trace_of(f, args);
    EXPECT_EQ(to_text(made->graph), to_text(own.graph)) << n;
    EXPECT_EQ(structural_hash(made->graph), structural_hash(own.graph)) << n;
    const TensorList got = replay(*made, args), want = f(args);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(same(got[i], want[i])) << n << " output " << i;
  }
}

TEST(Retrace, RefusesWhereTheProgramReadASizeThatChanged) {
  const Program f = [](const TensorList& a) {
    return TensorList{a[0].reshape({a[0].size(0) * 2, -1})};
  };
  const Traced a = traced_with_reads(f, {randn({4, 6})});
  ASSERT_EQ(a.reads.size(), 2u) << reads_text(a.reads);  // and reshape's: is x contiguous
  EXPECT_NE(a.reads[0].describe().find("size(0) of %0 at retrace_test.cpp:"), std::string::npos)
      << a.reads[0].describe();
  std::string why;
  EXPECT_FALSE(retrace(a.trace, a.reads, {randn({5, 6})}, why));
  EXPECT_NE(why.find("the function read size(0) of %0"), std::string::npos) << why;
  EXPECT_NE(why.find("which gave 4 (now 5)"), std::string::npos) << why;
  // Other sizes of the dims it did not read are its graph's.
  const std::optional<Trace> made = retrace(a.trace, a.reads, {randn({4, 10})}, why);
  ASSERT_TRUE(made) << why;
  EXPECT_EQ(to_text(made->graph), to_text(trace_of(f, {randn({4, 10})}).graph));
}

TEST(Retrace, NotesEveryKindOfLayoutRead) {
  const Program f = [](const TensorList& a) {
    const Tensor& x = a[0];
    const int64_t n = x.numel() + x.stride(0) + x.storage_offset() + (x.is_contiguous() ? 1 : 0) +
                      static_cast<int64_t>(x.sizes().size() + x.strides().size());
    return TensorList{x * static_cast<double>(n)};
  };
  const Traced a = traced_with_reads(f, {randn({2, 3})});
  const std::string text = reads_text(a.reads);
  for (const char* what : {"numel() of %0", "stride(0) of %0", "storage_offset() of %0",
                           "is_contiguous() of %0", "sizes() of %0", "strides() of %0"})
    EXPECT_NE(text.find(what), std::string::npos) << what << " in\n" << text;
  EXPECT_EQ(a.reads.size(), 6u) << text;
  std::string why;
  EXPECT_FALSE(retrace(a.trace, a.reads, {randn({3, 3})}, why));
  EXPECT_NE(why.find("numel() of %0"), std::string::npos) << why;
  EXPECT_FALSE(retrace(a.trace, a.reads, {randn({3, 2}).t()}, why));  // same sizes, other strides
}

TEST(Retrace, ADetachedProxysReadsAreNotedToo) {
  const Program f = [](const TensorList& a) {
    const Tensor d = a[0].detach();
    return TensorList{a[0].reshape({d.size(0), -1})};
  };
  const Traced a = traced_with_reads(f, {randn({4, 6})});
  EXPECT_FALSE(a.unmapped);
  ASSERT_EQ(a.reads.size(), 2u) << reads_text(a.reads);
  EXPECT_NE(a.reads[0].describe().find("size(0) of %0"), std::string::npos) << reads_text(a.reads);
  std::string why;
  EXPECT_FALSE(retrace(a.trace, a.reads, {randn({3, 6})}, why));
}

TEST(Retrace, RefusesOtherAliasingTypesAndSizesAShapeRuleRejects) {
  const Program add = [](const TensorList& a) { return TensorList{a[0] + a[1]}; };
  const Traced a = traced_with_reads(add, {randn({4, 3}), randn({4, 3})});
  std::string why;
  const Tensor x = randn({5, 3});
  EXPECT_FALSE(retrace(a.trace, a.reads, {x, x}, why));
  EXPECT_NE(why.find("argument 1 shares memory with the other tensors otherwise than when traced"),
            std::string::npos)
      << why;
  EXPECT_FALSE(retrace(a.trace, a.reads, {randn({5, 3}), randn({4, 3})}, why));
  EXPECT_NE(why.find("add rejects the new sizes"), std::string::npos) << why;
  EXPECT_FALSE(retrace(a.trace, a.reads, {randn({5, 3}).to(kFloat64), randn({5, 3})}, why));
  EXPECT_NE(why.find("argument 0 is float64"), std::string::npos) << why;
  EXPECT_TRUE(retrace(a.trace, a.reads, {randn({5, 3}), randn({5, 3})}, why)) << why;

  const Traced same_storage = traced_with_reads(add, {x, x});
  EXPECT_FALSE(
      retrace(same_storage.trace, same_storage.reads, {randn({6, 3}), randn({6, 3})}, why));
  EXPECT_NE(why.find("shares memory"), std::string::npos) << why;
  const Tensor y = randn({6, 3});
  EXPECT_TRUE(retrace(same_storage.trace, same_storage.reads, {y, y}, why)) << why;
}

// A random op draws a number per element of its result: made again for new
// sizes, it draws as many as they have, as the program's own trace for them.
TEST(Retrace, ARandomOpDrawsAsManyNumbersAsItsNewSizesHave) {
  const Program f = [](const TensorList& a) {
    const Tensor dropped = F::dropout(a[0] * 2.0, 0.5, true);
    return TensorList{dropped + randn({3})};
  };
  const Traced a = traced_with_reads(f, {randn({4, 3})});
  std::string why;
  const Tensor x = randn({7, 3});
  const std::optional<Trace> made = retrace(a.trace, a.reads, {x}, why);
  ASSERT_TRUE(made) << why;
  const Traced own = traced_with_reads(f, {x});
  EXPECT_EQ(structural_hash(made->graph), structural_hash(own.trace.graph));
  std::vector<int64_t> counts, own_counts;
  for (const Node& n : made->graph.nodes())
    if (n.draw_count >= 0) counts.push_back(n.draw_count);
  for (const Node& n : own.trace.graph.nodes())
    if (n.draw_count >= 0) own_counts.push_back(n.draw_count);
  EXPECT_EQ(counts, (std::vector<int64_t>{21, 3}));
  EXPECT_EQ(counts, own_counts);
  // Replayed from one generator state, the made trace gives eager's values.
  manual_seed(5);
  const TensorList got = replay(*made, {x});
  const Tensor after = randn({2});
  manual_seed(5);
  EXPECT_TRUE(same(got[0], f({x})[0]));
  EXPECT_TRUE(same(after, randn({2})));
}

}  // namespace
}  // namespace kiln::compiler
