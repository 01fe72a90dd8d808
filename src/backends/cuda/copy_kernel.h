// The copy kernel of CudaBackend::copy_within, as one node of a CUDA graph:
// a recorded graph's arguments come in, and its results go out, by kernels
// of its own whose addresses each launch sets (DeviceGraph::record_copies).
#pragma once

#include <cuda_runtime_api.h>

#include <span>

#include "backends/backend.h"

namespace kiln::backend::cuda {

// Queues one copy kernel for these copies and writes on `stream`; false
// (nothing queued) when they need more than one.
bool launch_copy_kernel(cudaStream_t stream, std::span<const ByteCopy> copies,
                        std::span<const WordWrite> writes);

// Gives `node`, such a kernel recorded in the graph `exec` was instantiated
// from, these copies and writes (the counts and sizes it was recorded with).
void set_copy_kernel(cudaGraphExec_t exec, cudaGraphNode_t node, std::span<const ByteCopy> copies,
                     std::span<const WordWrite> writes);

}  // namespace kiln::backend::cuda
