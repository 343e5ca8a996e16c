/* The load report (xt_model.h) as JSON: one builder for the CLI's sidecar ("load") and the
 * server's model report, so both say the same thing in the same words. */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "xt_load.h"

/* jansson takes ownership of val even when set fails; a NULL val (NaN, out of memory) is dropped. */
static void put(json_t *o, const char *k, json_t *v) { json_object_set_new(o, k, v); }
static json_t *num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

json_t *xt_load_report_json(const xt_load_report *r) {
  json_t *o = json_object();
  if (!o) return NULL;
  put(o, "format", json_string(r->format));
  json_t *w = json_array();
  for (int i = 0; w && i < r->nwarn; i++)
    json_array_append_new(w, json_pack("{s:s,s:s}", "code", r->warn[i].code, "message", r->warn[i].text));
  put(o, "warnings", w);
  if (r->nwarn_dropped) put(o, "warnings_dropped", json_integer(r->nwarn_dropped));
  put(o, "value_min", num(r->value_min));
  put(o, "value_max", num(r->value_max));
  put(o, "value_note", json_string("voxel values after the file's own scaling (NIfTI scl_*, DICOM rescale), before conversion"));
  if (r->nan_filled) {
    put(o, "nan_filled", json_integer((json_int_t)r->nan_filled));
    put(o, "nan_value", num(r->nan_value));
  }
  if (r->hu_model[0]) {
    put(o, "hu_model", json_string(r->hu_model));
    if (r->ct_energy_kev > 0) put(o, "ct_energy_kev", num(r->ct_energy_kev));
  }
  if (r->xform[0])
    put(o, "nifti", json_pack("{s:s,s:i,s:i,s:o}", "transform_used", r->xform, "sform_code", r->sform_code, "qform_code",
                              r->qform_code, "qform_sform_disagreement_mm",
                              r->xform_disagree_mm >= 0 ? num(r->xform_disagree_mm) : json_null()));
  if (!strcmp(r->format, "dicom"))
    put(o, "dicom", json_pack("{s:s,s:s,s:s,s:s,s:i,s:o,s:b,s:i,s:i}", "series_instance_uid", r->series_uid, "modality",
                              r->modality, "series_description", r->series_desc, "transfer_syntax_uid", r->transfer_syntax,
                              "slices", r->nslices, "slice_step_mm", num(r->slice_step_mm), "enhanced_multiframe",
                              r->enhanced, "series_found", r->nseries, "files_skipped", r->nskipped));
  return o;
}
