/* Launch shapes and limits of the CUDA projector, in one place (STYLE.md: block sizes live in
 * one config header). Plain C so the bench and tests can print them. */
#ifndef XT_CUDA_CONFIG_H
#define XT_CUDA_CONFIG_H

/* A block renders a TILE_W x TILE_H pixel tile; each warp a WARP_W x WARP_H sub-tile, so the 32
 * rays of a warp are neighbours in both detector directions and their voxel fetches overlap. */
#ifndef XT_CUDA_WARP_W /* overridable for tiling experiments (-DXT_CUDA_WARP_W=...) */
#define XT_CUDA_WARP_W 8
#endif
#ifndef XT_CUDA_WARP_H /* overridable for tiling experiments (-DXT_CUDA_WARP_H=...) */
#define XT_CUDA_WARP_H 4
#endif
#ifndef XT_CUDA_TILE_W /* overridable for tiling experiments (-DXT_CUDA_TILE_W=...) */
#define XT_CUDA_TILE_W 16
#endif
#ifndef XT_CUDA_TILE_H /* overridable for tiling experiments (-DXT_CUDA_TILE_H=...) */
#define XT_CUDA_TILE_H 16
#endif
#define XT_CUDA_BLOCK_THREADS (XT_CUDA_TILE_W * XT_CUDA_TILE_H)
/* Blocks per SM asked of the compiler (__launch_bounds__): caps registers at 65536/(256*4) = 64
 * (32 warps per SM). The exact plane counts and the content hull need more than the 51 that 5
 * blocks allow: at 5 the set-up spills 24-48 bytes (docs/BENCHMARKS.md). */
#define XT_CUDA_MIN_BLOCKS 4
/* The channels kernel keeps 8 more accumulators and a weight row per step: with linear voxels it
 * fits the 64 registers of 4 blocks per SM; the texture variant needs 3 (85 registers) to stay free
 * of spills. */
#define XT_CUDA_CH_MIN_BLOCKS_LINEAR 4
#define XT_CUDA_CH_MIN_BLOCKS_TEXTURE 3

/* The content hull: slabs of a 26-DOP, and their conservative widening (cells per unit of the
 * direction's 1-norm) when rays are clipped against them in float. */
#define XT_HULL_DIRS 13
#define XT_HULL_MARGIN 0.05f

/* AUTO voxel storage: linear when |u . x| of the detector's u in model 0's cell space is at least
 * this (u within ~25 deg of the x rows), else the texture copy. */
#define XT_CUDA_LINEAR_MIN_ALIGN 0.9

/* Models one projector renders in one launch; each frame carries one world->cell map per model. */
#define XT_CUDA_MAX_MODELS 8
/* Frames per launch of render_batch, and the device/pinned chunk budget of the batch pipeline. */
#define XT_CUDA_BATCH_MAX_FRAMES 1024
#define XT_CUDA_BATCH_CHUNK_BYTES ((size_t)64 << 20)
/* Frames per launch of a batch into page-locked caller memory (no staging): small, so that each
 * chunk's copy-out overlaps the next chunk's kernels within one call. */
#define XT_CUDA_DIRECT_CHUNK_BYTES ((size_t)4 << 20)

/* The Gaussian kind (proj_gmm.cu): a block renders one GMM_TILE_W x GMM_TILE_H tile with
 * GMM_BLOCK threads of two pixels each (rows r and r + GMM_WARP_H / 2 of its warp's region),
 * loading the tile's Gaussians into shared memory GMM_BATCH at a time (one per thread). Each warp
 * covers a GMM_WARP_W x GMM_WARP_H region and skips the Gaussians whose conic misses it (a
 * per-(tile, Gaussian) mask computed at load). The preprocess and duplicate kernels run
 * GMM_PRE_THREADS threads per block. */
#define XT_GMM_TILE_W 16
#define XT_GMM_TILE_H 16
#define XT_GMM_WARP_W 8
#define XT_GMM_WARP_H 8
#define XT_GMM_BLOCK (XT_GMM_TILE_W * XT_GMM_TILE_H / 2)
#define XT_GMM_BATCH XT_GMM_BLOCK
#define XT_GMM_PRE_THREADS 128
/* Lanes per Gaussian in the duplicate kernel (a Gaussian's tile rows, in turn). */
#define XT_GMM_DUP_LANES 8

#endif /* XT_CUDA_CONFIG_H */
