/* Shared between the files of xtwin._core (pymod/). */
#ifndef XT_PY_H
#define XT_PY_H

#include <Python.h>

#include "xt_acq.h"

/* Sets the xtwin.errors class for rc (by its name) with text as its message; returns NULL. */
PyObject *xt_py_raise(int rc, const char *text);
/* A geometry from a 3x4 matrix in the pixel-centre convention: cols x rows pixels, rays ending at
 * depth sid (mm). */
int xt_py_geom_from_P(const double P[3][4], int cols, int rows, double sid, xt_geometry *g, xt_msg *msg);
/* n frames of line integrals rendered on r's projector into memory of its device (host memory on
 * the CPU backend, device memory on CUDA), returned as a DLPack capsule ("dltensor") that owns it. */
PyObject *xt_py_dlpack_render(xt_acq_renderer *r, xt_backend b, const xt_geometry *g, int n);
/* Module functions of xt_py_dlpack.c. */
PyObject *xt_py_dlpack_to_numpy(PyObject *self, PyObject *capsule);
PyObject *xt_py_dlpack_live(PyObject *self, PyObject *unused);
PyObject *xt_py_dlpack_info(PyObject *self, PyObject *capsule);

#endif /* XT_PY_H */
