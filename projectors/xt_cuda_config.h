/* Launch shapes and limits of the CUDA projector, in one place (STYLE.md: block sizes live in
 * one config header). Plain C so the bench and tests can print them. */
#ifndef XT_CUDA_CONFIG_H
#define XT_CUDA_CONFIG_H

/* A block renders a TILE_W x TILE_H pixel tile; each warp a WARP_W x WARP_H sub-tile, so the 32
 * rays of a warp are neighbours in both detector directions and their voxel fetches overlap. */
#define XT_CUDA_WARP_W 8
#define XT_CUDA_WARP_H 4
#define XT_CUDA_TILE_W 16
#define XT_CUDA_TILE_H 16
#define XT_CUDA_BLOCK_THREADS (XT_CUDA_TILE_W * XT_CUDA_TILE_H)
/* Blocks per SM asked of the compiler (__launch_bounds__): caps registers at 65536/(256*5) = 51
 * (48 used, 40 warps per SM); 6 spills (docs/BENCHMARKS.md). */
#define XT_CUDA_MIN_BLOCKS 5
/* The brick kernel (exact skipping of uniform regions) carries more state: 4 blocks, 64 regs. */
#define XT_CUDA_MIN_BLOCKS_BRICKS 4
/* Bricks: edge 2^XT_CUDA_BRICK_LOG2 voxels by default; used when at least this fraction of a
 * model's bricks is uniform (else the plain march, which has no per-brick cost). */
#define XT_CUDA_BRICK_LOG2 3
#define XT_CUDA_BRICK_MIN_UNIFORM 0.2

/* Models one projector renders in one launch; each frame carries one world->cell map per model. */
#define XT_CUDA_MAX_MODELS 8
/* Frames per launch of render_batch, and the device/pinned chunk budget of the batch pipeline. */
#define XT_CUDA_BATCH_MAX_FRAMES 1024
#define XT_CUDA_BATCH_CHUNK_BYTES ((size_t)64 << 20)

#endif /* XT_CUDA_CONFIG_H */
