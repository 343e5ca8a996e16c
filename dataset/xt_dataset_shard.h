/* The shard-writer interface of `xtwin dataset`: one table of operations per shard format, filled
 * by one file each (xt_dataset_shard_tar.c, xt_dataset_shard_folder.c) and registered in
 * xt_ds_shard_formats[] (xt_dataset_shard.c). The run loop (xt_ds_shard_open/add/commit/abort in
 * xt_dataset.h) and the output directory (resume, cleanup) reach a format only through its table,
 * so they never branch on it: a new format (a DICOM writer, say) is one file and one line there.
 *
 * What the common part does for every format: the frame's members (xt__ds_encode_frame), the
 * shard's names, the frame and byte counts, the manifest line (shard-N.json, written atomically
 * after the data is in place: a shard counts as done only then) and removing the data again when
 * that line cannot be written. What a format does: its temporary, its bytes, its checksum, putting
 * the data in place durably (fsync, then an atomic rename or link), and what it takes to call a
 * shard of its own complete. Not public API. */
#ifndef XT_DATASET_SHARD_H
#define XT_DATASET_SHARD_H

#include <stddef.h>

#include "xt_dataset.h"
#include "xt_json_build.h"
#include "xt_output.h"

/* A member's bytes in pieces, written in order without a copy: the NPY header (none for the JSON),
 * then the render buffers (labels.npy: one piece per channel). */
typedef struct xt_ds_piece {
  const void *p;
  size_t n;
} xt_ds_piece;

enum { XT_DS_MAX_PIECES = XT_DS_MAX_CHANNELS + 4 };

typedef struct xt_ds_member {
  char name[48];               /* KEY.EXT: "000000000042.lineint.npy" */
  char npy[XT_NPY_HEADER_MAX]; /* the NPY header (xt_npy_header) */
  size_t npy_len;              /* 0: none (the JSON) */
  xt_ds_piece data[XT_DS_MAX_PIECES];
  int npieces;
  size_t bytes; /* npy_len + the pieces */
} xt_ds_member;

/* The writer of one shard: the common fields, and the format's own state in impl. */
struct xt_ds_shard_writer {
  const struct xt_ds_shard_ops *ops;
  const xt_ds_spec *s;
  const xt_ds_out *o;
  long long shard, frames;
  unsigned long long bytes; /* the shard's, as the manifest line gives them */
  char data_name[64], json_name[64]; /* in shards/: the shard (file or folder), its manifest line */
  char tmp_name[64];                 /* in shards/: the named temporary, "" while there is none */
  char data[4400], tmp[4400];        /* their paths, for messages */
  void *impl;
  struct xt_ds_dicom_acc *dcm;       /* spec "dicom": the shard's chain frames gathered, else NULL */
};

typedef struct xt_ds_shard_ops {
  const char *name;      /* the spec's output.format, dataset.json's shard_format, the manifest's format */
  const char *suffix;    /* of the shard's name in shards/: "shard-000042" + suffix */
  const char *sha256_of; /* what the manifest line's sha256 covers, in words */
  /* Bytes a member of n data bytes takes in a shard (the dry run's estimate). */
  size_t (*member_bytes)(size_t n);
  /* Makes the shard's temporary in shards/ and w->impl; on failure frees what it made. */
  int (*open)(xt_ds_shard_writer *w, xt_msg *msg);
  /* Appends one frame's members, in order; adds the bytes written to w->bytes and st->bytes and
   * the time spent to st (hashing is encoding, write(2) is writing), reporting disk intervals. */
  int (*add)(xt_ds_shard_writer *w, const xt_ds_member *m, int n, xt_ds_wstats *st, xt_ds_disk_fn disk, void *dctx,
             xt_msg *msg);
  /* Completes the data and puts it in place under w->data_name, durably; sha gets the manifest's
   * checksum. On failure the caller aborts. */
  int (*close)(xt_ds_shard_writer *w, char sha[65], xt_ds_wstats *st, xt_msg *msg);
  /* Removes the temporary, if any (nothing of the shard stays on disk). */
  void (*abort)(xt_ds_shard_writer *w);
  /* Frees w->impl (and closes its descriptors). */
  void (*free)(xt_ds_shard_writer *w);
  /* 1 when shards/name (shardsfd) is a complete shard of this format of `bytes` bytes, reached
   * through no link; with verify, also with the checksum sha. Else 0. */
  int (*complete)(int shardsfd, const char *name, long long bytes, const char *sha, int verify);
  /* Removes the shard data shards/name (a killed run's, or one whose line could not be written). */
  void (*remove)(int shardsfd, const char *name);
} xt_ds_shard_ops;

extern const xt_ds_shard_ops xt_ds_shard_tar, xt_ds_shard_folder;

/* The formats, indexed by xt_ds_spec.format (XT_DS_FMT_*). */
extern const xt_ds_shard_ops *const xt_ds_shard_formats[];
extern const int xt_ds_shard_nformats;
/* The format of the spec's shards. */
const xt_ds_shard_ops *xt__ds_shard_format(const xt_ds_spec *s);
/* Shard i's data and manifest-line names in shards/. */
void xt__ds_shard_names(const xt_ds_spec *s, long long shard, char *data, char *json, size_t cap);

/* The DICOM output beside a shard (xt_dataset_dicom.c), for every format alike: the frames
 * gathered as they are added, the objects written once the shard's data is in place and before
 * its manifest line (which lists them), removed with a shard that is not done. */
typedef struct xt_ds_dicom_acc xt_ds_dicom_acc;
xt_ds_dicom_acc *xt__ds_dicom_new(void);
void xt__ds_dicom_free(xt_ds_dicom_acc *a);
int xt__ds_dicom_add(xt_ds_shard_writer *w, const xt_ds_frame_data *fd, xt_msg *msg);
/* Writes the shard's objects into shards/ (each atomically); bytes gets their sizes added. */
int xt__ds_dicom_write(xt_ds_shard_writer *w, unsigned long long *bytes, xt_msg *msg);
/* The names written ("shards/shard-000012_sr.dcm", ...), for the manifest line. */
json_t *xt__ds_dicom_manifest(const xt_ds_shard_writer *w, xt_jb *b);
/* Removes shard's objects and their temporaries from shards/. */
void xt__ds_dicom_remove(int shardsfd, long long shard);

#endif /* XT_DATASET_SHARD_H */
