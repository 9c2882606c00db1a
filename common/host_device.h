// KT_HOST_DEVICE marks element math that nvcc compiles for both the host and the GPU, so one
// definition serves the CPU loops and the CUDA kernels (and is unit-tested on the host).
#pragma once

#ifdef __CUDACC__
#define KT_HOST_DEVICE __host__ __device__
#else
#define KT_HOST_DEVICE
#endif
