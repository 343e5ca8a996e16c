/* Test helper for tests/test_dicom.py: loads one model through xt_model_load (the path the CLI
 * and the server take) and prints what the loader made of it as one JSON object on stdout: dims,
 * index_to_model, the report (warnings, choices); with --npy FILE also the voxels (float32 mu or
 * uint8 labels, shape (nz, ny, nx), C order). Failure: exit 1 and the loader's one-line message
 * on stderr, as {"error": code-name, "message": ...} on stdout.
 *
 *   xt_load_dump PATH [--convert mu|hu|hu-labels|labels] [--series UID] [--nan-value V]
 *                [--hu-model linear|bilinear] [--nifti-transform sform|qform] [--energy KEV]
 *                [--ct-energy KEV] [--npy FILE] */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xt_load.h"
#include "xt_output.h"

static int npy(const char *path, const xt_volume *v) {
  FILE *f = fopen(path, "wb");
  if (!f) return 1;
  const int shape[3] = {v->dim[2], v->dim[1], v->dim[0]};
  int bad = xt_npy_write(f, v->type == XT_VOXEL_F32 ? "<f4" : "|u1", 3, shape, v->data, NULL) != 0;
  return (fclose(f) != 0) | bad;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: xt_load_dump PATH [options]\n");
    return 2;
  }
  xt_load_options o = {0};
  const char *npy_path = NULL;
  for (int i = 2; i + 1 < argc; i += 2) {
    const char *k = argv[i], *v = argv[i + 1];
    if (!strcmp(k, "--convert"))
      o.convert = !strcmp(v, "hu") ? XT_LOAD_HU_TO_MU : !strcmp(v, "hu-labels") ? XT_LOAD_HU_TO_LABELS
                  : !strcmp(v, "labels")                                        ? XT_LOAD_LABELS
                                                                               : XT_LOAD_MU;
    else if (!strcmp(k, "--series")) o.dicom_series = v;
    else if (!strcmp(k, "--nan-value")) o.nan_fill = 1, o.nan_value = atof(v);
    else if (!strcmp(k, "--hu-model")) o.hu_model = !strcmp(v, "linear") ? XT_HU_LINEAR : XT_HU_BILINEAR;
    else if (!strcmp(k, "--nifti-transform")) o.nifti_xform = !strcmp(v, "qform") ? XT_NIFTI_QFORM : XT_NIFTI_SFORM;
    else if (!strcmp(k, "--energy")) o.energy_kev = atof(v);
    else if (!strcmp(k, "--ct-energy")) o.ct_energy_kev = atof(v);
    else if (!strcmp(k, "--npy")) npy_path = v;
    else {
      fprintf(stderr, "xt_load_dump: unknown option %s\n", k);
      return 2;
    }
  }
  xt_model *m = NULL;
  xt_msg msg = {{0}};
  int rc = xt_model_load(argv[1], &o, NULL, &m, &msg);
  if (rc) {
    fprintf(stderr, "%s\n", msg.text);
    json_t *e = json_pack("{s:s,s:s}", "error", xt_errname(rc), "message", msg.text);
    json_dumpf(e, stdout, 0);
    json_decref(e);
    return 1;
  }
  const xt_volume *v = xt_model_volume(m);
  const xt_load_report *r = m->report;
  json_t *aff = json_array();
  for (int i = 0; i < 3; i++)
    json_array_append_new(aff, json_pack("[f,f,f,f]", v->index_to_model.m[i][0], v->index_to_model.m[i][1],
                                         v->index_to_model.m[i][2], v->index_to_model.t[i]));
  json_t *warn = json_array();
  for (int i = 0; i < r->nwarn; i++)
    json_array_append_new(warn, json_pack("{s:s,s:s}", "code", r->warn[i].code, "text", r->warn[i].text));
  json_t *o_ = json_pack("{s:s,s:[i,i,i],s:o,s:s,s:o,s:f,s:f,s:I,s:s,s:s,s:i,s:i,s:f,s:s,s:i,s:i,s:i,s:f,s:s,s:s,s:s}", "name",
                         m->name, "dims", v->dim[0], v->dim[1], v->dim[2], "index_to_model", aff, "type",
                         v->type == XT_VOXEL_F32 ? "f32" : "u8", "warnings", warn, "value_min", r->value_min,
                         "value_max", r->value_max, "nan_filled", (json_int_t)r->nan_filled, "format", r->format,
                         "xform", r->xform, "sform_code", r->sform_code, "qform_code", r->qform_code,
                         "xform_disagree_mm", r->xform_disagree_mm, "series_uid", r->series_uid, "nseries", r->nseries,
                         "nslices", r->nslices, "nskipped", r->nskipped, "slice_step_mm", r->slice_step_mm, "modality",
                         r->modality, "hu_model", r->hu_model, "transfer_syntax", r->transfer_syntax);
  json_dumpf(o_, stdout, JSON_REAL_PRECISION(17));
  json_decref(o_);
  putchar('\n');
  int bad = npy_path ? npy(npy_path, v) : 0;
  xt_model_free(m);
  return bad;
}
