/* The DICOM objects of a run (xt_dicom.h): Enhanced XA, classic XA, the X-Ray Radiation Dose SR.
 * Each is the list of its modules' elements, written through the builder of xt_dcw.h from the
 * frames' fields (xt_frame_fields_of), so that a DICOM file states a frame as the stream header and
 * the sidecar do. Geometry mapping (docs/geometry.md, "DICOM"):
 *
 *   Positioner (Isocenter) Primary / Secondary Angle   pose primary / secondary (LAO +, CRAN +)
 *   Positioner Isocenter Detector Rotation Angle        pose detector_rot (+ turns u towards v)
 *   Table X/Y/Z Position to Isocenter                   table_mm (LPS = the isocenter system for HFS)
 *   Distance Source to Isocenter / to Detector          sod / sid
 *   FOV Origin, Detector Binning, Position of Isocenter the readout: region, binning, and the
 *   Projection, Detector Element Spacing                  physical panel's centre (edge coordinates)
 *
 * Wall-clock times: the records carry CLOCK_MONOTONIC times; the run gives the wall time of its
 * first exposure and the others follow at their monotonic offsets (or at frame_ms apart when the
 * records have no times, as xtwin render's frames do). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xt_dicom.h"
#include "xt_record.h"

#define SOP_XA "1.2.840.10008.5.1.4.1.1.12.1"
#define SOP_EXA "1.2.840.10008.5.1.4.1.1.12.1.1"
#define SOP_RDSR "1.2.840.10008.5.1.4.1.1.88.67"
#define MANUFACTURER "xtwin"
#define MODEL "xtwin C-arm twin (Azurion-like)"

/* ------------------------------------------------------------------------------------------ */
/* Identity                                                                                   */
/* ------------------------------------------------------------------------------------------ */

typedef struct id_key {
  const char *key;
  size_t off, cap; /* cap - 1: the VR's length */
} id_key;
#define K(name, field) {name, offsetof(xt_dicom_identity, field), sizeof(((xt_dicom_identity *)0)->field)}
static const id_key id_keys[] = {
    K("patient_name", patient_name),       K("patient_id", patient_id),
    K("patient_birth_date", patient_birth_date), K("patient_sex", patient_sex),
    K("study_instance_uid", study_uid),    K("study_id", study_id),
    K("accession_number", accession_number), K("study_description", study_description),
    K("referring_physician", referring_physician), K("institution", institution),
    K("station_name", station),            K("operator_name", operator_name),
};
#undef K

/* What is wrong with a value of a key whose VR has a form (DA, CS, UI), or NULL. */
static const char *value_problem(const char *key, const char *s) {
  if (!strcmp(key, "patient_birth_date")) {
    if (!*s) return NULL;
    if (strlen(s) != 8 || strspn(s, "0123456789") != 8) return "expected a date YYYYMMDD (or \"\")";
  } else if (!strcmp(key, "patient_sex")) {
    if (*s && strcmp(s, "M") && strcmp(s, "F") && strcmp(s, "O")) return "expected \"M\", \"F\", \"O\" or \"\"";
  } else if (!strcmp(key, "study_instance_uid")) {
    if (!*s || strspn(s, "0123456789.") != strlen(s) || s[0] == '.' || s[strlen(s) - 1] == '.' || strstr(s, ".."))
      return "expected a UID: digits and dots, at most 64 characters";
  }
  return NULL;
}

int xt_dicom_identity_load(const char *path, xt_dicom_identity *id, xt_msg *msg) {
  memset(id, 0, sizeof *id);
  snprintf(id->patient_name, sizeof id->patient_name, "SYNTHETIC^XTWIN");
  snprintf(id->patient_id, sizeof id->patient_id, "XTWIN-SYNTHETIC");
  snprintf(id->patient_sex, sizeof id->patient_sex, "O");
  snprintf(id->study_id, sizeof id->study_id, "XTWIN");
  snprintf(id->study_description, sizeof id->study_description, "xtwin synthetic study (not a patient)");
  snprintf(id->institution, sizeof id->institution, "xtwin digital twin");
  snprintf(id->station, sizeof id->station, "XTWIN");
  id->synthetic = 1;
  xt_dcw_uid(id->study_uid);
  if (!path) return 0;
  json_error_t je;
  json_t *j = json_load_file(path, 0, &je);
  if (!j && je.line < 1) return xt_fail(msg, XT_EFORMAT, "%s", je.text); /* cannot be read: the text names the file */
  if (!j) return xt_fail(msg, XT_EFORMAT, "%s: line %d: %s", path, je.line, je.text);
  int rc = 0;
  if (!json_is_object(j)) {
    rc = xt_fail(msg, XT_EFORMAT, "%s: expected a JSON object of identity keys", path);
    goto done;
  }
  const char *key;
  json_t *v;
  json_object_foreach(j, key, v) {
    const id_key *k = NULL;
    for (size_t i = 0; i < sizeof id_keys / sizeof id_keys[0]; i++)
      if (strcmp(id_keys[i].key, key) == 0) k = &id_keys[i];
    if (!k) {
      rc = xt_fail(msg, XT_EFORMAT, "%s: unknown key \"%s\" (docs/dicom.md lists the identity keys)", path, key);
      goto done;
    }
    if (!json_is_string(v)) {
      rc = xt_fail(msg, XT_EFORMAT, "%s: \"%s\": expected a string", path, key);
      goto done;
    }
    const char *s = json_string_value(v);
    if (strlen(s) >= k->cap || strchr(s, '\\')) {
      rc = xt_fail(msg, XT_EFORMAT, "%s: \"%s\": longer than %zu characters or holds a backslash", path, key, k->cap - 1);
      goto done;
    }
    const char *bad = value_problem(key, s);
    if (bad) {
      rc = xt_fail(msg, XT_EFORMAT, "%s: \"%s\": %s", path, key, bad);
      goto done;
    }
    snprintf((char *)id + k->off, k->cap, "%s", s);
    if (!strcmp(key, "study_instance_uid")) id->study_uid_given = 1;
  }
  id->synthetic = 0;
done:
  json_decref(j);
  return rc;
}

void xt_dicom_run_uids(xt_dicom_run *r) {
  xt_dcw_uid(r->series_uid);
  xt_dcw_uid(r->sop_uid);
  xt_dcw_uid(r->classic_series_uid);
  xt_dcw_uid(r->classic_sop_uid);
  xt_dcw_uid(r->event_uid);
  xt_dcw_uid(r->frame_of_reference_uid);
}

/* ------------------------------------------------------------------------------------------ */
/* Shared pieces                                                                              */
/* ------------------------------------------------------------------------------------------ */

#define T(g, e) XT_TAG(0x##g, 0x##e)

/* Frame i's exposure time from the run's first, in microseconds. */
static int64_t frame_offset_us(const xt_dicom_run *r, int i) {
  const xt_acq_frame *f0 = &r->frames[0], *f = &r->frames[i];
  if (f0->t_exposure_ns && f->t_exposure_ns >= f0->t_exposure_ns)
    return (int64_t)((f->t_exposure_ns - f0->t_exposure_ns) / 1000u);
  return (int64_t)llround(i * r->frame_ms * 1000.0);
}

/* DA, TM and DT of a wall-clock time in microseconds (UTC); shared with xt_dicom_sr.c. */
void xt__dicom_wall(int64_t us, char da[9], char tm[14], char dt[27]) {
  time_t s = (time_t)(us / 1000000);
  const unsigned frac = (unsigned)((us % 1000000 + 1000000) % 1000000);
  struct tm t;
  char hms[8];
  gmtime_r(&s, &t);
  if (!strftime(da, 9, "%Y%m%d", &t)) snprintf(da, 9, "19700101");
  if (!strftime(hms, sizeof hms, "%H%M%S", &t)) snprintf(hms, sizeof hms, "000000");
  snprintf(tm, 14, "%.6s.%06u", hms, frac % 1000000u);
  snprintf(dt, 27, "%.8s%.13s+0000", da, tm);
}
#define wall xt__dicom_wall

/* The frame interval of the run in ms (the mean of its offsets, or frame_ms). */
static double run_frame_ms(const xt_dicom_run *r) {
  if (r->n < 2) return r->frame_ms > 0 ? r->frame_ms : 1000.0 / 15;
  return (double)frame_offset_us(r, r->n - 1) / 1000.0 / (r->n - 1);
}

static void patient_study(xt_dcw *d, const xt_dicom_identity *id, const char *da, const char *tm) {
  xt_dcw_str(d, T(0008, 0020), "DA", da); /* Study Date */
  xt_dcw_str(d, T(0008, 0030), "TM", tm);
  xt_dcw_str(d, T(0008, 0050), "SH", id->accession_number);
  xt_dcw_str(d, T(0008, 0080), "LO", id->institution);
  xt_dcw_str(d, T(0008, 0090), "PN", id->referring_physician);
  xt_dcw_str(d, T(0008, 1010), "SH", id->station);
  xt_dcw_str(d, T(0008, 1030), "LO", id->study_description);
  if (id->operator_name[0]) xt_dcw_str(d, T(0008, 1070), "PN", id->operator_name);
  xt_dcw_str(d, T(0010, 0010), "PN", id->patient_name);
  xt_dcw_str(d, T(0010, 0020), "LO", id->patient_id);
  xt_dcw_str(d, T(0010, 0030), "DA", id->patient_birth_date);
  xt_dcw_str(d, T(0010, 0040), "CS", id->patient_sex);
  if (id->synthetic) xt_dcw_str(d, T(0010, 4000), "LT", "synthetic: made by the xtwin digital twin, not a patient");
  xt_dcw_str(d, T(0020, 000D), "UI", id->study_uid);
  xt_dcw_str(d, T(0020, 0010), "SH", id->study_id);
}

static void equipment(xt_dcw *d, const xt_dicom_identity *id, const char *software) {
  xt_dcw_str(d, T(0008, 0070), "LO", MANUFACTURER);
  xt_dcw_str(d, T(0008, 1090), "LO", MODEL);
  xt_dcw_str(d, T(0018, 1000), "LO", "XTWIN-0001");
  xt_dcw_str(d, T(0018, 1020), "LO", software && *software ? software : "xtwin");
  (void)id;
}

/* A code sequence item's three elements. */
static void code(xt_dcw *d, const char *value, const char *scheme, const char *meaning) {
  xt_dcw_str(d, T(0008, 0100), "SH", value);
  xt_dcw_str(d, T(0008, 0102), "SH", scheme);
  xt_dcw_str(d, T(0008, 0104), "LO", meaning);
}

static void code_seq(xt_dcw *d, uint32_t tag, const char *value, const char *scheme, const char *meaning) {
  xt_dcw_seq(d, tag);
  xt_dcw_item(d);
  code(d, value, scheme, meaning);
  xt_dcw_end_item(d);
  xt_dcw_end_seq(d);
}

static int biplane(const xt_dicom_run *r) { return r->biplane || r->frames[0].plane; }

/* A biplane run whose other plane has an object of this type to point to. One plane exposing alone
 * on a biplane system (plane B's fluoroscopy before plane A ever exposed) has none: its objects say
 * SINGLE PLANE (Image Type, Planes in Acquisition) and keep the Plane Identification, since BIPLANE
 * A/B makes the other plane's reference required (dciodvfy: Referenced Other Plane Sequence, 1C). */
static int paired(const xt_dicom_run *r, int enhanced) {
  return biplane(r) && (enhanced ? r->other_plane_sop_uid[0] : r->other_plane_classic_sop_uid[0]);
}

/* Image Type (and the Enhanced XA's Frame Type): value 3 names the plane (PS3.3 C.8.7.1.1.1), the
 * Enhanced XA's value 4 is NONE (no derived pixel content). */
static const char *image_type(const xt_dicom_run *r, int enhanced) {
  const int k = !paired(r, enhanced) ? 0 : r->frames[0].plane ? 2 : 1;
  static const char *const cl[3] = {"ORIGINAL\\PRIMARY\\SINGLE PLANE", "ORIGINAL\\PRIMARY\\BIPLANE A",
                                    "ORIGINAL\\PRIMARY\\BIPLANE B"};
  static const char *const en[3] = {"ORIGINAL\\PRIMARY\\SINGLE PLANE\\NONE", "ORIGINAL\\PRIMARY\\BIPLANE A\\NONE",
                                    "ORIGINAL\\PRIMARY\\BIPLANE B\\NONE"};
  return enhanced ? en[k] : cl[k];
}

/* Checks common to both image objects; fills ff[n]. */
static int run_fields(const xt_dicom_run *r, xt_frame_fields *ff, int *rows, int *cols, xt_msg *msg) {
  if (r->n < 1) return xt_fail(msg, XT_EINVAL, "DICOM: a run without frames");
  for (int i = 0; i < r->n; i++) {
    const xt_acq_frame *f = &r->frames[i];
    if (!f->chain) return xt_fail(msg, XT_EINVAL, "DICOM: frame %d has no exposure (the imaging chain was off)", i);
    if (!r->pixels[i]) return xt_fail(msg, XT_EINVAL, "DICOM: frame %d has no pixels", i);
    xt_frame_fields_of(f, &ff[i]);
    if (f->raw.rows != r->frames[0].raw.rows || f->raw.cols != r->frames[0].raw.cols || f->plane != r->frames[0].plane ||
        strcmp(ff[i].mode, ff[0].mode) != 0)
      return xt_fail(msg, XT_EINVAL, "DICOM: frame %d's plane, mode or matrix differs from the run's first", i);
  }
  *rows = r->frames[0].raw.rows;
  *cols = r->frames[0].raw.cols;
  return 0;
}

/* The raw frame's ADC bits rounded up to what XA allows (8, 10, 12, 16); processed frames: 12. */
static int bits_stored(const xt_dicom_run *r, const xt_frame_fields *ff) {
  if (r->which != XT_DICOM_RAW) return 12;
  const int b = ff->prm->adc_bits;
  return b <= 8 ? 8 : b <= 10 ? 10 : b <= 12 ? 12 : 16;
}

static void image_pixels(xt_dcw *d, const xt_dicom_run *r, const xt_frame_fields *ff, int rows, int cols) {
  const int bs = bits_stored(r, ff);
  xt_dcw_num1(d, T(0028, 0002), "US", 1);
  xt_dcw_str(d, T(0028, 0004), "CS", "MONOCHROME2");
  xt_dcw_num1(d, T(0028, 0010), "US", rows);
  xt_dcw_num1(d, T(0028, 0011), "US", cols);
  xt_dcw_num1(d, T(0028, 0100), "US", 16);
  xt_dcw_num1(d, T(0028, 0101), "US", bs);
  xt_dcw_num1(d, T(0028, 0102), "US", bs - 1);
  xt_dcw_num1(d, T(0028, 0103), "US", 0);
}

static int pixel_block(const xt_dicom_run *r, int rows, int cols, uint16_t **out, xt_msg *msg) {
  const size_t fpx = (size_t)rows * (size_t)cols;
  uint16_t *px = malloc(fpx * (size_t)r->n * sizeof *px);
  if (!px) return xt_fail(msg, XT_ENOMEM, "DICOM: out of memory for %d frames of %d x %d", r->n, cols, rows);
  for (int i = 0; i < r->n; i++) memcpy(px + fpx * (size_t)i, r->pixels[i], fpx * sizeof *px);
  *out = px;
  return 0;
}

/* Physical detector size (a row's length, then a column's) and where the isocentre projects on
 * it: PS3.3 C.8.19.5, in fractional detector elements along the column direction, then along the
 * row direction, from the centre of the top left-hand element: the panel's centre. */
static void detector_frame(const xt_frame_fields *ff, double size[2], double iso[2]) {
  size[0] = ff->panel[0] * ff->panel_pitch_mm;
  size[1] = ff->panel[1] * ff->panel_pitch_mm;
  iso[0] = (ff->panel[1] - 1) / 2.0;
  iso[1] = (ff->panel[0] - 1) / 2.0;
}

/* Filter Type, Material and thicknesses (min = max: flat filters) of the added filtration. */
static void filtration(xt_dcw *d, const xt_chain_params *p) {
  const int al = p->filter_al_mm > 0, cu = p->filter_cu_mm > 0;
  if (!al && !cu) {
    xt_dcw_str(d, XT_TAG(0x0018, 0x1160), "SH", "NONE");
    return;
  }
  double t[2];
  int n = 0;
  if (cu) t[n++] = p->filter_cu_mm;
  if (al) t[n++] = p->filter_al_mm;
  xt_dcw_str(d, XT_TAG(0x0018, 0x1160), "SH", n > 1 ? "MULTIPLE" : "FLAT");
  xt_dcw_str(d, XT_TAG(0x0018, 0x7050), "CS", cu && al ? "COPPER\\ALUMINUM" : cu ? "COPPER" : "ALUMINUM");
  xt_dcw_num(d, XT_TAG(0x0018, 0x7052), "DS", t, n);
  xt_dcw_num(d, XT_TAG(0x0018, 0x7054), "DS", t, n);
}

/* Patient Orientation of a direction (LPS): its letters by decreasing weight, those over 0.1. */
static void orientation_letters(xt_vec3 a, char *out) {
  const double c[3] = {a.x, a.y, a.z};
  const char pos[3] = {'L', 'P', 'H'}, neg[3] = {'R', 'A', 'F'};
  int order[3] = {0, 1, 2};
  for (int i = 0; i < 3; i++)
    for (int j = i + 1; j < 3; j++)
      if (fabs(c[order[j]]) > fabs(c[order[i]])) {
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
      }
  int n = 0;
  for (int i = 0; i < 3; i++)
    if (fabs(c[order[i]]) > 0.1 || i == 0) out[n++] = c[order[i]] >= 0 ? pos[order[i]] : neg[order[i]];
  out[n] = 0;
}

static void patient_orientation(const xt_acq_frame *f, char out[16]) {
  char a[4], b[4];
  orientation_letters(f->geom.u, a);
  orientation_letters(f->geom.v, b);
  snprintf(out, 16, "%s\\%s", a, b);
}

/* The Pixel Intensity Relationship LUT: raw (linear ADC codes) TO_LOG, ln of the signal above the
 * dark offset scaled to the ADC's range; processed (log, window/level) TO_LINEAR, the relative
 * intensity exp(-attenuation) the window maps to each value, scaled to 16 bits (the window the frame
 * was displayed with, the automatic window's included). */
static void intensity_lut(xt_dcw *d, const xt_dicom_run *r, const xt_chain_params *p, double window, double level) {
  const int raw = r->which == XT_DICOM_RAW;
  const int bits = raw ? p->adc_bits : 12;
  const int n = 1 << bits;
  double *lut = malloc((size_t)n * sizeof *lut);
  if (!lut) {
    xt_dcw_fail(d, XT_ENOMEM, "out of memory for the intensity LUT");
    return;
  }
  const double top = (double)(n - 1);
  const double lmax = log(top + 1);
  for (int k = 0; k < n; k++) {
    if (raw) {
      const double sgl = k - p->offset_adu;
      lut[k] = sgl > 1 ? floor(top * log(sgl) / lmax + 0.5) : 0;
    } else {
      const double x = k / top; /* xt_process_window: x = (level + window/2 - e) / window */
      const double e = level + 0.5 * window - x * window, e0 = level - 0.5 * window;
      lut[k] = floor(65535.0 * exp(-(e - e0)) + 0.5);
    }
  }
  xt_dcw_seq(d, XT_TAG(0x0028, 0x9422));
  xt_dcw_item(d);
  const double desc[3] = {n == 65536 ? 0 : n, 0, 16};
  xt_dcw_num(d, XT_TAG(0x0028, 0x3002), "US", desc, 3);
  xt_dcw_num(d, XT_TAG(0x0028, 0x3006), "US", lut, n);
  xt_dcw_str(d, XT_TAG(0x0028, 0x9474), "CS", raw ? "TO_LOG" : "TO_LINEAR");
  xt_dcw_end_item(d);
  xt_dcw_end_seq(d);
  free(lut);
}

/* ------------------------------------------------------------------------------------------ */
/* Enhanced XA                                                                                */
/* ------------------------------------------------------------------------------------------ */

/* The per-frame functional groups of frame i. */
static void exa_frame(xt_dcw *d, const xt_dicom_run *r, const xt_frame_fields *ff, int i) {
  const xt_chain_params *p = ff->prm;
  char da[9], tm[14], dt[27], rdt[27];
  const int64_t t = r->t0_unix_us + frame_offset_us(r, i);
  wall(t, da, tm, dt);
  wall(t + (int64_t)llround(p->pulse_ms * 500.0), da, tm, rdt); /* mid-pulse: when the pose is stated */
  xt_dcw_item(d);
  /* Frame Content */
  xt_dcw_seq(d, T(0020, 9111));
  xt_dcw_item(d);
  xt_dcw_num1(d, T(0020, 9156), "US", i + 1);           /* Frame Acquisition Number */
  xt_dcw_str(d, T(0018, 9151), "DT", rdt);              /* Frame Reference DateTime */
  xt_dcw_str(d, T(0018, 9074), "DT", dt);               /* Frame Acquisition DateTime */
  xt_dcw_num1(d, T(0018, 9220), "FD", p->pulse_ms);     /* Frame Acquisition Duration, ms */
  xt_dcw_num1(d, T(0020, 9128), "UL", i + 1);           /* Temporal Position Index */
  xt_dcw_num1(d, T(0020, 9157), "UL", i + 1);           /* Dimension Index Values */
  xt_dcw_end_item(d);
  xt_dcw_end_seq(d);
  /* XA/XRF Frame Pixel Data Properties */
  xt_dcw_seq(d, T(0028, 9443));
  xt_dcw_item(d);
  xt_dcw_str(d, T(0008, 9007), "CS", image_type(r, 1)); /* Frame Type */
  xt_dcw_str(d, T(0028, 1040), "CS", r->which == XT_DICOM_RAW ? "LIN" : "LOG");
  xt_dcw_num1(d, T(0028, 1041), "SS", 1);
  xt_dcw_str(d, T(0028, 9444), "CS", "UNIFORM");                 /* Geometrical Properties */
  xt_dcw_str(d, T(0028, 9446), "CS", r->which == XT_DICOM_RAW ? "NONE" : "HIGH_PASS_FILTER"); /* Image Processing Applied */
  {
    const double ips[2] = {ff->out_pitch_mm[1], ff->out_pitch_mm[0]};
    xt_dcw_num(d, T(0018, 1164), "DS", ips, 2); /* Imager Pixel Spacing: rows, columns */
  }
  xt_dcw_end_item(d);
  xt_dcw_end_seq(d);
  /* Frame Detector Parameters */
  xt_dcw_seq(d, T(0018, 9451));
  xt_dcw_item(d);
  xt_dcw_num1(d, T(0018, 7014), "DS", p->pulse_ms); /* Detector Active Time */
  xt_dcw_num1(d, T(0018, 7016), "DS", 0);           /* Detector Activation Offset From Exposure */
  xt_dcw_end_item(d);
  xt_dcw_end_seq(d);
  /* X-Ray Field of View: the readout region on the panel */
  xt_dcw_seq(d, T(0018, 9432));
  xt_dcw_item(d);
  {
    const double origin[2] = {ff->roi[1], ff->roi[0]};               /* row, column offset */
    const double dims[2] = {ff->roi[2] * ff->panel_pitch_mm, ff->roi[3] * ff->panel_pitch_mm};
    xt_dcw_str(d, T(0018, 1147), "CS", "RECTANGLE");
    xt_dcw_num(d, T(0018, 9461), "FL", dims, 2);       /* Field of View Dimension(s) in Float */
    xt_dcw_num(d, T(0018, 7030), "DS", origin, 2);     /* Field of View Origin */
    xt_dcw_num1(d, T(0018, 7032), "DS", 0);            /* Field of View Rotation */
    xt_dcw_str(d, T(0018, 7034), "CS", "NO");          /* Field of View Horizontal Flip */
  }
  xt_dcw_end_item(d);
  xt_dcw_end_seq(d);
  /* Frame Acquisition: the technique of this frame (dose-rate control moves it) */
  xt_dcw_seq(d, T(0018, 9417));
  xt_dcw_item(d);
  xt_dcw_num1(d, T(0018, 0060), "DS", p->kv);
  xt_dcw_num1(d, T(0018, 9330), "FD", ff->ma);
  xt_dcw_end_item(d);
  xt_dcw_end_seq(d);
  /* X-Ray Positioner: patient-relative angles */
  xt_dcw_seq(d, T(0018, 9405));
  xt_dcw_item(d);
  xt_dcw_num1(d, T(0018, 1510), "DS", ff->pose[0]);
  xt_dcw_num1(d, T(0018, 1511), "DS", ff->pose[1]);
  xt_dcw_end_item(d);
  xt_dcw_end_seq(d);
  /* X-Ray Table Position: the tabletop (IEC-style names; vertical is -y: up is anterior) */
  xt_dcw_seq(d, T(0018, 9406));
  xt_dcw_item(d);
  xt_dcw_num1(d, T(300A, 0128), "DS", -ff->pose[6]); /* Table Top Vertical Position */
  xt_dcw_num1(d, T(300A, 0129), "DS", ff->pose[7]);  /* Table Top Longitudinal Position */
  xt_dcw_num1(d, T(300A, 012A), "DS", ff->pose[5]);  /* Table Top Lateral Position */
  xt_dcw_num1(d, T(0018, 9469), "FL", 0);
  xt_dcw_num1(d, T(0018, 9470), "FL", 0);
  xt_dcw_num1(d, T(0018, 9471), "FL", 0);
  xt_dcw_end_item(d);
  xt_dcw_end_seq(d);
  /* X-Ray Isocenter Reference System: the equipment's angles and the table in the isocentre system */
  xt_dcw_seq(d, T(0018, 9462));
  xt_dcw_item(d);
  xt_dcw_num1(d, T(0018, 9463), "FL", ff->pose[0]);
  xt_dcw_num1(d, T(0018, 9464), "FL", ff->pose[1]);
  xt_dcw_num1(d, T(0018, 9465), "FL", ff->pose[2]);
  xt_dcw_num1(d, T(0018, 9466), "FL", ff->pose[5]);
  xt_dcw_num1(d, T(0018, 9467), "FL", ff->pose[6]);
  xt_dcw_num1(d, T(0018, 9468), "FL", ff->pose[7]);
  xt_dcw_num1(d, T(0018, 9469), "FL", 0);
  xt_dcw_num1(d, T(0018, 9470), "FL", 0);
  xt_dcw_num1(d, T(0018, 9471), "FL", 0);
  xt_dcw_end_item(d);
  xt_dcw_end_seq(d);
  /* Patient Orientation in Frame */
  {
    char po[16];
    patient_orientation(&r->frames[i], po);
    xt_dcw_seq(d, T(0020, 9450));
    xt_dcw_item(d);
    xt_dcw_str(d, T(0020, 0020), "CS", po);
    xt_dcw_end_item(d);
    xt_dcw_end_seq(d);
  }
  /* X-Ray Projection Pixel Calibration: the pixel size at the isocentre */
  xt_dcw_seq(d, T(0018, 9401));
  xt_dcw_item(d);
  {
    const double m = ff->pose[3] / ff->pose[4];
    const double ops[2] = {ff->out_pitch_mm[1] * m, ff->out_pitch_mm[0] * m};
    xt_dcw_num1(d, T(0018, 9403), "FL", 0);           /* Distance Object to Table Top: the isocentre's plane */
    xt_dcw_num(d, T(0018, 9404), "FL", ops, 2);       /* Object Pixel Spacing in Center of Beam */
    xt_dcw_num1(d, T(0018, 1130), "DS", -ff->pose[6]); /* Table Height */
    xt_dcw_num1(d, T(0018, 9449), "FL", 0);           /* Beam Angle */
  }
  xt_dcw_end_item(d);
  xt_dcw_end_seq(d);
  /* X-Ray Collimator: the shutters' edges in physical detector elements */
  xt_dcw_seq(d, T(0018, 9407));
  xt_dcw_item(d);
  {
    const double x0 = ff->roi[0], y0 = ff->roi[1], w = ff->roi[2], h = ff->roi[3];
    xt_dcw_str(d, T(0018, 1700), "CS", "RECTANGULAR");
    xt_dcw_num1(d, T(0018, 1702), "IS", x0 + p->shutter[0] * w);
    xt_dcw_num1(d, T(0018, 1704), "IS", x0 + (1 - p->shutter[1]) * w);
    xt_dcw_num1(d, T(0018, 1706), "IS", y0 + p->shutter[2] * h);
    xt_dcw_num1(d, T(0018, 1708), "IS", y0 + (1 - p->shutter[3]) * h);
  }
  xt_dcw_end_item(d);
  xt_dcw_end_seq(d);
  /* X-Ray Geometry */
  xt_dcw_seq(d, T(0018, 9476));
  xt_dcw_item(d);
  xt_dcw_num1(d, T(0018, 9402), "FL", ff->pose[3]);
  xt_dcw_num1(d, T(0018, 1110), "DS", ff->pose[4]);
  xt_dcw_end_item(d);
  xt_dcw_end_seq(d);
  /* Irradiation Event Identification: the dose report's event */
  xt_dcw_seq(d, T(0018, 9477));
  xt_dcw_item(d);
  xt_dcw_str(d, T(0008, 3010), "UI", r->event_uid);
  xt_dcw_end_item(d);
  xt_dcw_end_seq(d);
  xt_dcw_end_item(d);
}

int xt_dicom_enhanced_xa(const xt_dicom_run *r, const xt_dicom_identity *id, unsigned char **out, size_t *len,
                         xt_msg *msg) {
  *out = NULL;
  *len = 0;
  int rows, cols, rc;
  xt_frame_fields *ff = calloc((size_t)(r->n > 0 ? r->n : 1), sizeof *ff);
  uint16_t *px = NULL;
  xt_dcw *d = NULL;
  if (!ff) return xt_fail(msg, XT_ENOMEM, "out of memory");
  if ((rc = run_fields(r, ff, &rows, &cols, msg)) || (rc = pixel_block(r, rows, cols, &px, msg))) goto done;
  d = xt_dcw_new();
  if (!d) {
    rc = xt_fail(msg, XT_ENOMEM, "out of memory");
    goto done;
  }
  const xt_frame_fields *f0 = &ff[0];
  const xt_chain_params *p0 = f0->prm;
  char da[9], tm[14], dt[27];
  wall(r->t0_unix_us, da, tm, dt);
  /* SOP Common, General Series, Enhanced XA/XRF Image, equipment */
  xt_dcw_str(d, T(0008, 0008), "CS", image_type(r, 1));
  xt_dcw_str(d, T(0008, 0012), "DA", da); /* Instance Creation Date */
  xt_dcw_str(d, T(0008, 0013), "TM", tm);
  xt_dcw_str(d, T(0008, 0016), "UI", SOP_EXA);
  xt_dcw_str(d, T(0008, 0018), "UI", r->sop_uid);
  xt_dcw_str(d, T(0008, 0021), "DA", da); /* Series Date */
  xt_dcw_str(d, T(0008, 0023), "DA", da); /* Content Date */
  xt_dcw_str(d, T(0008, 002A), "DT", dt); /* Acquisition DateTime */
  xt_dcw_str(d, T(0008, 0031), "TM", tm);
  xt_dcw_str(d, T(0008, 0033), "TM", tm);
  xt_dcw_str(d, T(0008, 0060), "CS", "XA");
  patient_study(d, id, da, tm);
  equipment(d, id, r->software);
  xt_dcw_str(d, T(0008, 103E), "LO", id->synthetic ? "xtwin synthetic run" : "xtwin run");
  xt_dcw_str(d, T(0018, 1030), "LO", f0->protocol_name && *f0->protocol_name ? f0->protocol_name : "custom");
  xt_dcw_str(d, T(0018, 9004), "CS", id->synthetic ? "RESEARCH" : "PRODUCT"); /* Content Qualification */
  xt_dcw_str(d, T(0018, 1155), "CS", r->fluoro ? "SC" : "GR"); /* Radiation Setting */
  xt_dcw_str(d, T(0018, 115A), "CS", "PULSED");               /* Radiation Mode */
  xt_dcw_num1(d, T(0018, 0060), "DS", p0->kv); /* the first frame's; each frame's in its Frame Acquisition */
  xt_dcw_num1(d, T(0018, 1154), "DS", p0->pulse_ms);          /* Average Pulse Width */
  {
    double ma = 0, mas = 0;
    for (int i = 0; i < r->n; i++) ma += ff[i].ma / r->n, mas += ff[i].prm->mas;
    xt_dcw_num1(d, T(0018, 9330), "FD", ma);                  /* X-Ray Tube Current in mA: the run's mean */
    xt_dcw_num1(d, T(0018, 9328), "FD", p0->pulse_ms * r->n); /* Exposure Time in ms: the run's pulses */
    (void)mas; /* Exposure in mAs (0018,9332) only where mA or time is absent (PS3.3 C.8.19.3) */
  }
  xt_dcw_num1(d, T(0018, 9073), "FD", (double)frame_offset_us(r, r->n - 1) / 1e6 + run_frame_ms(r) / 1e3); /* Acquisition Duration, s */
  {
    double kap = 0;
    for (int i = 0; i < r->n; i++) kap += ff[i].kap_gycm2;
    xt_dcw_num1(d, T(0018, 9473), "FL", kap * 10); /* Acquired Image Area Dose Product, dGy cm2 */
  }
  if (paired(r, 1)) { /* Referenced Other Plane Sequence */
    xt_dcw_seq(d, T(0008, 9410));
    xt_dcw_item(d);
    xt_dcw_str(d, T(0008, 1150), "UI", SOP_EXA);
    xt_dcw_str(d, T(0008, 1155), "UI", r->other_plane_sop_uid);
    xt_dcw_end_item(d);
    xt_dcw_end_seq(d);
  }
  xt_dcw_str(d, T(0018, 9410), "CS", paired(r, 1) ? "BIPLANE" : "SINGLE PLANE"); /* Planes in Acquisition */
  xt_dcw_str(d, T(0018, 9457), "CS", r->frames[0].plane ? "PLANE B" : biplane(r) ? "PLANE A" : "MONOPLANE"); /* Plane Identification */
  xt_dcw_seq(d, T(0054, 0410));
  xt_dcw_item(d);
  code(d, "F-10450", "SRT", "recumbent");
  code_seq(d, T(0054, 0412), "F-10340", "SRT", "supine");
  xt_dcw_end_item(d);
  xt_dcw_end_seq(d);
  code_seq(d, T(0054, 0414), "F-10470", "SRT", "headfirst");                           /* Patient Gantry Relationship */
  /* Synchronization: none; the frames' times are the twin's clock */
  xt_dcw_str(d, T(0020, 0200), "UI", "1.2.840.10008.15.1.1"); /* UTC */
  xt_dcw_str(d, T(0018, 106A), "CS", "NO TRIGGER");
  xt_dcw_str(d, T(0018, 1800), "CS", "N");
  xt_dcw_num1(d, T(0018, 1190), "DS", p0->focal_spot_mm);
  xt_dcw_str(d, T(0018, 1508), "CS", "CARM");                 /* Positioner Type */
  xt_dcw_str(d, T(0018, 9474), "CS", "YES");                  /* C-arm Positioner Tabletop Relationship */
  xt_dcw_str(d, T(0018, 9420), "CS", "DIGITAL_DETECTOR");     /* X-Ray Receptor Type */
  xt_dcw_str(d, T(0018, 9423), "LO", f0->protocol_name && *f0->protocol_name ? f0->protocol_name : "custom");
  xt_dcw_str(d, T(0020, 000E), "UI", r->series_uid);
  xt_dcw_num1(d, T(0020, 0011), "IS", r->series_number);
  xt_dcw_num1(d, T(0020, 0012), "IS", r->series_number);     /* Acquisition Number */
  xt_dcw_num1(d, T(0020, 0013), "IS", 1);
  xt_dcw_str(d, T(0020, 0052), "UI", r->frame_of_reference_uid);
  xt_dcw_str(d, T(0020, 1040), "LO", "");                    /* Position Reference Indicator */
  xt_dcw_str(d, T(0028, 0301), "CS", "NO");                  /* Burned In Annotation */
  xt_dcw_str(d, T(0028, 2110), "CS", "00");
  xt_dcw_str(d, T(2050, 0020), "CS", "IDENTITY");            /* Presentation LUT Shape */
  xt_dcw_seq(d, T(0040, 0555));                              /* Acquisition Context: empty */
  xt_dcw_end_seq(d);
  xt_dcw_str(d, T(0020, 4000), "LT",
             r->which == XT_DICOM_RAW ? "xtwin raw detector frames: ADC codes, linear in the detector signal"
                                      : "xtwin processed frames: log, window/level to 12 bits");
  /* X-Ray Detector: the panel */
  {
    double size[2], iso[2];
    detector_frame(f0, size, iso);
    const double pitch[2] = {f0->panel_pitch_mm, f0->panel_pitch_mm};
    const double bin[2] = {f0->binning, f0->binning};
    xt_dcw_str(d, T(0018, 7004), "CS", "SCINTILLATOR");
    xt_dcw_str(d, T(0018, 7005), "CS", "AREA");
    xt_dcw_str(d, T(0018, 7006), "LT", f0->detector);        /* Detector Description */
    xt_dcw_str(d, T(0018, 700A), "SH", f0->detector);        /* Detector ID */
    xt_dcw_str(d, T(0018, 700C), "DA", "");                  /* Date of Last Detector Calibration */
    xt_dcw_str(d, T(0018, 700E), "TM", "");
    xt_dcw_num(d, T(0018, 701A), "DS", bin, 2);
    xt_dcw_num(d, T(0018, 7020), "DS", pitch, 2);            /* Detector Element Physical Size */
    xt_dcw_num(d, T(0018, 7022), "DS", pitch, 2);            /* Detector Element Spacing */
    xt_dcw_str(d, T(0018, 7024), "CS", "RECTANGLE");
    xt_dcw_num(d, T(0018, 7026), "DS", size, 2);             /* Detector Active Dimension(s) */
    xt_dcw_num(d, T(0018, 9429), "FL", size, 2);             /* Physical Detector Size */
    /* Position of Isocenter Projection (0018,9430), iso, is left out: dciodvfy (dicom3tools 2022-06)
     * tests its condition, an Isocenter Reference System Sequence, on the top-level data set only,
     * where that functional group never is, and calls it an error. The isocentre projects to the
     * panel's centre (docs/dicom.md), where readers without it assume it. */
    (void)iso;
    xt_dcw_num1(d, T(0018, 9426), "FL", 0);                  /* Distance Receptor Plane to Detector Housing */
  }
  /* X-Ray Filtration: the spectral filter (the run's first frame's) */
  filtration(d, p0);
  /* Image Pixel, Multi-frame */
  image_pixels(d, r, f0, rows, cols);
  xt_dcw_num1(d, T(0028, 0008), "IS", r->n);
  /* Multi-frame Dimension: one dimension, the temporal position */
  xt_dcw_seq(d, T(0020, 9221));
  xt_dcw_item(d);
  xt_dcw_str(d, T(0020, 9164), "UI", r->series_uid);
  xt_dcw_end_item(d);
  xt_dcw_end_seq(d);
  xt_dcw_seq(d, T(0020, 9222));
  xt_dcw_item(d);
  xt_dcw_str(d, T(0020, 9164), "UI", r->series_uid);
  xt_dcw_num1(d, T(0020, 9165), "AT", T(0020, 9128));
  xt_dcw_num1(d, T(0020, 9167), "AT", T(0020, 9111));
  xt_dcw_str(d, T(0020, 9421), "LO", "temporal position");
  xt_dcw_end_item(d);
  xt_dcw_end_seq(d);
  /* Shared functional groups: the frame anatomy and the VOI of the processed pixels */
  xt_dcw_seq(d, T(5200, 9229));
  xt_dcw_item(d);
  xt_dcw_seq(d, T(0020, 9071)); /* Frame Anatomy */
  xt_dcw_item(d);
  xt_dcw_str(d, T(0020, 9072), "CS", "U");
  code_seq(d, T(0008, 2218), "T-D1100", "SRT", "Head");
  xt_dcw_end_item(d);
  xt_dcw_end_seq(d);
  /* the first frame's window (the automatic window's is each frame's own: the LUT is shared) */
  intensity_lut(d, r, p0, f0->window, f0->level); /* Pixel Intensity Relationship LUT */
  xt_dcw_seq(d, T(0028, 9132)); /* Frame VOI LUT */
  xt_dcw_item(d);
  {
    const double hi = (double)((1 << bits_stored(r, f0)) - 1);
    xt_dcw_num1(d, T(0028, 1050), "DS", (hi + 1) / 2);
    xt_dcw_num1(d, T(0028, 1051), "DS", hi + 1);
  }
  xt_dcw_end_item(d);
  xt_dcw_end_seq(d);
  xt_dcw_end_item(d);
  xt_dcw_end_seq(d);
  /* Per-frame functional groups */
  xt_dcw_seq(d, T(5200, 9230));
  for (int i = 0; i < r->n; i++) exa_frame(d, r, &ff[i], i);
  xt_dcw_end_seq(d);
  xt_dcw_pixels16(d, px, (size_t)rows * (size_t)cols * (size_t)r->n);
  rc = xt_dcw_encode(d, out, len, msg);
done:
  xt_dcw_free(d);
  free(px);
  free(ff);
  return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Classic XA                                                                                 */
/* ------------------------------------------------------------------------------------------ */

/* Classic XA states one geometry for the run: the first frame's angles (with per-frame increments
 * from it when they change), SID, SOD and pixel spacing. It cannot state the detector rotation,
 * the table's position or an isocentre off the matrix centre (docs/dicom.md, approximations). */
int xt_dicom_classic_xa(const xt_dicom_run *r, const xt_dicom_identity *id, unsigned char **out, size_t *len,
                        xt_msg *msg) {
  *out = NULL;
  *len = 0;
  int rows, cols, rc;
  xt_frame_fields *ff = calloc((size_t)(r->n > 0 ? r->n : 1), sizeof *ff);
  uint16_t *px = NULL;
  double *inc = NULL;
  xt_dcw *d = NULL;
  if (!ff) return xt_fail(msg, XT_ENOMEM, "out of memory");
  if ((rc = run_fields(r, ff, &rows, &cols, msg)) || (rc = pixel_block(r, rows, cols, &px, msg))) goto done;
  d = xt_dcw_new();
  inc = calloc((size_t)r->n * 2, sizeof *inc);
  if (!d || !inc) {
    rc = xt_fail(msg, XT_ENOMEM, "out of memory");
    goto done;
  }
  const xt_frame_fields *f0 = &ff[0];
  const xt_chain_params *p0 = f0->prm;
  char da[9], tm[14], dt[27];
  wall(r->t0_unix_us, da, tm, dt);
  int dynamic = 0;
  double kv = 0, ma = 0, pw = 0, kap = 0;
  for (int i = 0; i < r->n; i++) {
    inc[i] = ff[i].pose[0] - f0->pose[0];
    inc[r->n + i] = ff[i].pose[1] - f0->pose[1];
    if (inc[i] != 0 || inc[r->n + i] != 0) dynamic = 1;
    kv += ff[i].prm->kv / r->n;
    ma += ff[i].ma / r->n;
    pw += ff[i].prm->pulse_ms / r->n;
    kap += ff[i].kap_gycm2;
  }
  xt_dcw_str(d, T(0008, 0008), "CS", image_type(r, 0));
  if (paired(r, 0)) { /* Referenced Image Sequence: the other plane's */
    xt_dcw_seq(d, T(0008, 1140));
    xt_dcw_item(d);
    xt_dcw_str(d, T(0008, 1150), "UI", SOP_XA);
    xt_dcw_str(d, T(0008, 1155), "UI", r->other_plane_classic_sop_uid);
    xt_dcw_end_item(d);
    xt_dcw_end_seq(d);
  }
  xt_dcw_str(d, T(0008, 0012), "DA", da);
  xt_dcw_str(d, T(0008, 0013), "TM", tm);
  xt_dcw_str(d, T(0008, 0016), "UI", SOP_XA);
  xt_dcw_str(d, T(0008, 0018), "UI", r->classic_sop_uid);
  xt_dcw_str(d, T(0008, 0021), "DA", da);
  xt_dcw_str(d, T(0008, 0022), "DA", da);
  xt_dcw_str(d, T(0008, 0023), "DA", da);
  xt_dcw_str(d, T(0008, 0031), "TM", tm);
  xt_dcw_str(d, T(0008, 0032), "TM", tm);
  xt_dcw_str(d, T(0008, 0033), "TM", tm);
  xt_dcw_str(d, T(0008, 0060), "CS", "XA");
  patient_study(d, id, da, tm);
  equipment(d, id, r->software);
  xt_dcw_str(d, T(0008, 103E), "LO", id->synthetic ? "xtwin synthetic run (classic XA)" : "xtwin run (classic XA)");
  xt_dcw_num1(d, T(0018, 0040), "IS", 1000.0 / run_frame_ms(r));
  xt_dcw_num1(d, T(0018, 0060), "DS", kv);
  xt_dcw_str(d, T(0018, 1030), "LO", f0->protocol_name && *f0->protocol_name ? f0->protocol_name : "custom");
  xt_dcw_num1(d, T(0018, 1063), "DS", run_frame_ms(r)); /* Frame Time */
  xt_dcw_num1(d, T(0018, 1110), "DS", f0->pose[4]);
  xt_dcw_num1(d, T(0018, 1111), "DS", f0->pose[3]);
  xt_dcw_num1(d, T(0018, 1114), "DS", f0->pose[4] / f0->pose[3]);
  xt_dcw_num1(d, T(0018, 1150), "IS", pw * r->n);       /* Exposure Time, ms */
  xt_dcw_num1(d, T(0018, 1151), "IS", ma);              /* X-Ray Tube Current, mA */
  xt_dcw_num1(d, T(0018, 1152), "IS", ma * pw * r->n / 1000); /* Exposure, mAs */
  xt_dcw_num1(d, T(0018, 1154), "DS", pw);
  xt_dcw_str(d, T(0018, 1155), "CS", r->fluoro ? "SC" : "GR");
  xt_dcw_str(d, T(0018, 115A), "CS", "PULSED");
  xt_dcw_num1(d, T(0018, 115E), "DS", kap * 10);         /* Image and Fluoroscopy Area Dose Product, dGy cm2 */
  {
    const double ips[2] = {f0->out_pitch_mm[1], f0->out_pitch_mm[0]};
    xt_dcw_num(d, T(0018, 1164), "DS", ips, 2);
  }
  xt_dcw_num1(d, T(0018, 1190), "DS", p0->focal_spot_mm);
  xt_dcw_str(d, T(0018, 1500), "CS", dynamic ? "DYNAMIC" : "STATIC");
  xt_dcw_num1(d, T(0018, 1510), "DS", f0->pose[0]);
  xt_dcw_num1(d, T(0018, 1511), "DS", f0->pose[1]);
  if (dynamic) {
    xt_dcw_num(d, T(0018, 1520), "DS", inc, r->n);
    xt_dcw_num(d, T(0018, 1521), "DS", inc + r->n, r->n);
  }
  xt_dcw_str(d, T(0018, 5100), "CS", "HFS");
  xt_dcw_str(d, T(0020, 000E), "UI", r->classic_series_uid);
  xt_dcw_num1(d, T(0020, 0011), "IS", r->series_number + 100);
  xt_dcw_num1(d, T(0020, 0012), "IS", r->series_number);
  xt_dcw_num1(d, T(0020, 0013), "IS", 1);
  xt_dcw_str(d, T(0020, 0060), "CS", ""); /* Laterality: none (a C-arm run) */
  xt_dcw_num1(d, T(0028, 1052), "DS", 0); /* Modality LUT (required with LOG pixels): identity */
  xt_dcw_num1(d, T(0028, 1053), "DS", 1);
  xt_dcw_str(d, T(0028, 1054), "LO", "US");
  xt_dcw_str(d, T(0020, 0020), "CS", "L\\F"); /* Patient Orientation: +column to the left, +row to the feet at 0/0 */
  xt_dcw_str(d, T(0020, 4000), "LT", "classic XA of an xtwin run: one geometry for the run (docs/dicom.md)");
  image_pixels(d, r, f0, rows, cols);
  xt_dcw_num1(d, T(0028, 0008), "IS", r->n);
  xt_dcw_num1(d, T(0028, 0009), "AT", T(0018, 1063)); /* Frame Increment Pointer: Frame Time */
  xt_dcw_str(d, T(0028, 1040), "CS", r->which == XT_DICOM_RAW ? "LIN" : "LOG");
  xt_dcw_str(d, T(0028, 2110), "CS", "00");
  xt_dcw_pixels16(d, px, (size_t)rows * (size_t)cols * (size_t)r->n);
  rc = xt_dcw_encode(d, out, len, msg);
done:
  xt_dcw_free(d);
  free(inc);
  free(px);
  free(ff);
  return rc;
}
