// What bench/torch/bench_torch.py writes: PyTorch's results in the report's
// schema (docs/bench.md).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kiln/bench.h"

namespace kiln::bench::detail {

struct TorchResults {
  std::string torch;        // PyTorch's version
  std::string device_name;  // what it ran on
  std::vector<Result> results;
};

// ValueError naming `file` and the field when the text is not what the
// script writes.
TorchResults torch_results_from_json(std::string_view text, const std::string& file);

}  // namespace kiln::bench::detail
