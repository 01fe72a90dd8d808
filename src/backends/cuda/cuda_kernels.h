// The CUDA kernel groups, each registered from its own file.
#pragma once

#include "backends/backend.h"

namespace kiln::backend::cuda {

void register_cuda_unary_kernels(KernelTable& table);
void register_cuda_binary_kernels(KernelTable& table);
void register_cuda_misc_pointwise_kernels(KernelTable& table);
void register_cuda_factory_kernels(KernelTable& table);
void register_cuda_reduce_kernels(KernelTable& table);
void register_cuda_softmax_kernels(KernelTable& table);
void register_cuda_sort_kernels(KernelTable& table);
void register_cuda_shape_kernels(KernelTable& table);
void register_cuda_matmul_kernels(KernelTable& table);
void register_cuda_norm_kernels(KernelTable& table);
void register_cuda_pool_kernels(KernelTable& table);
void register_cuda_resample_kernels(KernelTable& table);
void register_cuda_conv_kernels(KernelTable& table);  // with cuDNN only
void register_cuda_composite_kernels(KernelTable& table);
void register_cuda_cudnn_rnn_kernels(KernelTable& table);  // with cuDNN only

// lstm_sequence as one input product per layer, then per step a product and a
// fused cell kernel: the path without cuDNN.
void lstm_sequence_composite(const KernelCall& call);

// linear(x, weight, bias) into out for x of 1 to 8 rows of weight's width k
// (contiguous operands, at least 32 output features, k up to 16384) by one
// warp per output feature; false, doing nothing, for anything else.
bool few_rows_linear(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias);

// scaled_dot_product_attention's forward in one kernel (attention.cu) into
// out (contiguous, of the broadcast batch); mask undefined, bool, or of q's
// compute dtype. False, doing nothing, where it does not apply (head dims over
// 128, more than 4 batch dims, no keys, a last dim that is not contiguous).
bool fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                     bool causal, double scale, const Tensor& out);

// out = in, both of out's dtype, any layouts (the elementwise engine).
void copy_same_dtype(const Tensor& out, const Tensor& in);
// Every element of out set to `value`, given as the bits of out's dtype.
void fill_bits(const Tensor& out, uint64_t value);

}  // namespace kiln::backend::cuda
