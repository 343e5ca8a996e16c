/* The study folder (--study-dir, docs/server.md "Study folder", docs/dicom.md): the session's chain
 * runs written as DICOM (Enhanced XA, classic XA, the study's dose SR) by a writer thread of its
 * own. xt_srv_study_frame is all the frame path does: copy and queue, or drop when the queue holds
 * its budget; it never waits for the writer. With study_store a sender thread sends what the writer
 * wrote to a PACS; the writer never waits for it either. */
#ifndef XT_SRV_STUDY_H
#define XT_SRV_STUDY_H

#include <stdint.h>

#include "srv_metrics.h"
#include "xt_acq.h"
#include "xt_err.h"

struct xt_server;
typedef struct xt_srv_study xt_srv_study;

/* Starts the writer when cfg.study_dir is set (*out NULL otherwise); the folder must exist and be
 * writable, and cfg.identity (if given, which needs study_dir) must be a valid identity file. */
int xt_srv_study_open(struct xt_server *s, xt_srv_study **out, xt_msg *msg);
/* A chain frame's record and processed pixels (host memory), from a render worker. */
void xt_srv_study_frame(xt_srv_study *st, const xt_acq_frame *fr);
/* Writes the runs still gathered, stops the writer, frees everything. */
void xt_srv_study_close(xt_srv_study *st);
/* Run writes (a run written again counts again), frames dropped (queue full, run too long, out of memory), write errors. */
void xt_srv_study_counts(xt_srv_study *st, uint64_t *runs, uint64_t *dropped, uint64_t *errors);
/* Every counter for /metrics; 0 (and zeros) without a study folder. */
int xt_srv_study_stats(xt_srv_study *st, xt_metrics_study *out);

#endif /* XT_SRV_STUDY_H */
