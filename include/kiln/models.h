// kiln's reference models: the networks every kiln figure is quoted on, with
// PyTorch's (torchvision's, Hugging Face's) architectures and state-dict names.
//
//   #include <kiln/models.h>
//   kiln::models::LSTMNet net;
#pragma once

#include "kiln/models/bert.h"
#include "kiln/models/checkpoint.h"
#include "kiln/models/llama.h"
#include "kiln/models/lstm.h"
#include "kiln/models/resnet.h"
