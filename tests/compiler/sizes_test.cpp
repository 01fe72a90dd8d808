// Every kiln function and module keeps sizes symbolic unless its semantics
// need a concrete value: compiled over three sizes of a dim, the third is
// made from the trace (a retrace), and every result equals eager's. Those
// whose semantics need the value say which and why. And the size handle
// (Tensor::sym_size) gives user code the same power.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compiler/compiler_testing.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

namespace F = nn::functional;
using compiler::testing::same;

struct SizeCase {
  std::string name;
  std::function<TensorList(const TensorList&)> fn;
  std::function<TensorList(int64_t n, Generator& g)> make;  // arguments with a dim of size n
  // Empty: new sizes are made from the trace. Else why each size is traced.
  std::string traced_because = {};
};

// What a module's forward gives, as a list.
template <typename M>
std::function<TensorList(const TensorList&)> forward_of(std::shared_ptr<M> m) {
  return [m](const TensorList& a) { return TensorList{m->forward(a[0])}; };
}

TensorList one(const Shape& s, Generator& g) { return {randn(s, {}, &g)}; }

std::vector<SizeCase> cases() {
  manual_seed(31);
  std::vector<SizeCase> c;
  const auto module = [&](std::string name, auto m, std::function<Shape(int64_t)> shape,
                          std::string why = {}) {
    m->eval();
    c.push_back({std::move(name), forward_of(m),
                 [shape](int64_t n, Generator& g) { return one(shape(n), g); }, std::move(why)});
  };
  const auto fn = [&](std::string name, std::function<TensorList(const TensorList&)> f,
                      std::function<TensorList(int64_t, Generator&)> make, std::string why = {}) {
    c.push_back({std::move(name), std::move(f), std::move(make), std::move(why)});
  };
  // --- modules -----------------------------------------------------------------------
  module("Linear", std::make_shared<nn::Linear>(8, 4), [](int64_t n) { return Shape{n, 8}; });
  module("Conv1d", std::make_shared<nn::Conv1d>(3, 4, 3), [](int64_t n) {
    return Shape{2, 3, n + 4};
  });
  module("Conv2d batch",
         std::make_shared<nn::Conv2d>(3, 4, 3, nn::Conv2dOptions{.stride = 2, .padding = 1}),
         [](int64_t n) {
           return Shape{n, 3, 9, 9};
         });
  module("Conv2d image", std::make_shared<nn::Conv2d>(3, 4, 3, nn::Conv2dOptions{.padding = 1}),
         [](int64_t n) {
           return Shape{2, 3, n + 4, n + 6};
         });
  module("BatchNorm1d", std::make_shared<nn::BatchNorm1d>(4), [](int64_t n) {
    return Shape{n, 4};
  });
  module("BatchNorm2d", std::make_shared<nn::BatchNorm2d>(3), [](int64_t n) {
    return Shape{n, 3, 5, 5};
  });
  module("LayerNorm", std::make_shared<nn::LayerNorm>(Shape{6}), [](int64_t n) {
    return Shape{n, 6};
  });
  module("GroupNorm", std::make_shared<nn::GroupNorm>(2, 4), [](int64_t n) {
    return Shape{n, 4, 3};
  });
  module("Dropout (eval)", std::make_shared<nn::Dropout>(0.5), [](int64_t n) {
    return Shape{n, 3};
  });
  module("MaxPool2d", std::make_shared<nn::MaxPool2d>(2), [](int64_t n) {
    return Shape{2, 3, n + 4, n + 4};
  });
  module("AvgPool2d", std::make_shared<nn::AvgPool2d>(2), [](int64_t n) {
    return Shape{n, 3, 8, 8};
  });
  module("AdaptiveAvgPool2d", std::make_shared<nn::AdaptiveAvgPool2d>(1), [](int64_t n) {
    return Shape{2, 3, n + 4, n + 3};
  });
  module("Flatten", std::make_shared<nn::Flatten>(), [](int64_t n) { return Shape{n, 3, 2}; });
  module("ReLU", std::make_shared<nn::ReLU>(), [](int64_t n) { return Shape{n, 3}; });
  module("GELU", std::make_shared<nn::GELU>(), [](int64_t n) { return Shape{n, 3}; });
  module("SiLU", std::make_shared<nn::SiLU>(), [](int64_t n) { return Shape{n, 3}; });
  module("Softmax", std::make_shared<nn::Softmax>(-1), [](int64_t n) { return Shape{3, n}; });
  module("LogSoftmax", std::make_shared<nn::LogSoftmax>(1), [](int64_t n) { return Shape{n, 4}; });
  module("Sequential",
         std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 4),
                                          std::make_shared<nn::ReLU>()),
         [](int64_t n) {
           return Shape{n, 4};
         });
  {
    auto e = std::make_shared<nn::Embedding>(20, 4);
    fn(
        "Embedding", [e](const TensorList& a) { return TensorList{e->forward(a[0])}; },
        [](int64_t n, Generator& g) {
          return TensorList{randint(0, 20, {2, n}, {}, &g)};
        });
  }
  {
    auto mha = std::make_shared<nn::MultiheadAttention>(
        8, 2, nn::MultiheadAttentionOptions{.batch_first = true});
    mha->eval();
    fn(
        "MultiheadAttention batch",
        [mha](const TensorList& a) { return TensorList{mha->forward(a[0], a[0], a[0]).output}; },
        [](int64_t n, Generator& g) {
          return one({n, 5, 8}, g);
        });
    fn(
        "MultiheadAttention length, causal, weights",
        [mha](const TensorList& a) {
          auto r = mha->forward(a[0], a[0], a[0], {.is_causal = true});
          return TensorList{r.output, r.weights};
        },
        [](int64_t n, Generator& g) {
          return one({2, n, 8}, g);
        });
    fn(
        "MultiheadAttention key padding mask",
        [mha](const TensorList& a) {
          return TensorList{mha->forward(a[0], a[1], a[1],
                                         {.key_padding_mask = a[2] > 0.5, .need_weights = false})
                                .output};
        },
        [](int64_t n, Generator& g) {
          return TensorList{randn({2, 3, 8}, {}, &g), randn({2, n, 8}, {}, &g),
                            rand({2, n}, {}, &g)};
        });
  }
  {
    auto cell = std::make_shared<nn::LSTMCell>(4, 6);
    fn(
        "LSTMCell",
        [cell](const TensorList& a) {
          auto s = cell->forward(a[0]);
          return TensorList{s.h, s.c};
        },
        [](int64_t n, Generator& g) {
          return one({n, 4}, g);
        });
    auto gru = std::make_shared<nn::GRUCell>(4, 6);
    fn(
        "GRUCell", [gru](const TensorList& a) { return TensorList{gru->forward(a[0])}; },
        [](int64_t n, Generator& g) {
          return one({n, 4}, g);
        });
    auto lstm =
        std::make_shared<nn::LSTM>(4, 6, nn::RNNOptions{.num_layers = 2, .batch_first = true});
    lstm->eval();
    fn(
        "LSTM batch",
        [lstm](const TensorList& a) {
          auto r = lstm->forward(a[0]);
          return TensorList{r.output, r.state.h, r.state.c};
        },
        [](int64_t n, Generator& g) {
          return one({n, 5, 4}, g);
        });
    fn(
        "LSTM steps",
        [lstm](const TensorList& a) { return TensorList{lstm->forward(a[0]).output}; },
        [](int64_t n, Generator& g) {
          return one({2, n, 4}, g);
        });
    auto rnn = std::make_shared<nn::GRU>(4, 6, nn::RNNOptions{.batch_first = true});
    rnn->eval();
    fn(
        "GRU batch",
        [rnn](const TensorList& a) {
          auto r = rnn->forward(a[0]);
          return TensorList{r.output, r.h_n};
        },
        [](int64_t n, Generator& g) {
          return one({n, 3, 4}, g);
        });
  }
  // --- functional --------------------------------------------------------------------
  const auto unary = [](std::function<Tensor(const Tensor&)> f) {
    return [f](const TensorList& a) { return TensorList{f(a[0])}; };
  };
  const auto shaped = [](std::function<Shape(int64_t)> s) {
    return [s](int64_t n, Generator& g) { return one(s(n), g); };
  };
  fn("layer_norm", unary([](const Tensor& x) { return F::layer_norm(x, {4}); }),
     shaped([](int64_t n) {
       return Shape{n, 4};
     }));
  fn(
      "scaled_dot_product_attention causal",
      [](const TensorList& a) {
        return TensorList{F::scaled_dot_product_attention(a[0], a[0], a[0], {.is_causal = true})};
      },
      shaped([](int64_t n) {
        return Shape{2, 2, n, 4};
      }));
  fn("pad", unary([](const Tensor& x) {
       return F::pad(x, {1, 2});
     }),
     shaped([](int64_t n) {
       return Shape{n, 3};
     }));
  fn("interpolate nearest x2", unary([](const Tensor& x) {
       return F::interpolate(x, {.scale_factor = std::vector<double>{2.0}});
     }),
     shaped([](int64_t n) {
       return Shape{2, 3, n, n + 1};
     }));
  fn("interpolate bilinear x1.5", unary([](const Tensor& x) {
       return F::interpolate(x, {.scale_factor = std::vector<double>{1.5}, .mode = "bilinear"});
     }),
     shaped([](int64_t n) {
       return Shape{1, 2, n, n};
     }));
  fn(
      "cross_entropy", [](const TensorList& a) { return TensorList{F::cross_entropy(a[0], a[1])}; },
      [](int64_t n, Generator& g) {
        return TensorList{randn({n, 5}, {}, &g), randint(0, 5, {n}, {}, &g)};
      });
  fn(
      "cross_entropy probabilities",
      [](const TensorList& a) { return TensorList{F::cross_entropy(a[0], softmax(a[1], 1))}; },
      [](int64_t n, Generator& g) {
        return TensorList{randn({n, 5}, {}, &g), randn({n, 5}, {}, &g)};
      });
  fn(
      "mse_loss", [](const TensorList& a) { return TensorList{F::mse_loss(a[0], a[1])}; },
      [](int64_t n, Generator& g) {
        return TensorList{randn({n, 3}, {}, &g), randn({n, 3}, {}, &g)};
      });
  fn(
      "binary_cross_entropy_with_logits",
      [](const TensorList& a) {
        return TensorList{F::binary_cross_entropy_with_logits(a[0], a[1])};
      },
      [](int64_t n, Generator& g) {
        return TensorList{randn({n, 3}, {}, &g), rand({n, 3}, {}, &g)};
      });
  fn(
      "expand_as", [](const TensorList& a) { return TensorList{a[0].expand_as(a[1]) * 2.0}; },
      [](int64_t n, Generator& g) {
        return TensorList{randn({1, 4}, {}, &g), randn({n, 4}, {}, &g)};
      });
  fn(
      "broadcast_tensors",
      [](const TensorList& a) {
        return broadcast_tensors({a[0], a[1], a[2]});
      },
      [](int64_t n, Generator& g) {
        return TensorList{randn({n, 1}, {}, &g), randn({1, 4}, {}, &g), randn({4}, {}, &g)};
      });
  fn(
      "cat and stack",
      [](const TensorList& a) {
        return TensorList{cat({a[0], a[0]}, 0), stack({a[0], a[0]}, 1)};
      },
      shaped([](int64_t n) {
        return Shape{n, 3};
      }));
  // A random op draws as many values as its new sizes have, as eager.
  fn("dropout training", unary([](const Tensor& x) { return F::dropout(x, 0.5, true); }),
     shaped([](int64_t n) {
       return Shape{n, 3};
     }));
  // --- semantics that need the value ----------------------------------------------------
  {
    auto bn = std::make_shared<nn::BatchNorm2d>(3);
    fn(
        "BatchNorm2d training", [bn](const TensorList& a) { return TensorList{bn->forward(a[0])}; },
        shaped([](int64_t n) {
          return Shape{n, 3, 4, 4};
        }),
        "the running variance takes the batch's count as a number (n / (n - 1))");
  }
  fn(
      "chunk", [](const TensorList& a) { return chunk(a[0], 2, 0); }, shaped([](int64_t n) {
        return Shape{2 * n + 1, 2};
      }),
      "the parts' sizes are ceil(n / chunks), numbers chunk must know");
  return c;
}

TEST(SymbolicSizes, EveryFunctionAndModuleKeepsSizesSymbolicUnlessItsSemanticsNeedThem) {
  NoGradGuard no_grad;
  for (const SizeCase& sc : cases()) {
    SCOPED_TRACE(sc.name);
    const auto fast = compile(sc.fn, {.name = sc.name});
    Generator g(5);
    for (const int64_t n : {3, 4, 6}) {
      const TensorList args = sc.make(n, g);
      manual_seed(n);
      const TensorList got = fast(args);
      manual_seed(n);
      const TensorList want = sc.fn(args);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_TRUE(same(got[i], want[i])) << "size " << n << ", result " << i;
    }
    const ExplainReport r = fast.explain();
    if (sc.traced_because.empty()) {
      EXPECT_EQ(r.stats.retraces, 1) << r.dynamic_sizes << "\n" << r.symbolic_graph;
      EXPECT_EQ(r.stats.traces, 2) << r.dynamic_sizes;
    } else {
      EXPECT_EQ(r.stats.retraces, 0) << sc.traced_because;
    }
  }
}

// The size handle: user code that builds shapes from sizes keeps them
// symbolic with sym_size, where size() ties the program to each value.
Tensor message_pass(const Tensor& x, const Tensor& edges, const Tensor& w, bool handle) {
  const Tensor messages = matmul(index_select(x, 0, edges.select(0, 0)), w);  // [E, H]
  const Tensor dst = edges.select(0, 1).unsqueeze(1).expand({-1, w.size(1)});
  Tensor agg = handle ? zeros({x.sym_size(0), w.sym_size(1)}) : zeros({x.size(0), w.size(1)});
  return scatter_add(agg, 0, dst, messages).relu();
}

TEST(SymbolicSizes, ASizeHandleKeepsUserShapesSymbolic) {
  NoGradGuard no_grad;
  const Tensor w = randn({4, 8});
  for (const bool handle : {false, true}) {
    const auto fast =
        compile([&](const Tensor& x, const Tensor& e) { return message_pass(x, e, w, handle); });
    Generator g(2);
    for (int64_t nodes = 3; nodes < 9; ++nodes) {
      const Tensor x = randn({nodes, 4}, {}, &g), e = randint(0, nodes, {2, 2 * nodes}, {}, &g);
      EXPECT_TRUE(same(fast(x, e), message_pass(x, e, w, handle))) << nodes;
    }
    const CompileStats s = fast.stats();
    if (handle) {
      EXPECT_EQ(s.traces, 2);
      EXPECT_EQ(s.retraces, 4);
    } else {
      EXPECT_EQ(s.traces, 6);  // every node count traced
      EXPECT_EQ(s.retraces, 0);
    }
  }
}

TEST(SymbolicSizes, SizeHandlesInViewsAndFactories) {
  const auto f = [](const Tensor& x, const Tensor& y) {
    const Tensor a = x.view({x.sym_size(0), -1});                // [n, 12]
    const Tensor b = y.reshape({y.sym_size(1), x.sym_size(0)});  // y [n, m] -> [m, n]
    const Tensor c = ones({x.sym_size(0), 1}).expand({-1, y.sym_size(1)});
    const Tensor d = full({y.sym_size(1)}, 2.5, {.dtype = kFloat64});
    return std::make_tuple(a.sum({1}), b.t() + c, d, empty({x.sym_size(0), 0}));
  };
  const auto fast = compile(f);
  for (int64_t n : {2, 3, 5, 7}) {
    const Tensor x = randn({n, 3, 4}), y = randn({n, n + 1});
    const auto [a, b, d, e] = fast(x, y);
    const auto [wa, wb, wd, we] = f(x, y);
    EXPECT_TRUE(same(a, wa) && same(b, wb) && same(d, wd)) << n;
    EXPECT_EQ(e.sizes(), we.sizes());
  }
  EXPECT_EQ(fast.stats().retraces, 2) << fast.explain().dynamic_sizes;
  // Eagerly a SymSize is its number; value() reads it.
  const Tensor x = randn({4, 2});
  EXPECT_EQ(x.sym_size(-2).value(), 4);
  EXPECT_EQ(zeros({x.sym_size(0), 3}).sizes(), (Shape{4, 3}));
  EXPECT_THROW(x.sym_size(2), IndexError);
  EXPECT_THROW(x.view({x.sym_size(0), 3}), ShapeError);
  EXPECT_THROW(x.expand({x.sym_size(1), 4}), ShapeError);
}

}  // namespace
}  // namespace kiln
