/* CUDA device names for GET /v1/info and the render-worker count (built only with CUDA). */
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "xt_server.h"

int xt_srv_gpu_list(char names[][128], int max) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  for (int i = 0; i < n && i < max; i++) {
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, i) == cudaSuccess) snprintf(names[i], 128, "%.127s", p.name);
    else snprintf(names[i], 128, "device %d", i);
  }
  return n < max ? n : max;
}
