#include <gtest/gtest.h>

#include <thread>

#include "kiln/kiln.h"

using namespace kiln;

// Eager ops called from several threads at once on different tensors give the
// same results as on one thread (the default generator is shared and locked).
TEST(Threads, ConcurrentEagerOpsOnDifferentTensorsAreSafe) {
  constexpr int kThreads = 6;
  std::vector<std::vector<float>> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &results] {
      Generator g(100 + t);
      Tensor acc = zeros({64, 65});
      for (int i = 0; i < 200; ++i) {
        Tensor x = randn({64, 65}, {}, &g);
        acc.add_(relu(x) * 0.5 - x.t().contiguous().t());
        Tensor noise = rand({3});  // draws from the shared default generator
        (void)noise;
      }
      results[t] = acc.to_vector<float>();
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    Generator g(100 + t);
    Tensor acc = zeros({64, 65});
    for (int i = 0; i < 200; ++i) {
      Tensor x = randn({64, 65}, {}, &g);
      acc.add_(relu(x) * 0.5 - x.t().contiguous().t());
    }
    EXPECT_EQ(acc.to_vector<float>(), results[t]) << "thread " << t;
  }
}
