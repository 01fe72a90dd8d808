// kiln::nn: modules, layers and their initialization, like PyTorch's torch.nn.
//
//   #include <kiln/nn.h>
//   using namespace kiln;
//   struct Net : nn::Module {
//     nn::Conv2d conv{3, 16, 3, {.padding = 1}};
//     nn::BatchNorm2d bn{16};
//     nn::Linear fc{16, 10};
//     Net() {
//       register_module("conv", conv);
//       register_module("bn", bn);
//       register_module("fc", fc);
//     }
//     Tensor forward(const Tensor& x) {
//       return fc(adaptive_avg_pool2d(relu(bn(conv(x))), {1}).flatten(1));
//     }
//   };
//
// Layers are plain members (no holders); see docs/nn.md.
#pragma once

#include "kiln/nn/activation.h"
#include "kiln/nn/attention.h"
#include "kiln/nn/container.h"
#include "kiln/nn/conv.h"
#include "kiln/nn/dropout.h"
#include "kiln/nn/embedding.h"
#include "kiln/nn/init.h"
#include "kiln/nn/linear.h"
#include "kiln/nn/module.h"
#include "kiln/nn/norm.h"
#include "kiln/nn/pooling.h"
#include "kiln/nn/rnn.h"
#include "kiln/nn/upsampling.h"
