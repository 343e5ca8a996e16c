/* CUB behind extern "C" (xt_cub.h): the scan and the radix sort of the Gaussian kind's tile
 * pipeline. The sort is stable, so pairs written in Gaussian order stay in Gaussian order within
 * each tile: per-pixel sums are bit-for-bit reproducible. */
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include "xt_cub.h"

extern "C" int xt_cub_inclusive_sum_u32(void *temp, size_t *temp_bytes, const uint32_t *in, uint32_t *out, int n,
                                        void *stream) {
  return (int)cub::DeviceScan::InclusiveSum(temp, *temp_bytes, in, out, n, (cudaStream_t)stream);
}

extern "C" int xt_cub_sort_pairs_u32(void *temp, size_t *temp_bytes, const uint32_t *keys_in, uint32_t *keys_out,
                                     const uint32_t *vals_in, uint32_t *vals_out, int n, int end_bit, void *stream) {
  return (int)cub::DeviceRadixSort::SortPairs(temp, *temp_bytes, keys_in, keys_out, vals_in, vals_out, n, 0, end_bit,
                                              (cudaStream_t)stream);
}
