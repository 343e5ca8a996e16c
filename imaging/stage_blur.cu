/* Stages "blur" and "readout" on the GPU, one kernel (twins of stage_blur_cpu.c and
 * stage_readout_cpu.c). The blur is the separable Gaussian PSF, a rows pass and a columns pass,
 * edges replicated, the same weights and summation order as the CPU: a block stages its tile of the
 * input with the halo in shared memory, runs the rows pass over the tile's rows and the halo rows
 * into shared memory and the columns pass from there, so the intermediate plane never reaches
 * memory (the halo rows' rows pass is done twice, by the two blocks that share them: a few FMAs).
 *
 * The readout is the blur's epilogue: the block holds its output tile's blurred signal D in
 * registers (a whole number of bins: the tile's sides are even) and reads it out there - binning,
 * lag, panel maps, electronic noise, defects, ADC (xt_readout_pixel) - and, when the frame is
 * processed, makes the processing's first pass where that pass is per pixel (every pixel but the
 * defective ones: correction, log against the flat field, temporal filter; stage_process_cpu.c's
 * pass 1 with the same functions). D reaches memory only when the caller asks for it (tests). The
 * flat field is evaluated where it is needed (xt_stage_flat_adu), never stored. Against a blur
 * kernel and a readout kernel this saves D's write and read (8 bytes a render pixel), the flat
 * plane's write (4 bytes an output pixel) and a launch. The readout's inputs (lag, maps, the
 * temporal state) are loaded at the kernel's start, so that their latency overlaps the blur's.
 * Each output is the same sums of the same values in the same order as the separate kernels'. */
#include "xt_stage_cuda.h"

#define BLUR_TW 32 /* a block's output tile, columns x rows (its threads); both even: whole 2x2 bins */
#define BLUR_TH 8
#define BLUR_IW (BLUR_TW + 2 * XT_BLUR_MAX_R)
#define BLUR_IH (BLUR_TH + 2 * XT_BLUR_MAX_R)
typedef char blur_tile_holds_whole_bins_[BLUR_TW % 2 == 0 && BLUR_TH % 2 == 0 ? 1 : -1];

/* An output pixel's readout inputs, loaded before the blur. */
typedef struct readout_in {
  float l[XT_LAG_TERMS]; /* lag state */
  float gn, of, yp;      /* gain, offset, the temporal state (processed frames) */
  unsigned char dc;      /* defect code */
} readout_in;

static __device__ __forceinline__ void readout_load(const xt_chain_frame_const &fc, const xt_stage_readout_io &io,
                                                    unsigned o, readout_in *in) {
  const unsigned oplane = (unsigned)fc.ocols * (unsigned)fc.orows;
#pragma unroll
  for (int k = 0; k < XT_LAG_TERMS; k++) in->l[k] = io.lag[(size_t)oplane * k + o];
  in->gn = __ldg(io.gain + o);
  in->of = __ldg(io.offset + o);
  in->dc = __ldg(io.defect + o);
  in->yp = io.Y ? io.Y[o] : 0.f;
}

/* Output pixel (r, c) = o's readout from its collected charge x (keV, the bin's sum). */
static __device__ __forceinline__ void readout_px(const xt_chain_frame_const &fc, const xt_stage_readout_io &io, int r,
                                                  int c, unsigned o, readout_in *in, float x) {
  const unsigned oplane = (unsigned)fc.ocols * (unsigned)fc.orows;
  xt_rng g;
  xt_rng_init(&g, fc.seed, fc.frame, (uint32_t)o, XT_RNG_READ);
  const uint16_t code = xt_readout_pixel(&fc.ro, x * fc.ro.adu_per_kev, in->l, in->gn, in->of, in->dc, &g);
  io.raw[o] = code;
#pragma unroll
  for (int k = 0; k < XT_LAG_TERMS; k++) io.lag[(size_t)oplane * k + o] = in->l[k];
  if (io.Y && in->dc == XT_DEFECT_NONE) {
    const float fa = xt_stage_flat_adu(fc, __ldg(&io.tab->flat1), r, c);
    io.Y[o] = xt_process_temporal(&fc.pc, xt_process_log(xt_process_correct((float)code, in->gn, in->of), fa), in->yp);
  }
}

/* Thread mapping: a block is a BLUR_TW x BLUR_TH tile of the render grid (blockIdx.x, .y), thread
 * (x, y) its pixel; with 2x2 binning the tile's (BLUR_TW / 2) x (BLUR_TH / 2) output pixels are read
 * out by the block's first threads. In: X, the kernels fc.bu (along columns u, within a row) and
 * fc.bv (along rows v), the panel maps, flat1. Out: raw, lag, Y; D when non-NULL. */
__global__ void __launch_bounds__(BLUR_TW *BLUR_TH)
    k_blur(const __grid_constant__ xt_chain_frame_const fc, const __grid_constant__ xt_stage_readout_io io) {
  __shared__ float s_in[BLUR_IH][BLUR_IW]; /* input rows clamp(r0 - rv + ly), columns clamp(c0 - ru + lx) */
  __shared__ float s_t[BLUR_IH][BLUR_TW];  /* the rows pass of those rows at the tile's columns */
  __shared__ float s_d[BLUR_TH][BLUR_TW];  /* D, for 2x2 binning */
  const int cols = fc.cols, rows = fc.rows;
  const int ru = fc.bu.r, rv = fc.bv.r, iw = BLUR_TW + 2 * ru, ih = BLUR_TH + 2 * rv;
  const int c0 = blockIdx.x * BLUR_TW, r0 = blockIdx.y * BLUR_TH;
  const int tid = threadIdx.y * BLUR_TW + threadIdx.x;
  /* the output pixel this thread reads out: its own (no binning), or with 2x2 binning one of the
   * tile's (BLUR_TW / 2) x (BLUR_TH / 2) for the first threads; its inputs loaded now */
  const int bin = fc.ro.bin;
  const int olx = bin == 1 ? (int)threadIdx.x : tid % (BLUR_TW / 2), oly = bin == 1 ? (int)threadIdx.y : tid / (BLUR_TW / 2);
  const int oc = c0 / bin + olx, orr = r0 / bin + oly;
  const bool reads = (bin == 1 || tid < (BLUR_TW / 2) * (BLUR_TH / 2)) && oc < fc.ocols && orr < fc.orows;
  const unsigned o = (unsigned)orr * (unsigned)fc.ocols + (unsigned)oc;
  readout_in in;
  if (reads) readout_load(fc, io, o, &in);
  for (int k = tid; k < ih * iw; k += BLUR_TW * BLUR_TH) {
    const int ly = k / iw, lx = k - ly * iw;
    int y = r0 - rv + ly, x = c0 - ru + lx;
    y = y < 0 ? 0 : (y >= rows ? rows - 1 : y);
    x = x < 0 ? 0 : (x >= cols ? cols - 1 : x);
    s_in[ly][lx] = __ldg(io.X + (size_t)y * cols + x);
  }
  __syncthreads();
  for (int k = tid; k < ih * BLUR_TW; k += BLUR_TW * BLUR_TH) {
    const int ly = k / BLUR_TW, lx = k - ly * BLUR_TW;
    float s = 0.f;
    for (int j = -ru; j <= ru; j++)
      s += fc.bu.w[j + ru] * s_in[ly][lx + ru + j];
    s_t[ly][lx] = s;
  }
  __syncthreads();
  const int c = c0 + threadIdx.x, r = r0 + threadIdx.y;
  const bool inside = c < cols && r < rows;
  float d = 0.f;
  if (inside) {
    for (int j = -rv; j <= rv; j++)
      d += fc.bv.w[j + rv] * s_t[threadIdx.y + rv + j][threadIdx.x];
    if (io.D) io.D[(size_t)r * cols + c] = d;
  }
  if (bin == 1) {
    if (reads) {
      float x = 0.f; /* the binned sum of one pixel, as the readout's loop makes it */
      x += d;
      readout_px(fc, io, orr, oc, o, &in, x);
    }
    return;
  }
  s_d[threadIdx.y][threadIdx.x] = d;
  __syncthreads();
  if (reads) { /* 2x2 binning: the bin's sum in the readout's order; its four render pixels are inside the grid */
    float x = 0.f;
    x += s_d[2 * oly][2 * olx];
    x += s_d[2 * oly][2 * olx + 1];
    x += s_d[2 * oly + 1][2 * olx];
    x += s_d[2 * oly + 1][2 * olx + 1];
    readout_px(fc, io, orr, oc, o, &in, x);
  }
}

int xt_stage_blur_readout_cuda(const xt_chain_frame_const *fc, const xt_stage_readout_io *io, cudaStream_t st,
                               xt_msg *msg) {
  if (fc->bu.r > XT_BLUR_MAX_R || fc->bv.r > XT_BLUR_MAX_R || fc->bu.r < 0 || fc->bv.r < 0)
    return xt_fail(msg, XT_EINTERNAL, "chain: blur radius %d, %d", fc->bu.r, fc->bv.r);
  if (fc->ro.bin != 1 && fc->ro.bin != 2)
    return xt_fail(msg, XT_EINTERNAL, "chain: binning %d", fc->ro.bin);
  const dim3 grid((unsigned)((fc->cols + BLUR_TW - 1) / BLUR_TW), (unsigned)((fc->rows + BLUR_TH - 1) / BLUR_TH));
  k_blur<<<grid, dim3(BLUR_TW, BLUR_TH), 0, st>>>(*fc, *io);
  XT_SCK(cudaGetLastError());
  return 0;
}
