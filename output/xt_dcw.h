/* DICOM writing through GDCM (Debian's libgdcm-dev), behind this plain C header: a data set built
 * element by element (sequences and items nested as the caller opens and closes them), encoded as
 * a Part 10 file in Explicit VR Little Endian, and new UIDs. output/xt_dcw_gdcm.cpp is the one C++
 * file behind it; what the objects say (Enhanced XA, classic XA, the dose SR) is C, in xt_dicom*.c,
 * from the frame records' fields. GDCM because xtwin already reads DICOM with it
 * (models/xt_dicom_gdcm.cpp); sending (C-STORE) is DCMTK's, behind xt_pacs.h (docs/dicom.md).
 *
 * Building never fails half-way for the caller: the first error (a bad tag, a value too long for
 * its VR, out of memory, a sequence not closed) is kept and reported by xt_dcw_encode, so a
 * builder reads as the list of its elements. No C++ exception crosses this header. */
#ifndef XT_DCW_H
#define XT_DCW_H

#include <stddef.h>
#include <stdint.h>

#include "xt_err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define XT_DCW_UID 65 /* a UID is at most 64 characters */

typedef struct xt_dcw xt_dcw;

/* A tag as 0xGGGGEEEE. */
#define XT_TAG(g, e) ((uint32_t)(((uint32_t)(g) << 16) | (uint32_t)(e)))

xt_dcw *xt_dcw_new(void); /* NULL when out of memory */
void xt_dcw_free(xt_dcw *d);

/* A string-valued element (AE AS CS DA DS DT IS LO LT PN SH ST TM UI UT; values of a multi-valued
 * element separated by '\'); padded to even length as its VR asks (NUL for UI, else a space). An
 * empty value makes an empty (Type 2) element. */
void xt_dcw_str(xt_dcw *d, uint32_t tag, const char *vr, const char *value);
/* n numbers: binary for US SS UL SL FL FD and AT (a tag as XT_TAG), text for DS (at most 16 characters each, the most
 * significant digits that fit) and IS (rounded). */
void xt_dcw_num(xt_dcw *d, uint32_t tag, const char *vr, const double *v, int n);
void xt_dcw_num1(xt_dcw *d, uint32_t tag, const char *vr, double v);
/* A sequence in the current data set; items in it; each closed in the reverse order. */
void xt_dcw_seq(xt_dcw *d, uint32_t tag);
void xt_dcw_item(xt_dcw *d);
void xt_dcw_end_item(xt_dcw *d);
void xt_dcw_end_seq(xt_dcw *d);
/* Records a failure of the caller's (out of memory, say) as the builder's first error. */
void xt_dcw_fail(xt_dcw *d, int code, const char *why);
/* Pixel Data (7FE0,0010) as OW: n 16-bit samples in host order (little-endian hosts only). */
void xt_dcw_pixels16(xt_dcw *d, const uint16_t *px, size_t n);

/* The Part 10 file (preamble, File Meta Information from the data set's SOP class and instance,
 * Explicit VR Little Endian) in one malloc'd buffer; the caller frees *out. */
int xt_dcw_encode(xt_dcw *d, unsigned char **out, size_t *len, xt_msg *msg);

/* A new UID (GDCM's generator: its root, then host, time and a random part). */
void xt_dcw_uid(char out[XT_DCW_UID]);

#ifdef __cplusplus
}
#endif

#endif /* XT_DCW_H */
