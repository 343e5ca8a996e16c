/* DICOM out (issue 28): a run of frame records as an Enhanced XA multi-frame object (per-frame
 * functional groups), as a classic XA multi-frame object for older viewers, and a study's X-Ray
 * Radiation Dose SR (TID 10001 with one TID 10003 irradiation event per run). Every quantity is read
 * from the records through xt_frame_fields_of (xt_record.h), as the stream header and the sidecar
 * read it; nothing is re-derived from physics here. The tags, their meaning in xtwin's geometry
 * and the classic XA's approximations: docs/dicom.md. Encoding and the network: xt_dcw.h (GDCM). */
#ifndef XT_DICOM_H
#define XT_DICOM_H

#include <stddef.h>
#include <stdint.h>

#include "xt_acq.h"
#include "xt_dcw.h"
#include "xt_err.h"

/* Who and what the objects are about: from a JSON file the user gives (docs/dicom.md lists the
 * keys), or defaults that say they are synthetic. Values are checked against their VR's length. */
typedef struct xt_dicom_identity {
  char patient_name[65], patient_id[65], patient_birth_date[9], patient_sex[17];
  char study_uid[XT_DCW_UID], study_id[17], accession_number[17], study_description[65];
  char referring_physician[65], institution[65], station[17], operator_name[65];
  int synthetic; /* the defaults: names say so, Content Qualification RESEARCH */
  int study_uid_given; /* the file named study_instance_uid (else study_uid is a new one) */
} xt_dicom_identity;

/* Defaults (synthetic) with a new study UID; then the file's keys over them (path NULL: none).
 * An unknown key, a value of the wrong type or too long: XT_EFORMAT naming file and key. */
int xt_dicom_identity_load(const char *path, xt_dicom_identity *id, xt_msg *msg);

/* Which of a chain frame's images the run carries. */
typedef enum { XT_DICOM_PROC = 0, XT_DICOM_RAW = 1 } xt_dicom_pixels;

/* One run: n chain frame records of one plane and one detector mode, in order, with their pixels
 * (frame i's image, rows x cols of the record's raw/proc size). */
typedef struct xt_dicom_run {
  const xt_acq_frame *frames;
  const uint16_t *const *pixels;
  int n;
  xt_dicom_pixels which;
  double frame_ms;        /* the frame interval where the records carry no times (xtwin render) */
  int64_t t0_unix_us;     /* wall-clock time of the first frame's exposure */
  int series_number;
  int fluoro;             /* 1: stored fluoroscopy, 0: an exposure run (the SR's event type) */
  int biplane;            /* the system has two planes: plane A's runs say PLANE A, not MONOPLANE */
  const char *software;   /* Software Versions */
  /* UIDs, made by the caller once (xt_dcw_uid) so that the images and the SR agree */
  char series_uid[XT_DCW_UID], sop_uid[XT_DCW_UID], classic_series_uid[XT_DCW_UID], classic_sop_uid[XT_DCW_UID];
  char event_uid[XT_DCW_UID], frame_of_reference_uid[XT_DCW_UID];
  /* biplane: the other plane's objects of the same acquisition (Referenced Other Plane Sequence of
   * the Enhanced XA, Referenced Image Sequence of the classic XA); "" where there is none yet */
  char other_plane_sop_uid[XT_DCW_UID], other_plane_classic_sop_uid[XT_DCW_UID];
} xt_dicom_run;

/* Fills r's UIDs with new ones. */
void xt_dicom_run_uids(xt_dicom_run *r);

/* The Part 10 files, each in one malloc'd buffer (*out, *len; the caller frees). */
int xt_dicom_enhanced_xa(const xt_dicom_run *r, const xt_dicom_identity *id, unsigned char **out, size_t *len,
                         xt_msg *msg);
int xt_dicom_classic_xa(const xt_dicom_run *r, const xt_dicom_identity *id, unsigned char **out, size_t *len,
                        xt_msg *msg);
/* The study's dose report over nrun runs (one irradiation event each, accumulated per plane). */
int xt_dicom_dose_sr(const xt_dicom_run *runs, int nrun, const xt_dicom_identity *id, unsigned char **out, size_t *len,
                     xt_msg *msg);
/* The same with the report's own series and SOP instance UIDs given (NULL: new ones), for callers
 * whose UIDs must follow from their input (a dataset's shard). */
int xt_dicom_dose_sr_uids(const xt_dicom_run *runs, int nrun, const xt_dicom_identity *id, const char *series_uid,
                          const char *sop_uid, unsigned char **out, size_t *len, xt_msg *msg);

/* internal: DA, TM and DT of a wall-clock time in microseconds since 1970 (UTC) */
void xt__dicom_wall(int64_t us, char da[9], char tm[14], char dt[27]);

#endif /* XT_DICOM_H */
