/* The study's X-Ray Radiation Dose SR (xt_dicom.h): TID 10001 "Projection X-Ray Radiation Dose" with
 * the device as observer (TID 1002), the study as scope, one TID 10002 accumulated-dose container per
 * plane and one TID 10003 irradiation event per run, with the items a Philips Azurion report carries
 * (notes-azurion-ifu.md §7, §11): DateTime Started, event type, protocol, Dose (RP), DAP, angles,
 * filters (Al and Cu, each min = max), fluoro mode Pulsed, pulse rate, number of pulses, kVp, tube
 * current, pulse width, exposure per pulse (uAs), focal spot, distances (source to isocentre, to the
 * reference point, to the detector), table positions, irradiation duration = pulses / rate. Every
 * value is the run's records' (their dose, their exposure): the SR re-derives nothing.
 *
 * Philips quirks are not copied: the reference point is the standard code (113860), not the text
 * "15cm below BeamIsocenter"; Acquisition Device Type is not written (TID 10001 leaves it optional);
 * no private items (docs/dicom.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xt_dicom.h"
#include "xt_record.h"

#define SOP_RDSR "1.2.840.10008.5.1.4.1.1.88.67"
#define SOP_XA "1.2.840.10008.5.1.4.1.1.12.1"
#define SOP_EXA "1.2.840.10008.5.1.4.1.1.12.1.1"
#define T(g, e) XT_TAG(0x##g, 0x##e)

/* ---- content items ---------------------------------------------------------------------------- */

static void code(xt_dcw *d, const char *value, const char *scheme, const char *meaning) {
  xt_dcw_str(d, T(0008, 0100), "SH", value);
  xt_dcw_str(d, T(0008, 0102), "SH", scheme);
  xt_dcw_str(d, T(0008, 0104), "LO", meaning);
}

/* Opens an item of the current Content Sequence: relationship, value type, concept name. */
static void open_item(xt_dcw *d, const char *rel, const char *type, const char *cv, const char *cs, const char *cm) {
  xt_dcw_item(d);
  xt_dcw_str(d, T(0040, A010), "CS", rel);
  xt_dcw_str(d, T(0040, A040), "CS", type);
  xt_dcw_seq(d, T(0040, A043));
  xt_dcw_item(d);
  code(d, cv, cs, cm);
  xt_dcw_end_item(d);
  xt_dcw_end_seq(d);
}

static void num_item(xt_dcw *d, const char *cv, const char *cs, const char *cm, double v, const char *unit,
                     const char *unit_meaning) {
  open_item(d, "CONTAINS", "NUM", cv, cs, cm);
  xt_dcw_seq(d, T(0040, A300));
  xt_dcw_item(d);
  xt_dcw_seq(d, T(0040, 08EA));
  xt_dcw_item(d);
  code(d, unit, "UCUM", unit_meaning);
  xt_dcw_end_item(d);
  xt_dcw_end_seq(d);
  xt_dcw_num1(d, T(0040, A30A), "DS", v);
  xt_dcw_end_item(d);
  xt_dcw_end_seq(d);
  xt_dcw_end_item(d);
}

static void code_item(xt_dcw *d, const char *rel, const char *cv, const char *cs, const char *cm, const char *vv,
                      const char *vs, const char *vm) {
  open_item(d, rel, "CODE", cv, cs, cm);
  xt_dcw_seq(d, T(0040, A168));
  xt_dcw_item(d);
  code(d, vv, vs, vm);
  xt_dcw_end_item(d);
  xt_dcw_end_seq(d);
  xt_dcw_end_item(d);
}

static void text_item(xt_dcw *d, const char *rel, const char *cv, const char *cs, const char *cm, const char *text) {
  open_item(d, rel, "TEXT", cv, cs, cm);
  xt_dcw_str(d, T(0040, A160), "UT", text);
  xt_dcw_end_item(d);
}

static void uid_item(xt_dcw *d, const char *rel, const char *cv, const char *cs, const char *cm, const char *uid) {
  open_item(d, rel, "UIDREF", cv, cs, cm);
  xt_dcw_str(d, T(0040, A124), "UI", uid);
  xt_dcw_end_item(d);
}

static void open_container(xt_dcw *d, const char *rel, const char *cv, const char *cs, const char *cm) {
  open_item(d, rel, "CONTAINER", cv, cs, cm);
  xt_dcw_str(d, T(0040, A050), "CS", "SEPARATE");
  xt_dcw_seq(d, T(0040, A730));
}

static void close_container(xt_dcw *d) {
  xt_dcw_end_seq(d);
  xt_dcw_end_item(d);
}

static void plane_item(xt_dcw *d, int plane, int nplanes) {
  if (nplanes < 2) code_item(d, "HAS CONCEPT MOD", "113764", "DCM", "Acquisition Plane", "113622", "DCM", "Single Plane");
  else if (plane == 0) code_item(d, "HAS CONCEPT MOD", "113764", "DCM", "Acquisition Plane", "113620", "DCM", "Plane A");
  else code_item(d, "HAS CONCEPT MOD", "113764", "DCM", "Acquisition Plane", "113621", "DCM", "Plane B");
}

static void ref_point(xt_dcw *d) {
  code_item(d, "CONTAINS", "113780", "DCM", "Reference Point Definition", "113860", "DCM",
            "15cm from Isocenter toward Source");
}

#define wall_dt xt__dicom_wall

/* ---- one run: its event's figures ------------------------------------------------------------- */

typedef struct run_sum {
  int plane, frames, fluoro;
  double kv, ma, pulse_ms, mas, kap_gycm2, k_mgy, duration_s, rate;
  xt_frame_fields f0;
} run_sum;

static int summarise(const xt_dicom_run *r, run_sum *s, xt_msg *msg) {
  memset(s, 0, sizeof *s);
  if (r->n < 1) return xt_fail(msg, XT_EINVAL, "dose SR: a run without frames");
  for (int i = 0; i < r->n; i++) {
    xt_frame_fields ff;
    if (!r->frames[i].chain) return xt_fail(msg, XT_EINVAL, "dose SR: frame %d has no exposure (the chain was off)", i);
    xt_frame_fields_of(&r->frames[i], &ff);
    if (i == 0) s->f0 = ff;
    s->kv += ff.prm->kv / r->n;
    s->ma += ff.ma / r->n;
    s->pulse_ms += ff.prm->pulse_ms / r->n;
    s->mas += ff.prm->mas;
    s->kap_gycm2 += ff.kap_gycm2;
    s->k_mgy += ff.k_irp_mgy;
  }
  s->plane = r->frames[0].plane;
  s->fluoro = r->fluoro;
  s->frames = r->n;
  /* the pulse rate: the records' own interval, else the run's nominal one; duration = pulses / rate */
  double interval_ms = r->frame_ms > 0 ? r->frame_ms : 1000.0 / 15;
  if (r->n > 1 && r->frames[0].t_exposure_ns && r->frames[r->n - 1].t_exposure_ns > r->frames[0].t_exposure_ns)
    interval_ms = (double)(r->frames[r->n - 1].t_exposure_ns - r->frames[0].t_exposure_ns) / 1e6 / (r->n - 1);
  s->rate = 1000.0 / interval_ms;
  s->duration_s = r->n / s->rate;
  return 0;
}

static void filter_item(xt_dcw *d, const char *mv, const char *mm, double t_mm) {
  open_container(d, "CONTAINS", "113771", "DCM", "X-Ray Filters");
  code_item(d, "CONTAINS", "113772", "DCM", "X-Ray Filter Type", "113653", "DCM", "Flat filter");
  code_item(d, "CONTAINS", "113757", "DCM", "X-Ray Filter Material", mv, "SRT", mm);
  num_item(d, "113758", "DCM", "X-Ray Filter Thickness Minimum", t_mm, "mm", "mm");
  num_item(d, "113773", "DCM", "X-Ray Filter Thickness Maximum", t_mm, "mm", "mm");
  close_container(d);
}

static void event(xt_dcw *d, const xt_dicom_run *r, const run_sum *s, int nplanes) {
  const xt_frame_fields *f = &s->f0;
  const xt_chain_params *p = f->prm;
  char da[9], tm[14], dt[27];
  wall_dt(r->t0_unix_us, da, tm, dt);
  open_container(d, "CONTAINS", "113706", "DCM", "Irradiation Event X-Ray Data");
  plane_item(d, s->plane, nplanes);
  open_item(d, "CONTAINS", "DATETIME", "111526", "DCM", "DateTime Started");
  xt_dcw_str(d, T(0040, A120), "DT", dt);
  xt_dcw_end_item(d);
  if (r->fluoro) code_item(d, "CONTAINS", "113721", "DCM", "Irradiation Event Type", "P5-06000", "SRT", "Fluoroscopy");
  else code_item(d, "CONTAINS", "113721", "DCM", "Irradiation Event Type", "113611", "DCM", "Stationary Acquisition");
  text_item(d, "CONTAINS", "125203", "DCM", "Acquisition Protocol",
            f->protocol_name && *f->protocol_name ? f->protocol_name : "custom");
  uid_item(d, "CONTAINS", "113769", "DCM", "Irradiation Event UID", r->event_uid);
  num_item(d, "122130", "DCM", "Dose Area Product", s->kap_gycm2 * 1e-4, "Gy.m2", "Gy.m2");
  num_item(d, "113738", "DCM", "Dose (RP)", s->k_mgy * 1e-3, "Gy", "Gy");
  ref_point(d);
  num_item(d, "112011", "DCM", "Positioner Primary Angle", f->pose[0], "deg", "deg");
  num_item(d, "112012", "DCM", "Positioner Secondary Angle", f->pose[1], "deg", "deg");
  if (p->filter_al_mm > 0) filter_item(d, "C-120F9", "Aluminum or aluminum compound", p->filter_al_mm);
  if (p->filter_cu_mm > 0) filter_item(d, "C-127F9", "Copper or copper compound", p->filter_cu_mm);
  code_item(d, "CONTAINS", "113732", "DCM", "Fluoro Mode", "113631", "DCM", "Pulsed");
  num_item(d, "113791", "DCM", "Pulse Rate", s->rate, "{pulse}/s", "pulse/s");
  num_item(d, "113768", "DCM", "Number of Pulses", s->frames, "{pulses}", "pulses");
  num_item(d, "113742", "DCM", "Irradiation Duration", s->duration_s, "s", "s");
  num_item(d, "113733", "DCM", "KVP", s->kv, "kV", "kV");
  num_item(d, "113734", "DCM", "X-Ray Tube Current", s->ma, "mA", "mA");
  num_item(d, "113793", "DCM", "Pulse Width", s->pulse_ms, "ms", "ms");
  num_item(d, "113736", "DCM", "Exposure", s->mas / s->frames * 1000.0, "uA.s", "uAs"); /* per pulse, as Philips */
  num_item(d, "113766", "DCM", "Focal Spot Size", p->focal_spot_mm, "mm", "mm");
  num_item(d, "113750", "DCM", "Distance Source to Detector", f->pose[4], "mm", "mm");
  num_item(d, "113748", "DCM", "Distance Source to Isocenter", f->pose[3], "mm", "mm");
  num_item(d, "113737", "DCM", "Distance Source to Reference Point", f->d_irp_mm, "mm", "mm");
  num_item(d, "113790", "DCM", "Collimated Field Area", f->field_cm2 * 1e-4, "m2", "m2");
  num_item(d, "113751", "DCM", "Table Longitudinal Position", f->pose[7], "mm", "mm");
  num_item(d, "113752", "DCM", "Table Lateral Position", f->pose[5], "mm", "mm");
  num_item(d, "113753", "DCM", "Table Height Position", -f->pose[6], "mm", "mm");
  close_container(d);
}

static void accumulated(xt_dcw *d, const run_sum *s, int nrun, int plane, int nplanes) {
  double kap = 0, k = 0, fkap = 0, fk = 0, akap = 0, ak = 0, ft = 0, at = 0;
  int frames = 0;
  for (int i = 0; i < nrun; i++) {
    if (s[i].plane != plane) continue;
    const int fl = s[i].fluoro; /* stored fluoroscopy counts apart from exposure runs */
    kap += s[i].kap_gycm2, k += s[i].k_mgy;
    if (fl) fkap += s[i].kap_gycm2, fk += s[i].k_mgy, ft += s[i].duration_s;
    else akap += s[i].kap_gycm2, ak += s[i].k_mgy, at += s[i].duration_s, frames += s[i].frames;
  }
  open_container(d, "CONTAINS", "113702", "DCM", "Accumulated X-Ray Dose Data");
  plane_item(d, plane, nplanes);
  /* TID 10004 (Accumulated Projection X-Ray Dose), included */
  num_item(d, "113722", "DCM", "Dose Area Product Total", kap * 1e-4, "Gy.m2", "Gy.m2");
  num_item(d, "113725", "DCM", "Dose (RP) Total", k * 1e-3, "Gy", "Gy");
  num_item(d, "113726", "DCM", "Fluoro Dose Area Product Total", fkap * 1e-4, "Gy.m2", "Gy.m2");
  num_item(d, "113728", "DCM", "Fluoro Dose (RP) Total", fk * 1e-3, "Gy", "Gy");
  num_item(d, "113730", "DCM", "Total Fluoro Time", ft, "s", "s");
  num_item(d, "113727", "DCM", "Acquisition Dose Area Product Total", akap * 1e-4, "Gy.m2", "Gy.m2");
  num_item(d, "113729", "DCM", "Acquisition Dose (RP) Total", ak * 1e-3, "Gy", "Gy");
  num_item(d, "113855", "DCM", "Total Acquisition Time", at, "s", "s");
  num_item(d, "113731", "DCM", "Total Number of Radiographic Frames", frames, "1", "no units");
  ref_point(d);
  close_container(d);
}

int xt_dicom_dose_sr(const xt_dicom_run *runs, int nrun, const xt_dicom_identity *id, unsigned char **out, size_t *len,
                     xt_msg *msg) {
  return xt_dicom_dose_sr_uids(runs, nrun, id, NULL, NULL, out, len, msg);
}

int xt_dicom_dose_sr_uids(const xt_dicom_run *runs, int nrun, const xt_dicom_identity *id, const char *series_uid,
                          const char *sop_uid, unsigned char **out, size_t *len, xt_msg *msg) {
  *out = NULL;
  *len = 0;
  if (nrun < 1) return xt_fail(msg, XT_EINVAL, "dose SR: no runs");
  run_sum *s = calloc((size_t)nrun, sizeof *s);
  xt_dcw *d = xt_dcw_new();
  int rc = 0;
  if (!s || !d) {
    rc = xt_fail(msg, XT_ENOMEM, "out of memory");
    goto done;
  }
  int nplanes = 1;
  for (int i = 0; i < nrun; i++) {
    if ((rc = summarise(&runs[i], &s[i], msg))) goto done;
    if (s[i].plane || runs[i].biplane) nplanes = 2; /* a biplane system reports Plane A and Plane B */
  }
  char da[9], tm[14], dt[27], sop[XT_DCW_UID], series[XT_DCW_UID], device[XT_DCW_UID];
  wall_dt(runs[nrun - 1].t0_unix_us, da, tm, dt);
  if (sop_uid) snprintf(sop, sizeof sop, "%s", sop_uid);
  else xt_dcw_uid(sop);
  if (series_uid) snprintf(series, sizeof series, "%s", series_uid);
  else xt_dcw_uid(series);
  snprintf(device, sizeof device, "1.2.826.0.1.3680043.2.1143.28"); /* the twin as a device: fixed */
  /* SOP Common, SR Document Series, General Study, Patient, equipment */
  xt_dcw_str(d, T(0008, 0012), "DA", da);
  xt_dcw_str(d, T(0008, 0013), "TM", tm);
  xt_dcw_str(d, T(0008, 0016), "UI", SOP_RDSR);
  xt_dcw_str(d, T(0008, 0018), "UI", sop);
  xt_dcw_str(d, T(0008, 0020), "DA", da);
  xt_dcw_str(d, T(0008, 0023), "DA", da);
  xt_dcw_str(d, T(0008, 0030), "TM", tm);
  xt_dcw_str(d, T(0008, 0033), "TM", tm);
  xt_dcw_str(d, T(0008, 0050), "SH", id->accession_number);
  xt_dcw_str(d, T(0008, 0060), "CS", "SR");
  xt_dcw_str(d, T(0008, 0070), "LO", "xtwin");
  xt_dcw_str(d, T(0008, 0080), "LO", id->institution);
  xt_dcw_str(d, T(0008, 0090), "PN", id->referring_physician);
  xt_dcw_str(d, T(0008, 1010), "SH", id->station);
  xt_dcw_str(d, T(0008, 1030), "LO", id->study_description);
  xt_dcw_str(d, T(0008, 103E), "LO", "Radiation Dose Information");
  xt_dcw_str(d, T(0008, 1090), "LO", "xtwin C-arm twin (Azurion-like)");
  xt_dcw_seq(d, T(0008, 1111)); /* Referenced Performed Procedure Step: none */
  xt_dcw_end_seq(d);
  xt_dcw_str(d, T(0010, 0010), "PN", id->patient_name);
  xt_dcw_str(d, T(0010, 0020), "LO", id->patient_id);
  xt_dcw_str(d, T(0010, 0030), "DA", id->patient_birth_date);
  xt_dcw_str(d, T(0010, 0040), "CS", id->patient_sex);
  if (id->synthetic) xt_dcw_str(d, T(0010, 4000), "LT", "synthetic: made by the xtwin digital twin, not a patient");
  xt_dcw_str(d, T(0018, 1000), "LO", "XTWIN-0001");
  xt_dcw_str(d, T(0018, 1020), "LO", runs[0].software && *runs[0].software ? runs[0].software : "xtwin");
  xt_dcw_str(d, T(0020, 000D), "UI", id->study_uid);
  xt_dcw_str(d, T(0020, 000E), "UI", series);
  xt_dcw_str(d, T(0020, 0010), "SH", id->study_id);
  xt_dcw_num1(d, T(0020, 0011), "IS", 999);
  xt_dcw_num1(d, T(0020, 0013), "IS", 1);
  /* SR Document General */
  xt_dcw_str(d, T(0040, A491), "CS", "COMPLETE");
  xt_dcw_str(d, T(0040, A493), "CS", "UNVERIFIED");
  xt_dcw_seq(d, T(0040, A372)); /* Performed Procedure Code: none */
  xt_dcw_end_seq(d);
  xt_dcw_seq(d, T(0040, A375)); /* Current Requested Procedure Evidence: the runs' images */
  xt_dcw_item(d);
  xt_dcw_str(d, T(0020, 000D), "UI", id->study_uid);
  xt_dcw_seq(d, T(0008, 1115));
  for (int i = 0; i < nrun; i++)
    for (int k = 0; k < 2; k++) {
      xt_dcw_item(d);
      xt_dcw_str(d, T(0020, 000E), "UI", k ? runs[i].classic_series_uid : runs[i].series_uid);
      xt_dcw_seq(d, T(0008, 1199));
      xt_dcw_item(d);
      xt_dcw_str(d, T(0008, 1150), "UI", k ? SOP_XA : SOP_EXA);
      xt_dcw_str(d, T(0008, 1155), "UI", k ? runs[i].classic_sop_uid : runs[i].sop_uid);
      xt_dcw_end_item(d);
      xt_dcw_end_seq(d);
      xt_dcw_end_item(d);
    }
  xt_dcw_end_seq(d);
  xt_dcw_end_item(d);
  xt_dcw_end_seq(d);
  /* SR Document Content: the root container, TID 10001 */
  xt_dcw_str(d, T(0040, A040), "CS", "CONTAINER");
  xt_dcw_seq(d, T(0040, A043));
  xt_dcw_item(d);
  code(d, "113701", "DCM", "X-Ray Radiation Dose Report");
  xt_dcw_end_item(d);
  xt_dcw_end_seq(d);
  xt_dcw_str(d, T(0040, A050), "CS", "SEPARATE");
  xt_dcw_seq(d, T(0040, A504)); /* Content Template Sequence */
  xt_dcw_item(d);
  xt_dcw_str(d, T(0008, 0105), "CS", "DCMR");
  xt_dcw_str(d, T(0040, DB00), "CS", "10001");
  xt_dcw_end_item(d);
  xt_dcw_end_seq(d);
  xt_dcw_seq(d, T(0040, A730));
  code_item(d, "HAS CONCEPT MOD", "121058", "DCM", "Procedure reported", "113704", "DCM", "Projection X-Ray");
  code_item(d, "HAS OBS CONTEXT", "121005", "DCM", "Observer Type", "121007", "DCM", "Device");
  uid_item(d, "HAS OBS CONTEXT", "121012", "DCM", "Device Observer UID", device);
  text_item(d, "HAS OBS CONTEXT", "121013", "DCM", "Device Observer Name", id->station[0] ? id->station : "XTWIN");
  text_item(d, "HAS OBS CONTEXT", "121014", "DCM", "Device Observer Manufacturer", "xtwin");
  text_item(d, "HAS OBS CONTEXT", "121015", "DCM", "Device Observer Model Name", "xtwin C-arm twin (Azurion-like)");
  text_item(d, "HAS OBS CONTEXT", "121016", "DCM", "Device Observer Serial Number", "XTWIN-0001");
  open_item(d, "HAS OBS CONTEXT", "CODE", "113705", "DCM", "Scope of Accumulation");
  xt_dcw_seq(d, T(0040, A168));
  xt_dcw_item(d);
  code(d, "113014", "DCM", "Study");
  xt_dcw_end_item(d);
  xt_dcw_end_seq(d);
  xt_dcw_seq(d, T(0040, A730));
  uid_item(d, "HAS PROPERTIES", "110180", "DCM", "Study Instance UID", id->study_uid);
  xt_dcw_end_seq(d);
  xt_dcw_end_item(d);
  for (int pl = 0; pl < nplanes; pl++) accumulated(d, s, nrun, pl, nplanes);
  for (int i = 0; i < nrun; i++) event(d, &runs[i], &s[i], nplanes);
  xt_dcw_end_seq(d);
  rc = xt_dcw_encode(d, out, len, msg);
done:
  xt_dcw_free(d);
  free(s);
  return rc;
}
