/* TEMPORARY (A/B measurement build): main's detect, blur and readout launchers, renamed. */
#include "xt_stage_cuda.h"
typedef struct xt_draw_restM {
  uint32_t i;
  int it;
  float s, q;
} xt_draw_restM;
int xt_stage_detectM_cuda(const xt_chain_tables *d_tab, const xt_chain_frame_const *fc, const float *A, float *X,
                          float *S, cudaStream_t st, xt_msg *msg);
int xt_stage_detect_sumsM_cuda(const xt_chain_tables *d_tab, const xt_chain_frame_const *fc, const float *P, float *X,
                               float *S, xt_draw_restM *rest, unsigned *rest_n, int parity, cudaStream_t st,
                               xt_msg *msg);
int xt_stage_blurM_cuda(const xt_chain_frame_const *fc, const float *in, float *out, cudaStream_t st, xt_msg *msg);
int xt_stage_readoutM_cuda(const xt_chain_tables *d_tab, const xt_chain_frame_const *fc, const float *gain,
                           const float *offset, const unsigned char *defect, const float *D, float *lag, uint16_t *raw,
                           float *FA, float *Y, cudaStream_t st, xt_msg *msg);
