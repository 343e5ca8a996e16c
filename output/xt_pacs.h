/* C-STORE to a PACS through DCMTK's network module (dcmnet's DcmSCU), behind this plain C header;
 * output/xt_pacs_dcmtk.cpp is the one C++ file behind it. Files are written by xt_dcw.h (GDCM); this
 * sends them. Why DCMTK for the network although GDCM writes the files: docs/dicom.md ("Choices").
 * No C++ exception crosses it; every failure is one line in msg naming the peer or the file. */
#ifndef XT_PACS_H
#define XT_PACS_H

#include "xt_err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct xt_pacs_peer {
  const char *host;    /* name or address */
  int port;            /* its DICOM port */
  const char *called;  /* its AE title; NULL: "ANY-SCP" */
  const char *calling; /* ours; NULL: "XTWIN" */
  int timeout_s;       /* connect, ACSE and DIMSE timeouts; 0: 30 s */
} xt_pacs_peer;

/* One association: a C-ECHO, then a C-STORE of each file (its SOP class and transfer syntax read
 * from the file). 0 when the SCP answered Success for every file (a warning status counts as
 * stored); otherwise the first failure: no association (nothing there, AE title refused), a
 * presentation context refused, or the SCP's failure status, with the file it was for. */
int xt_pacs_store(const xt_pacs_peer *peer, const char *const *files, int n, xt_msg *msg);

#ifdef __cplusplus
}
#endif

#endif /* XT_PACS_H */
