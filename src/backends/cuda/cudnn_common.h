// cuDNN helpers shared by the convolution and RNN kernels.
#pragma once

#include <cudnn.h>

#include "kiln/dtype.h"
#include "kiln/error.h"

namespace kiln::backend::cuda {

// Throws Error("cuda: <what>: <cuDNN's message>") unless status is success.
inline void check_dnn(cudnnStatus_t status, const char* what) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  throw Error(detail::str_cat("cuda: ", what, ": ", cudnnGetErrorString(status)));
}

// cuDNN's name of a floating dtype (float32 for any other).
inline cudnnDataType_t dnn_type(DType t) {
  switch (t) {
    case kFloat16:
      return CUDNN_DATA_HALF;
    case kBFloat16:
      return CUDNN_DATA_BFLOAT16;
    case kFloat64:
      return CUDNN_DATA_DOUBLE;
    default:
      return CUDNN_DATA_FLOAT;
  }
}

}  // namespace kiln::backend::cuda
