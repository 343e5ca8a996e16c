/* xtwin-bench: the projector benchmark as a standalone program (depends only on xt_proj,
 * xt_models and xt_scene, so it runs on the GPU machine without the CLI's dependencies). */
#include "xt_bench.h"

int main(int argc, char **argv) { return xt_bench_main(argc, argv); }
