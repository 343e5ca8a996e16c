/* libFuzzer entry point for the model readers that are not volumes: NanoVDB (.nvdb) and the
 * Gaussian-mixture files (.xgmm native, .gmm thesis layout, .gmm.json). The input is written to a
 * temporary file under the reader's name and loaded through xt_model_load (what the CLI and the
 * server call); a model that loads is then rendered on a tiny detector by the CPU reference, so
 * that the traversal of an untrusted grid or mixture is fuzzed too, not only its parsing. Any
 * error code is fine; crashes, leaks, hangs and sanitizer reports are not.
 *
 * Seed corpora: tests/fuzz/nvdb/ and tests/fuzz/gmm/ (small files made by our own writers, and
 * hostile ones); ctest test_fuzz_models replays both through this same code (built with
 * XT_FUZZ_NO_ENTRY), every file under every reader and option. Long runs: scripts/long-fuzz
 * fuzz_models. By hand (clang build):
 *   build-fuzz/tests/fuzz_models -max_len=400000 -dict=tests/fuzz/models.dict -max_total_time=60 CORPUS
 * with CORPUS a copy of both seed folders (libFuzzer adds files to it); scripts/long-fuzz also adds
 * each seed with its reader's byte appended (the JSON reader is blind otherwise: jansson carries no
 * coverage instrumentation, so a seed cut by one byte never parses and is dropped). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "xt_fuzz_models.h"
#include "xt_load.h"
#include "xt_proj.h"

const char *const xt_fuzz_models_names[XT_FUZZ_MODELS_NAMES] = {"f.nvdb", "f.xgmm", "f.gmm", "f.gmm.json"};

static char dir[64];

static void remove_dir(void) { rmdir(dir); } /* empty: each load unlinks its file */

/* The model centred on the isocentre and rendered on 8 x 8 pixels that cover its bounds: every
 * ray meets the model's box, so the reader's checked offsets are followed. */
static int render_small(xt_model *m, xt_msg *msg) {
  xt_vec3 lo, hi;
  int rc = xt_model_bounds(m, &lo, &hi, msg);
  if (rc) return rc;
  const double l[3] = {lo.x, lo.y, lo.z}, h[3] = {hi.x, hi.y, hi.z};
  double span = 0;
  for (int a = 0; a < 3; a++) {
    m->placement.t[a] -= 0.5 * (l[a] + h[a]);
    if (h[a] - l[a] > span) span = h[a] - l[a];
  }
  /* magnification sid/sod = 1.5; 8 pixels cover the largest side (within the pitch limits: a huge
   * model is met by the middle rays, the source may lie inside it) */
  double pitch = span * 1.5 / 8;
  if (!(pitch > 0.01)) pitch = 0.01;
  if (pitch > 99) pitch = 99;
  xt_detector_mode mode = xt_mode_custom("fuzz", 8, 8, pitch, pitch, 800, 1200);
  xt_pose p = xt_pose_default(&mode);
  p.primary_deg = 30, p.secondary_deg = 20;
  xt_geometry g;
  if ((rc = xt_geom_compute(&p, &mode, &g, msg))) return rc;
  double out[64];
  const xt_model *ms[1] = {m};
  return xt_ref_render_f64(ms, 1, &g, out, 1, msg);
}

int xt_fuzz_models_load(const uint8_t *data, size_t size, int name, int option) {
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "/tmp/xt_fuzz_models_XXXXXX");
    if (!mkdtemp(dir)) return XT_EIO;
    atexit(remove_dir);
  }
  char path[128];
  snprintf(path, sizeof path, "%s/%s", dir, xt_fuzz_models_names[name % XT_FUZZ_MODELS_NAMES]);
  FILE *f = fopen(path, "wb");
  if (!f) return XT_EIO;
  if (size) fwrite(data, 1, size, f);
  fclose(f);
  /* Options (only .nvdb reads them; the mixtures must ignore them): the file's first grid, or a
   * grid by name (one the seeds hold, one no file holds); labels asked for; a HU conversion (refused
   * for grids); confined to the fuzz folder (as the server's POST /v1/models is). */
  static const char *const grids[] = {NULL, "density", "labels", "nonesuch"};
  const char *root = dir;
  xt_load_options o = {.convert = option & 4 ? XT_LOAD_LABELS : XT_LOAD_MU, .grid = grids[option & 3]};
  if (option & 8) o.convert = XT_LOAD_HU_TO_MU;
  if (option & 16) {
    o.roots = &root;
    o.nroots = 1;
  }
  xt_model *m = NULL;
  xt_msg msg;
  int rc = xt_model_load(path, &o, NULL, &m, &msg);
  if (rc == 0) {
    rc = render_small(m, &msg);
    xt_model_free(m);
  } else if (m || !msg.text[0] || strchr(msg.text, '\n')) {
    /* the loaders' promise: nothing made on failure, one line of detail */
    fprintf(stderr, "fuzz_models: %s: rc %d with model %p, message \"%s\"\n", path, rc, (void *)m, msg.text);
    abort();
  }
  unlink(path);
  return rc;
}

#ifndef XT_FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The last byte picks the reader (% 4) and the options (/ 4 % 32, as above): one load per
 * execution. The rest is the file. XT_FUZZ_MODELS_READER=0..3 pins the reader (to give one reader
 * a whole run); the last byte still picks the options. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int pinned = -2;
  if (pinned == -2) {
    const char *e = getenv("XT_FUZZ_MODELS_READER");
    pinned = e && *e ? atoi(e) % XT_FUZZ_MODELS_NAMES : -1;
  }
  unsigned sel = size ? data[size - 1] : 0;
  xt_fuzz_models_load(data, size ? size - 1 : 0, pinned >= 0 ? pinned : (int)(sel % XT_FUZZ_MODELS_NAMES),
                      (int)(sel / XT_FUZZ_MODELS_NAMES % XT_FUZZ_MODELS_OPTIONS));
  return 0;
}
#endif
