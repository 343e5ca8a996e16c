/* Shards of `xtwin dataset`, the part common to every format (xt_dataset_shard.h): the formats'
 * registry, the writer the run loop drives (open, add a frame, commit, abort), the manifest line
 * that makes a shard count as done, and the resume's test of a shard (xt_ds_shard_done) with the
 * cleanup of what a killed run left. docs/dataset.md gives the layout; api/python/xtwin_dataset.py
 * reads it.
 *
 * A shard counts as done only once its manifest line (shards/shard-N.json, itself written to a
 * temporary and renamed) exists, and the line is written only after the format has put the
 * shard's data in place durably: a run killed at any moment leaves either a complete shard with
 * its line, or something the next run removes and makes again. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "xt_dataset_internal.h"
#include "xt_dataset_shard.h"

/* The formats, indexed by XT_DS_FMT_* (the spec's output.format is an index into this list, by
 * name): a new format is its file and one line here. */
const xt_ds_shard_ops *const xt_ds_shard_formats[] = {
    [XT_DS_FMT_TAR] = &xt_ds_shard_tar,
    [XT_DS_FMT_FOLDER] = &xt_ds_shard_folder,
};
const int xt_ds_shard_nformats = (int)(sizeof xt_ds_shard_formats / sizeof xt_ds_shard_formats[0]);

const xt_ds_shard_ops *xt__ds_shard_format(const xt_ds_spec *s) { return xt_ds_shard_formats[s->format]; }

const char *xt_ds_format_name(int format) {
  return format >= 0 && format < xt_ds_shard_nformats ? xt_ds_shard_formats[format]->name : "?";
}

const char *xt_ds_format_choices(void) {
  static char choices[256];
  if (!choices[0])
    for (int i = 0; i < xt_ds_shard_nformats; i++) {
      size_t n = strlen(choices);
      snprintf(choices + n, sizeof choices - n, "%s%s", i ? "|" : "", xt_ds_shard_formats[i]->name);
    }
  return choices;
}

void xt__ds_shard_names(const xt_ds_spec *s, long long shard, char *data, char *json, size_t cap) {
  snprintf(data, cap, "shard-%06lld%s", shard, xt__ds_shard_format(s)->suffix);
  snprintf(json, cap, "shard-%06lld.json", shard);
}

/* ------------------------------------------------------------------------------------------ */
/* Resume                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* What a killed run may have left of a shard: its temporaries (every hidden ".shard-N." name: only
 * the task that owns shard N writes them), and a shard without its line. */
static void remove_leftovers(const xt_ds_spec *s, const xt_ds_out *o, long long shard) {
  char prefix[64];
  int pl = snprintf(prefix, sizeof prefix, ".shard-%06lld.", shard);
  int fd = openat(o->shardsfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (d) {
    struct dirent *de;
    while ((de = readdir(d)))
      if (strncmp(de->d_name, prefix, (size_t)pl) == 0) xt__ds_rm_rf(fd, de->d_name);
    closedir(d);
  } else if (fd >= 0) {
    close(fd);
  }
  char data[64], json[64];
  xt__ds_shard_names(s, shard, data, json, sizeof data);
  xt__ds_shard_format(s)->remove(o->shardsfd, data);
  xt__ds_dicom_remove(o->shardsfd, shard); /* whether or not this spec has "dicom": names of shard N are ours */
}

int xt_ds_shard_done(const xt_ds_spec *s, const xt_ds_out *o, long long shard, int verify, int cleanup) {
  if (o->shardsfd < 0) return 0;
  char data[64], jname[64];
  xt__ds_shard_names(s, shard, data, jname, sizeof data);
  size_t n = 0;
  char *text = xt__ds_read_small(o->shardsfd, jname, &n);
  int done = 0;
  if (text) {
    json_t *j = json_loads(text, 0, NULL);
    json_t *sha = json_object_get(j, "sha256"), *bytes = json_object_get(j, "bytes"),
           *spec = json_object_get(j, "spec_sha256");
    if (json_is_string(sha) && json_is_integer(bytes) && json_is_string(spec) &&
        strcmp(json_string_value(spec), s->sha256) == 0)
      done = xt__ds_shard_format(s)->complete(o->shardsfd, data, json_integer_value(bytes), json_string_value(sha),
                                               verify);
    json_decref(j);
    free(text);
  }
  if (!done && cleanup) {
    unlinkat(o->shardsfd, jname, 0);
    remove_leftovers(s, o, shard);
  }
  return done;
}

/* ------------------------------------------------------------------------------------------ */
/* The writer                                                                                 */
/* ------------------------------------------------------------------------------------------ */

static void writer_free(xt_ds_shard_writer *w) {
  if (!w) return;
  xt__ds_dicom_free(w->dcm);
  w->ops->free(w);
  free(w);
}

void xt_ds_shard_abort(xt_ds_shard_writer *w) {
  if (!w) return;
  w->ops->abort(w);
  if (w->dcm) xt__ds_dicom_remove(w->o->shardsfd, w->shard);
  writer_free(w);
}

int xt_ds_shard_open(const xt_ds_spec *s, const xt_ds_out *o, long long shard, xt_ds_shard_writer **out, xt_msg *msg) {
  xt_ds_shard_writer *w = calloc(1, sizeof *w);
  *out = NULL;
  if (!w) return xt_fail(msg, XT_ENOMEM, "out of memory");
  w->ops = xt__ds_shard_format(s);
  w->s = s;
  w->o = o;
  w->shard = shard;
  xt__ds_shard_names(s, shard, w->data_name, w->json_name, sizeof w->data_name);
  snprintf(w->data, sizeof w->data, "%s/%s", o->shards, w->data_name);
  if (s->dicom.present && !(w->dcm = xt__ds_dicom_new())) {
    free(w);
    return xt_fail(msg, XT_ENOMEM, "out of memory");
  }
  int rc = w->ops->open(w, msg);
  if (rc) {
    xt__ds_dicom_free(w->dcm);
    free(w); /* open freed its own state */
    return rc;
  }
  *out = w;
  return 0;
}

int xt_ds_shard_add(xt_ds_shard_writer *w, xt_ds_encoder *e, const xt_ds_frame_data *fd, xt_ds_wstats *st,
                    xt_ds_disk_fn disk, void *dctx, xt_msg *msg) {
  double t0 = xt__ds_now_s();
  xt_ds_member mem[16];
  int nm = 0, rc;
  if ((rc = xt__ds_encode_frame(e, fd, mem, &nm, msg))) return rc;
  st->encode_s += xt__ds_now_s() - t0;
  if ((rc = w->ops->add(w, mem, nm, st, disk, dctx, msg))) return rc;
  if (w->dcm) { /* a copy of the chain frame: the render buffers go back to the pool */
    t0 = xt__ds_now_s();
    if ((rc = xt__ds_dicom_add(w, fd, msg))) return rc;
    st->encode_s += xt__ds_now_s() - t0;
  }
  w->frames++;
  st->frames++;
  return 0;
}

/* shards/shard-N.json: one line, the shard's place, size and checksum, and the spec it is of. */
static int manifest_line(xt_ds_shard_writer *w, const char *sha, xt_msg *msg) {
  const xt_ds_spec *s = w->s;
  xt_jb b = {0};
  json_t *r = json_object();
  char rel[96];
  snprintf(rel, sizeof rel, "shards/%s", w->data_name);
  xt_jb_put(&b, r, "shard", json_integer(w->shard));
  xt_jb_put(&b, r, "path", json_string(rel));
  xt_jb_put(&b, r, "format", json_string(w->ops->name));
  xt_jb_put(&b, r, "first_frame", json_integer(w->shard * s->shard_frames));
  xt_jb_put(&b, r, "frames", json_integer(w->frames));
  xt_jb_put(&b, r, "bytes", json_integer((json_int_t)w->bytes));
  xt_jb_put(&b, r, "sha256", json_string(sha));
  xt_jb_put(&b, r, "sha256_of", json_string(w->ops->sha256_of));
  xt_jb_put(&b, r, "spec_sha256", json_string(s->sha256));
  if (w->dcm) xt_jb_put(&b, r, "dicom", xt__ds_dicom_manifest(w, &b));
  char *text = b.bad ? NULL : json_dumps(r, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(r);
  if (!text) return xt_fail(msg, XT_ENOMEM, "out of memory");
  size_t len = strlen(text);
  char *line = realloc(text, len + 2);
  if (!line) {
    free(text);
    return xt_fail(msg, XT_ENOMEM, "out of memory");
  }
  line[len] = '\n';
  line[len + 1] = 0;
  int rc = xt__ds_write_atomic(w->o->shardsfd, w->o->shards, w->json_name, line, len + 1, msg);
  free(line);
  return rc;
}

int xt_ds_shard_commit(xt_ds_shard_writer *w, xt_ds_wstats *st, xt_ds_disk_fn disk, void *dctx, xt_msg *msg) {
  int rc = 0;
  char sha[65];
  double t0 = xt__ds_now_s();
  if (disk) disk(dctx, 1);
  if ((rc = w->ops->close(w, sha, st, msg))) goto fail;
  if (xt__ds_fsync(w->o->shardsfd) != 0) {
    rc = xt_fail(msg, XT_EIO, "shard %lld: cannot sync \"%s\": %s", w->shard, w->o->shards, strerror(errno));
    goto fail;
  }
  /* The DICOM objects before the line: a shard that counts as done has them. */
  if (w->dcm) {
    unsigned long long dbytes = 0;
    if ((rc = xt__ds_dicom_write(w, &dbytes, msg))) {
      w->ops->remove(w->o->shardsfd, w->data_name);
      xt__ds_dicom_remove(w->o->shardsfd, w->shard);
      if (disk) disk(dctx, 0);
      st->write_s += xt__ds_now_s() - t0;
      writer_free(w);
      return rc;
    }
    (void)dbytes; /* the run's byte counts stay the shards' (the manifest's) */
  }
  /* No line, no shard: do not leave a shard that looks finished. */
  if ((rc = manifest_line(w, sha, msg))) {
    w->ops->remove(w->o->shardsfd, w->data_name);
    if (w->dcm) xt__ds_dicom_remove(w->o->shardsfd, w->shard);
  }
  if (disk) disk(dctx, 0);
  st->write_s += xt__ds_now_s() - t0;
  writer_free(w);
  return rc;
fail:
  if (disk) disk(dctx, 0);
  st->write_s += xt__ds_now_s() - t0;
  xt_ds_shard_abort(w);
  return rc;
}
