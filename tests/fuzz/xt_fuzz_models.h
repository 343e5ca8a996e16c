/* The model-reader fuzz target's one load (tests/fuzz/fuzz_models.c), shared by the libFuzzer entry
 * and the seed-corpus replay (tests/test_fuzz_models.c). */
#ifndef XT_FUZZ_MODELS_H
#define XT_FUZZ_MODELS_H

#include <stddef.h>
#include <stdint.h>

/* Readers, by file name: 0 .nvdb, 1 .xgmm, 2 .gmm, 3 .gmm.json. */
enum { XT_FUZZ_MODELS_NAMES = 4, XT_FUZZ_MODELS_OPTIONS = 32 };
extern const char *const xt_fuzz_models_names[XT_FUZZ_MODELS_NAMES];

/* Writes data under reader `name`'s file name, loads it with options `option` (bits: 0-1 the grid
 * name, 2 labels, 3 a HU conversion, 4 confined to the folder) and renders what loads. Returns the
 * load's (or render's) code; aborts when a failed load breaks the loaders' promise (a model left
 * behind, no or a multi-line message). */
int xt_fuzz_models_load(const uint8_t *data, size_t size, int name, int option);

#endif /* XT_FUZZ_MODELS_H */
