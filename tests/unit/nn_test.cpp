#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "kiln/ops/nn.h"
