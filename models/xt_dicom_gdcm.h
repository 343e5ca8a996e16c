/* The C side of the DICOM reader: what xt_dicom_gdcm.cpp (the only C++ in models/, because GDCM is
 * a C++ library) tells the C code about one DICOM file, and its decoded pixels. Compiles with
 * gcc -std=c11 and no GDCM headers; no C++ exception crosses it (every GDCM failure is an XT_E*
 * code and one line in msg naming the file).
 *
 * Series logic (grouping by Series Instance UID, sorting along the slice normal, spacing and tilt
 * checks, rescale) lives in C, in xt_load_dicom.c; this layer only reads attributes and decodes. */
#ifndef XT_DICOM_GDCM_H
#define XT_DICOM_GDCM_H

#include <stddef.h>

#include "xt_err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define XT_DCM_UID 68  /* UI values are at most 64 characters */
#define XT_DCM_TEXT 68 /* LO/CS values we keep (cut if longer) */

/* One frame's geometry and rescale. For a classic single-frame file there is one; for an
 * enhanced multi-frame file one per frame (per-frame functional groups, falling back to the
 * shared ones); for a classic multi-frame file (Grid Frame Offset Vector) one per frame too. */
typedef struct xt_dcm_frame {
  double ipp[3];      /* Image Position (Patient): centre of the first pixel, LPS mm */
  double iop[6];      /* Image Orientation (Patient): row direction (x3), column direction (x3) */
  double spacing[2];  /* Pixel Spacing: [0] between rows (mm), [1] between columns (mm) */
  double thickness;   /* Slice Thickness, mm (0 when absent) */
  double slope, inter; /* Rescale Slope / Intercept (1, 0 when absent) */
  int has_ipp, has_iop, has_spacing;
} xt_dcm_frame;

typedef struct xt_dcm_header {
  char series_uid[XT_DCM_UID];
  char sop_class[XT_DCM_UID];
  char transfer_syntax[XT_DCM_UID];
  char modality[XT_DCM_TEXT];
  char series_desc[XT_DCM_TEXT];
  char photometric[XT_DCM_TEXT];
  int series_number, has_series_number;
  int rows, cols, frames;     /* frames = Number of Frames (1 when absent) */
  int samples, bits_allocated, bits_stored, high_bit, pixel_rep;
  int has_rows, has_pixel_format;
  int float_pixels;           /* Float/Double Float Pixel Data present (not supported) */
  double spacing_between;     /* Spacing Between Slices (0 when absent) */
  double tilt_deg;            /* Gantry/Detector Tilt (0 when absent) */
  int has_tilt;
  int enhanced;               /* per-frame functional groups present */
  int nframe_info;            /* entries in frame[]: 1, or frames */
  xt_dcm_frame *frame;        /* malloc'd; freed by xt_dcm_header_free */
} xt_dcm_header;

/* 1 if the file starts with a DICOM Part 10 preamble ("DICM" at byte 128), else 0. */
int xt_dcm_sniff(const char *path);

/* Reads the attributes above (not the pixel data). XT_EFORMAT when GDCM cannot parse the file;
 * a file without image attributes is read fine (has_rows 0): the caller decides. */
int xt_dcm_read_header(const char *path, xt_dcm_header *h, xt_msg *msg);
void xt_dcm_header_free(xt_dcm_header *h);

/* The pixel format of decoded data. GDCM may correct the header's (a JPEG 2000 stream that says
 * unsigned in a file that says signed), so the decoder's own view is what the caller converts. */
typedef struct xt_dcm_pixfmt {
  int bits_allocated, bits_stored, high_bit, pixel_rep, samples;
} xt_dcm_pixfmt;

/* Decodes every frame of the file's pixel data, in any transfer syntax GDCM decodes (raw little
 * and big endian, deflate, RLE, JPEG baseline/extended/lossless, JPEG-LS, JPEG 2000), into buf
 * as rows*cols*frames elements of bits_allocated/8 bytes each, in host byte order, as stored
 * (no rescale, no masking of unused high bits). `bytes` must be exactly the decoded size;
 * anything else is XT_EFORMAT naming both sizes. */
int xt_dcm_read_pixels(const char *path, void *buf, size_t bytes, xt_dcm_pixfmt *fmt, xt_msg *msg);

#ifdef __cplusplus
}
#endif

#endif /* XT_DICOM_GDCM_H */
