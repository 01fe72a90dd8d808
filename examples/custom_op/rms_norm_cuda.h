// The CUDA kernel of example::rms_norm (rms_norm_cuda.cu): y = x * w / sqrt(mean(x^2) + eps)
// over rows of `cols` float32 values, queued on `stream` (a cudaStream_t).
#pragma once

#include <cstdint>

void launch_rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t cols,
                     float eps, void* stream);
