// The autograd and training-step section of the benchmark report.
#pragma once

#include <ostream>

#include "ratio_reporter.h"

namespace kiln::bench {

// Recording and backward cost per op on tiny tensors, and MLP/CNN training
// steps, each as a ratio to the forward-only time of the same run.
void print_autograd_overheads(const RatioReporter& reporter, std::ostream& os);

}  // namespace kiln::bench
