// Convolutions through cuDNN's graph (backend) API: for each pass, shape,
// dtype, math mode and pointer alignment, one execution plan is built from
// the engine configurations cuDNN's heuristics rank first and kept; a call
// only binds its pointers and workspace and executes the plan. The legacy
// cudnnConvolution* calls rebuild that state on every call, which costs tens
// of microseconds of host time per convolution.
#pragma once

#include <cudnn.h>

#include <functional>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "backends/conv_geometry.h"
#include "kiln/dtype.h"

namespace kiln::backend::cuda {

// The forward passes with an epilogue are one cuDNN graph each: the
// convolution's sums (never stored), plus a residual z (ForwardAddBiasRelu),
// plus the bias [1, o, 1, 1], then relu, stored as y.
enum class ConvPass { Forward, BackwardData, BackwardFilter, ForwardBiasRelu, ForwardAddBiasRelu };

class ConvGraphCache {
 public:
  ConvGraphCache() = default;
  ~ConvGraphCache();
  ConvGraphCache(const ConvGraphCache&) = delete;
  ConvGraphCache& operator=(const ConvGraphCache&) = delete;

  struct Plan {
    cudnnBackendDescriptor_t plan = nullptr;  // null: cuDNN offered no usable plan
    int64_t workspace = 0;
    bool tuned = false;  // chosen by timing the candidates (autotune::Scope)
    ConvPass pass = ConvPass::Forward;
  };

  // The plan of a convolution pass (x [n, c, h, w], w [o, c / groups, kh, kw],
  // y [n, o, oh, ow], padding as g's, possibly asymmetric), made on first use;
  // plan is null when cuDNN has none. max_workspace(), asked when a plan is
  // made, bounds its workspace. Under autotune::Scope, a plan not tuned yet is
  // chosen among cuDNN's candidates by time(plan) (milliseconds per run;
  // infinity when it fails), or by the choice recorded on disk for `device`
  // (its name) and this cuDNN version, and then serves every later call.
  const Plan& plan(cudnnHandle_t handle, ConvPass pass, const ConvGeometry& g, DType dtype,
                   bool tf32, int64_t alignment, const std::function<size_t()>& max_workspace,
                   const std::function<double(const Plan&)>& time = {}, const std::string& device = {});

 private:
  std::map<std::vector<int64_t>, Plan> plans_;
};

// Executes a plan on the handle's stream: x, w, y as in ConvGraphCache::plan
// (the pass writes y, x or w respectively), workspace of plan.workspace bytes;
// bias and z for the passes with an epilogue (z only for ForwardAddBiasRelu).
// Returns cuDNN's status.
cudnnStatus_t execute_conv_plan(cudnnHandle_t handle, const ConvGraphCache::Plan& plan, void* x,
                                void* w, void* y, void* workspace, void* bias = nullptr,
                                void* z = nullptr);

// The largest power of two up to 16 that divides every pointer.
int64_t common_alignment(std::initializer_list<const void*> pointers);

}  // namespace kiln::backend::cuda
