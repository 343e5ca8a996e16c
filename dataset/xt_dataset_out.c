/* The output directory of `xtwin dataset`: DIR/spec.json, DIR/dataset.json (the dataset's own
 * description), DIR/shards/ and the tasks' manifests DIR/manifest-IIIII-of-NNNNN.jsonl. Opening
 * it for a run (xt_ds_out_prepare) is where the ownership rules are enforced: files are only
 * replaced or removed in a directory that holds a dataset of ours (its dataset.json), never
 * through a symbolic link, and nothing is written outside --out. The shards themselves are the
 * shard writers' (xt_dataset_shard.c). */
#define _GNU_SOURCE /* O_TMPFILE */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "xt_dataset_internal.h"
#include "xt_dataset_shard.h"

static char *dataset_json(const xt_ds_spec *s) {
  xt_jb b = {0};
  json_t *r = json_object();
  xt_jb_put(&b, r, "format", json_string("xtwin-dataset"));
  xt_jb_put(&b, r, "format_version", json_integer(1));
  xt_jb_put(&b, r, "xtwin_version", json_string(XT_VERSION));
  xt_jb_put(&b, r, "spec_sha256", json_string(s->sha256));
  xt_jb_put(&b, r, "backend", json_string(xt_backend_name(s->backend)));
  xt_jb_put(&b, r, "frames", json_integer(s->frames));
  xt_jb_put(&b, r, "shard_frames", json_integer(s->shard_frames));
  xt_jb_put(&b, r, "shards", json_integer(xt_ds_spec_shards(s)));
  xt_jb_put(&b, r, "shard_format", json_string(xt__ds_shard_format(s)->name));
  xt_jb_put(&b, r, "key_digits", json_integer(XT__DS_KEY_DIGITS));
  xt_ds_member_info mi[16];
  int n = xt_ds_members(s, mi, 16);
  json_t *mem = json_array();
  for (int i = 0; i < n; i++) {
    json_t *m = json_object();
    xt_jb_put(&b, m, "ext", json_string(mi[i].ext));
    if (mi[i].ndim) {
      xt_jb_put(&b, m, "dtype", json_string(mi[i].dtype));
      const int binned = s->chain.present && s->chain.base.binning == 2 &&
                         (!strncmp(mi[i].ext, "raw", 3) || !strncmp(mi[i].ext, "processed", 9));
      xt_jb_put(&b, m, "shape",
          json_string(mi[i].ndim == 3 ? "(channels, rows, cols)" : binned ? "(rows / 2, cols / 2)" : "(rows, cols)"));
    }
    xt_jb_push(&b, mem, m);
  }
  xt_jb_put(&b, r, "members", mem);
  json_t *modes = json_array();
  for (int i = 0; i < s->nmodes; i++) xt_jb_push(&b, modes, json_string(s->modes[i]->name));
  xt_jb_put(&b, r, "modes", modes);
  if (s->plane_b.present) { /* only then: a one-plane dataset.json is as it always was */
    json_t *pb = json_object(), *bm = json_array();
    for (int i = 0; i < s->plane_b.nmodes; i++) xt_jb_push(&b, bm, json_string(s->modes[s->plane_b.modes[i]]->name));
    xt_jb_put(&b, pb, "modes", bm);
    xt_jb_put(&b, pb, "members", json_string("KEY.<member>_b.npy: plane B's arrays, plane A's names with _b"));
    xt_jb_put(&b, pb, "meta", json_string("plane_b in KEY.json: its detector, pose, geometry, imaging.chain, landmarks"));
    xt_jb_put(&b, r, "plane_b", pb);
  }
  json_t *ch = json_array();
  for (int k = 0; k < s->nchannels; k++) xt_jb_push(&b, ch, json_string(s->channels[k].name));
  xt_jb_put(&b, r, "channels", ch);
  xt_jb_put(&b, r, "quantity", json_string(s->quantity == XT_DS_QTY_PATH_LENGTH ? "path_length_mm" : "line_integral"));
  json_t *lm = json_array();
  for (int i = 0; i < s->nlandmarks; i++) xt_jb_push(&b, lm, json_string(s->landmarks[i].name));
  xt_jb_put(&b, r, "landmarks", lm);
  char *text = b.bad ? NULL : json_dumps(r, JSON_INDENT(2) | JSON_SORT_KEYS);
  json_decref(r);
  if (!text) return NULL;
  size_t len = strlen(text);
  char *t2 = realloc(text, len + 2);
  if (!t2) {
    free(text);
    return NULL;
  }
  t2[len] = '\n';
  t2[len + 1] = 0;
  return t2;
}

/* Whether dfd/name holds exactly text: 1 the same, 0 not, -1 absent, -2 unreadable (errno). */
static int same_text(int dfd, const char *name, const char *text) {
  size_t n = 0;
  char *old = xt__ds_read_small(dfd, name, &n);
  if (!old) return errno == ENOENT ? -1 : -2;
  int same = n == strlen(text) && memcmp(old, text, n) == 0;
  free(old);
  return same;
}

/* Writes OUT/name with text, or checks that the one there is the same. */
static int write_or_check(const xt_ds_out *o, const char *name, const char *text, const char *what, xt_msg *msg) {
  int same = same_text(o->dirfd, name, text);
  if (same == 1) return 0;
  if (same == 0)
    return xt_fail(msg, XT_EEXISTS,
                   "--out: \"%s\" holds a dataset of another %s (%s differs); use another directory or the same spec",
                   o->dir, what, name);
  if (errno != ENOENT) return xt_fail(msg, XT_EIO, "--out: cannot read \"%s/%s\": %s", o->dir, name, strerror(errno));
  xt_msg m;
  int rc = xt__ds_write_atomic(o->dirfd, o->dir, name, text, strlen(text), &m);
  if (rc) return xt_fail(msg, rc, "--out: %s", m.text);
  return 0;
}

int xt_ds_out_paths(const char *dir, xt_ds_out *o, xt_msg *msg) {
  memset(o, 0, sizeof *o);
  o->dirfd = o->shardsfd = -1;
  if (strlen(dir) > 4000) return xt_fail(msg, XT_EINVAL, "--out: path longer than 4000 characters");
  snprintf(o->dir, sizeof o->dir, "%s", dir);
  snprintf(o->shards, sizeof o->shards, "%s/shards", dir);
  return 0;
}

void xt_ds_out_close(xt_ds_out *o) {
  if (o->shardsfd >= 0) close(o->shardsfd);
  if (o->dirfd >= 0) close(o->dirfd);
  o->dirfd = o->shardsfd = -1;
}

static int refuse_link(const char *dir, const char *name, xt_msg *msg) {
  return xt_fail(msg, XT_EEXISTS, "--out: \"%s/%s\" is a symbolic link; xtwin dataset writes nothing through one and "
                                  "replaces none", dir, name);
}

/* OUT/shards, never through a link. must: create it first where it is missing. */
static int open_shards(xt_ds_out *o, int must, xt_msg *msg) {
  if (must && mkdirat(o->dirfd, "shards", 0777) != 0 && errno != EEXIST)
    return xt_fail(msg, XT_EIO, "--out: cannot create directory \"%s\": %s", o->shards, strerror(errno));
  o->shardsfd = openat(o->dirfd, "shards", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (o->shardsfd >= 0 || (!must && errno == ENOENT)) return 0;
  int e = errno;
  struct stat st;
  if (fstatat(o->dirfd, "shards", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
    return refuse_link(o->dir, "shards", msg);
  return xt_fail(msg, XT_EIO, "--out: cannot open \"%s\": %s", o->shards, strerror(e));
}

int xt_ds_out_open(const char *dir, xt_ds_out *o, xt_msg *msg) {
  int rc = xt_ds_out_paths(dir, o, msg);
  if (rc) return rc;
  o->dirfd = open(o->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (o->dirfd >= 0) open_shards(o, 0, msg);
  return 0;
}

/* The names a run writes, replaces or removes: in --out, and in shards/. */
static int is_manifest(const char *n) {
  size_t l = strlen(n);
  return strncmp(n, "manifest-", 9) == 0 && l > 15 && strcmp(n + l - 6, ".jsonl") == 0;
}
static int is_out_name(const char *n) {
  return !strcmp(n, "spec.json") || !strcmp(n, "dataset.json") || !strcmp(n, "shards") || is_manifest(n);
}
static int is_shard_name(const char *n) { return !strncmp(n, "shard-", 6) || !strncmp(n, ".shard-", 7); }

/* The entries of dfd (path dir) that a run would write, replace or remove (ours()): a link among
 * them is refused; the first that in_way() names is kept in first (where no dataset is, they
 * are a user's). */
static int scan(int dfd, const char *dir, int (*ours)(const char *), int (*in_way)(const char *), char *first,
                size_t cap, xt_msg *msg) {
  int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* a description of its own for readdir */
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (!d) {
    int e = errno;
    if (fd >= 0) close(fd);
    return xt_fail(msg, XT_EIO, "--out: cannot read \"%s\": %s", dir, strerror(e));
  }
  int rc = 0;
  struct dirent *de;
  while (!rc && (de = readdir(d))) {
    struct stat st;
    if (!ours(de->d_name) || fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISLNK(st.st_mode)) rc = refuse_link(dir, de->d_name, msg);
    else if (!*first && in_way(de->d_name)) snprintf(first, cap, "%s/%s", dir, de->d_name);
  }
  closedir(d);
  return rc;
}

/* Ownership: a directory holds a dataset of ours once its dataset.json is there, and a run writes
 * dataset.json before anything in shards/. So where there is none, every file at a name of ours
 * is a user's and the run is refused before it writes anything; tasks that start together into one
 * new directory see each other's shards only after one of them wrote dataset.json, which is why a
 * name in the way is looked at again once the scan is over. */
int xt_ds_out_prepare(const xt_ds_spec *s, const char *dir, xt_ds_out *o, xt_msg *msg) {
  int rc = xt_ds_out_paths(dir, o, msg);
  if (rc) return rc;
  char *spec_text = NULL, *ds = NULL, first[4400] = "";
  xt_msg m;
  if ((rc = xt__ds_mkdir_p(o->dir, &m))) return xt_fail(msg, rc, "--out: %s", m.text);
  o->dirfd = open(o->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (o->dirfd < 0) {
    rc = xt_fail(msg, XT_EIO, "--out: cannot open \"%s\": %s", o->dir, strerror(errno));
    goto fail;
  }
  spec_text = malloc(strlen(s->canonical) + 2);
  ds = dataset_json(s);
  if (!spec_text || !ds) {
    rc = xt_fail(msg, XT_ENOMEM, "out of memory");
    goto fail;
  }
  sprintf(spec_text, "%s\n", s->canonical);
  if ((rc = scan(o->dirfd, o->dir, is_out_name, is_manifest, first, sizeof first, msg)) ||
      (rc = open_shards(o, 0, msg)) ||
      (o->shardsfd >= 0 && (rc = scan(o->shardsfd, o->shards, is_shard_name, is_shard_name, first, sizeof first, msg))))
    goto fail;
  int have = same_text(o->dirfd, "dataset.json", ds);
  if (have == -1) {
    if (!*first && same_text(o->dirfd, "spec.json", spec_text) == 0) snprintf(first, sizeof first, "%s/spec.json", o->dir);
    if (*first && same_text(o->dirfd, "dataset.json", ds) != 1) {
      rc = xt_fail(msg, XT_EEXISTS,
                   "--out: \"%s\" is in the way: \"%s\" holds no dataset (no dataset.json) and xtwin dataset replaces "
                   "no file it did not write",
                   first, o->dir);
      goto fail;
    }
  } else if (have == 0) {
    const int spec_differs = same_text(o->dirfd, "spec.json", spec_text) == 0;
    rc = xt_fail(msg, XT_EEXISTS,
                 "--out: \"%s\" holds a dataset of another %s (%s differs); use another directory or the same spec",
                 o->dir, spec_differs ? "spec" : "spec or backend", spec_differs ? "spec.json" : "dataset.json");
    goto fail;
  } else if (have == -2) {
    rc = xt_fail(msg, XT_EIO, "--out: cannot read \"%s/dataset.json\": %s", o->dir, strerror(errno));
    goto fail;
  }
  if ((rc = write_or_check(o, "spec.json", spec_text, "spec", msg)) ||
      (rc = write_or_check(o, "dataset.json", ds, "spec or backend", msg)) ||
      (o->shardsfd < 0 && (rc = open_shards(o, 1, msg))))
    goto fail;
  /* Fail now, not after the first shard's render, where shards/ cannot be written. */
  int fd = -1;
#ifdef O_TMPFILE
  fd = openat(o->shardsfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
#endif
  if (fd < 0) {
    char probe[64];
    fd = xt__ds_create_unique(o->shardsfd, ".xtwin-write-probe-", probe, sizeof probe, O_WRONLY);
    if (fd >= 0) unlinkat(o->shardsfd, probe, 0);
  }
  if (fd < 0) {
    rc = xt_fail(msg, XT_EIO, "--out: cannot write in \"%s\": %s", o->shards, strerror(errno));
    goto fail;
  }
  close(fd);
  free(spec_text);
  free(ds);
  return 0;
fail:
  free(spec_text);
  free(ds);
  xt_ds_out_close(o);
  return rc;
}


/* The task's manifest: its shards' lines, in the order given, as one file written atomically. */
int xt_ds_write_task_manifest(const xt_ds_out *o, const long long *shards, long long n, int task, int ntasks,
                              xt_msg *msg) {
  size_t cap = 4096, len = 0;
  char *all = malloc(cap);
  if (!all) return xt_fail(msg, XT_ENOMEM, "out of memory");
  for (long long i = 0; i < n; i++) {
    char p[64];
    snprintf(p, sizeof p, "shard-%06lld.json", shards[i]);
    size_t k = 0;
    char *line = xt__ds_read_small(o->shardsfd, p, &k);
    if (!line) {
      int e = errno;
      free(all);
      return xt_fail(msg, XT_EIO, "cannot read \"%s/%s\": %s", o->shards, p, strerror(e));
    }
    if (len + k + 2 > cap) {
      while (len + k + 2 > cap) cap *= 2;
      char *na = realloc(all, cap);
      if (!na) {
        free(line);
        free(all);
        return xt_fail(msg, XT_ENOMEM, "out of memory");
      }
      all = na;
    }
    memcpy(all + len, line, k);
    len += k;
    free(line);
  }
  char name[64];
  snprintf(name, sizeof name, "manifest-%05d-of-%05d.jsonl", task, ntasks);
  int rc = xt__ds_write_atomic(o->dirfd, o->dir, name, all, len, msg);
  free(all);
  return rc;
}
