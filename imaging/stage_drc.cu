/* Dose-rate control on the GPU (issue 11): the measuring field's code sum as a device reduction,
 * and the device-resident loop step, so a frame's measurement and the next frame's exposure never
 * wait for the host. Twins: xt_drc_field_sum and the CPU pipeline's step (xt_chain.c), over the
 * same arithmetic (xt_drc_math.h). */
#include "xt_stage_cuda.h"

#define XT_DRC_FIELD_BLOCKS 132 /* one block per SM of a Hopper: ~1/3 of a frame's pixels is small work */

/* Thread mapping: a grid-stride loop over the measuring field's pixels (row-major in the box), each
 * warp's sum added to *sum by one atomic. In: raw (ocols wide). Out: *sum += the field's codes (the
 * caller zeroes it: the step kernel after reading it, or a memset). */
__global__ void __launch_bounds__(XT_STAGE_BLOCK)
    k_drc_field(const uint16_t *raw, int ocols, int c0, int c1, int r0, int r1, unsigned long long *sum) {
  const int w = c1 - c0, n = w * (r1 - r0); /* < 2^31: a third of the widest detector each way */
  unsigned long long acc = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    acc += raw[(size_t)(r0 + i / w) * ocols + (c0 + i % w)];
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0 && acc) atomicAdd(sum, acc);
}

int xt_stage_drc_field_cuda(const uint16_t *raw, int ocols, int orows, unsigned long long *sum, cudaStream_t st,
                            xt_msg *msg) {
  int c0, c1, r0, r1;
  xt_drc_field_box(ocols, orows, &c0, &c1, &r0, &r1);
  if (c1 <= c0 || r1 <= r0) return 0;
  k_drc_field<<<XT_DRC_FIELD_BLOCKS, XT_STAGE_BLOCK, 0, st>>>(raw, ocols, c0, c1, r0, r1, sum);
  XT_SCK(cudaGetLastError());
  return 0;
}

/* Thread mapping: one block. Thread 0 measures the frame just read out (when `measure`), records it,
 * steps the loop and sets the next frame's exposure; then the block copies the next kV's tables from
 * the cache slots into `live`, k1, k2 and the flat sums times the next mAs (the stages then run with
 * fc.mas = 1). In: the loop (L), the bank, the slots, *sum (zeroed after reading). Out: L, live, rec. */
__global__ void __launch_bounds__(XT_STAGE_BLOCK)
    k_drc_step(xt_drc_dev *L, const xt_drc_bank *bank, const xt_chain_tables *slots, xt_chain_tables *live,
               unsigned long long *sum, unsigned long long n, xt_drc_law law, xt_drc_meter m, int measure,
               xt_chain_drc_frame *rec) {
  __shared__ int slot;
  __shared__ float scale;
  if (threadIdx.x == 0) {
    if (measure) {
      const unsigned long long s = *sum;
      *sum = 0;
      int k = (int)L->kv - XT_DRC_BANK_KV0;
      k = k >= bank->n ? bank->n - 1 : k; /* an empty bank (drc switched on without one): slot 0 */
      k = k < 0 ? 0 : k;
      rec->kv = L->kv;
      rec->mas = L->mas;
      rec->pulse_ms = L->pulse_ms;
      rec->field_sum = s;
      rec->field_n = n;
      xt_drc_step(&L->st, &law, L->kv, L->mas, xt_drc_ngy(s, n, &m, bank->flat_per_ugy[k]));
      rec->drc = L->st;
    }
    xt_drc_exposure_on(&law.curve, L->st.s, law.kv_max, &L->kv, &L->pulse_ms, &L->mas);
    int k = (int)L->kv - XT_DRC_BANK_KV0;
    k = k >= bank->n ? bank->n - 1 : k;
    k = k < 0 ? 0 : k;
    slot = bank->slot[k];
    scale = (float)L->mas;
  }
  __syncthreads();
  const xt_chain_tables *t = slots + slot;
  const unsigned *src = (const unsigned *)t;
  unsigned *dst = (unsigned *)live;
  for (int i = threadIdx.x; i < (int)(sizeof *t / 4); i += blockDim.x) dst[i] = src[i];
  __syncthreads();
  for (int b = threadIdx.x; b < t->nbins; b += blockDim.x) {
    live->k1[b] = t->k1[b] * scale;
    live->k2[b] = t->k2[b] * scale;
  }
  if (threadIdx.x == 0) {
    live->flat1 = t->flat1 * scale;
    live->flat2 = t->flat2 * scale;
  }
}

int xt_stage_drc_step_cuda(xt_drc_dev *L, const xt_drc_bank *bank, const xt_chain_tables *slots, xt_chain_tables *live,
                           unsigned long long *sum, unsigned long long n, const xt_drc_law *law, const xt_drc_meter *m,
                           int measure, xt_chain_drc_frame *rec, cudaStream_t st, xt_msg *msg) {
  k_drc_step<<<1, XT_STAGE_BLOCK, 0, st>>>(L, bank, slots, live, sum, n, *law, *m, measure, rec);
  XT_SCK(cudaGetLastError());
  return 0;
}
