/* The two CUB algorithms the Gaussian kind needs (xt_cub.cu), behind plain C entry points: CUB is
 * a C++ template library, so it lives in one C++ translation unit. Streams are passed as void *
 * (a cudaStream_t) so this header compiles without CUDA's. Each call returns a cudaError_t as int
 * (0 success). Call once with temp == NULL to learn *temp_bytes for n items, then with a buffer
 * of at least that size. */
#ifndef XT_CUB_H
#define XT_CUB_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out[i] = in[0] + ... + in[i] (n items). */
int xt_cub_inclusive_sum_u32(void *temp, size_t *temp_bytes, const uint32_t *in, uint32_t *out, int n, void *stream);

/* Stable radix sort of n (key, value) pairs on key bits [0, end_bit). */
int xt_cub_sort_pairs_u32(void *temp, size_t *temp_bytes, const uint32_t *keys_in, uint32_t *keys_out,
                          const uint32_t *vals_in, uint32_t *vals_out, int n, int end_bit, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* XT_CUB_H */
