// kiln: eager tensors in C++, compiled when you ask.
//
//   #include <kiln/kiln.h>
//   using namespace kiln;
//   auto x = randn({8, 16});
//   auto w = randn({16, 4});
//   std::cout << relu(matmul(x, w)).sum(1) << "\n";
#pragma once

#include "kiln/autograd.h"
#include "kiln/compile.h"
#include "kiln/cuda.h"
#include "kiln/device.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/models.h"
#include "kiln/nn.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/loss.h"
#include "kiln/ops/nn.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "kiln/optim.h"
#include "kiln/runtime.h"
#include "kiln/safetensors.h"
#include "kiln/scalar.h"
#include "kiln/state_dict.h"
#include "kiln/tensor.h"
