/* POST /v1/render's geometry: the compact JSON the reply carries in its X-Xtwin-Geometry header
 * and, for a PNG, in the tEXt chunk "xtwin-geometry" (api/rest.md), from the frame record's fields
 * as the stream header and the sidecar state them. */
#include "xt_record.h"

#include <jansson.h>

#include "xt_json_build.h"

json_t *xt_render_geometry_json(const xt_frame_fields *ff, const xt_geometry *g, const char *pixel_format) {
  const double *p = ff->pose;
  json_t *pose = json_pack("{s:f,s:f,s:f,s:f,s:f,s:[f,f,f]}", "primary_deg", p[0], "secondary_deg", p[1],
                           "detector_rot_deg", p[2], "sod_mm", p[3], "sid_mm", p[4], "table_mm", p[5], p[6], p[7]);
  json_t *P = json_array();
  for (int r = 0; r < 3; r++) {
    json_t *row = json_array();
    for (int c = 0; c < 4; c++) json_array_append_new(row, json_real(ff->P[r][c]));
    json_array_append_new(P, row);
  }
  xt_jb b = {0};
  json_t *readout = xt_readout_json(&b, ff);
  if (b.bad) {
    json_decref(pose);
    json_decref(P);
    json_decref(readout);
    return NULL;
  }
  /* "o" takes pose, P and readout even when the pack fails */
  return json_pack("{s:s,s:i,s:i,s:[f,f],s:o,s:o,s:[f,f,f],s:[f,f,f],s:s,s:o}", "mode", ff->mode, "rows", g->mode.rows,
                   "cols", g->mode.cols, "pitch_mm", ff->out_pitch_mm[0], ff->out_pitch_mm[1], "pose", pose, "P", P,
                   "source_mm", g->source.x, g->source.y, g->source.z, "detector_center_mm", g->det_center.x,
                   g->det_center.y, g->det_center.z, "pixel_format", pixel_format, "readout", readout);
}
