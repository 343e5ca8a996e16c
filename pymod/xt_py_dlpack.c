/* DLPack export of a batch of frames (issue 30, point 2): the frames are rendered into memory of
 * the scene's device (cudaMalloc on the CUDA backend, host memory on the CPU) and handed over as a
 * "dltensor" capsule that owns that memory, so a consumer (torch.utils.dlpack.from_dlpack, CuPy,
 * numpy's from_dlpack through xtwin.inproc's wrapper) takes them without a copy.
 *
 * The ABI is DLPack's unversioned one (dlpack.h v0.8, what PyTorch 1.13 reads): the structs are
 * declared here as the standard states them (no Debian package ships the header). Lifetime: the
 * consumer renames the capsule "used_dltensor" and calls the deleter when its tensor dies; a
 * capsule never consumed frees the memory in its own destructor. dlpack_live() counts exports not
 * yet freed (the tests' check of the lifetime). dlpack_to_numpy is a small consumer of our own for
 * the GPU test, which has no CUDA PyTorch. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define NO_IMPORT_ARRAY
#define PY_ARRAY_UNIQUE_SYMBOL xt_py_ARRAY_API
#include <numpy/arrayobject.h>

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "xt_py.h"

#ifdef XT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* ---- DLPack v0.8 (unversioned) ---- */
typedef enum { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3 } DLDeviceType;
typedef enum { kDLInt = 0, kDLUInt = 1, kDLFloat = 2 } DLDataTypeCode;
typedef struct {
  int32_t device_type;
  int32_t device_id;
} DLDevice;
typedef struct {
  uint8_t code, bits;
  uint16_t lanes;
} DLDataType;
typedef struct {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides; /* in elements; NULL = compact row-major */
  uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

_Static_assert(sizeof(DLDevice) == 8, "DLDevice is 8 bytes");
_Static_assert(sizeof(DLDataType) == 4, "DLDataType is 4 bytes");
_Static_assert(offsetof(DLTensor, device) == 8, "DLTensor.device at 8");
_Static_assert(offsetof(DLTensor, ndim) == 16, "DLTensor.ndim at 16");
_Static_assert(offsetof(DLTensor, dtype) == 20, "DLTensor.dtype at 20");
_Static_assert(offsetof(DLTensor, shape) == 24, "DLTensor.shape at 24");
_Static_assert(offsetof(DLTensor, strides) == 32, "DLTensor.strides at 32");
_Static_assert(offsetof(DLTensor, byte_offset) == 40, "DLTensor.byte_offset at 40");
_Static_assert(sizeof(DLTensor) == 48, "DLTensor is 48 bytes");
_Static_assert(offsetof(DLManagedTensor, manager_ctx) == 48, "manager_ctx at 48");

/* One export: the managed tensor, its shape and strides, and the memory it owns. */
typedef struct export_t {
  DLManagedTensor mt;
  int64_t shape[3], strides[3];
  int cuda; /* the memory is cudaMalloc'd */
  void *mem;
} export_t;

static atomic_long live;

static void export_free(DLManagedTensor *t) {
  export_t *e = t->manager_ctx;
#ifdef XT_HAVE_CUDA
  if (e->cuda) cudaFree(e->mem);
  else
#endif
    free(e->mem);
  free(e);
  atomic_fetch_sub(&live, 1);
}

/* A capsule never consumed still owns its tensor. */
static void capsule_destructor(PyObject *cap) {
  if (!PyCapsule_IsValid(cap, "dltensor")) return; /* consumed: the consumer calls the deleter */
  DLManagedTensor *t = PyCapsule_GetPointer(cap, "dltensor");
  if (t && t->deleter) t->deleter(t);
}

PyObject *xt_py_dlpack_render(xt_acq_renderer *r, xt_backend b, const xt_geometry *g, int n) {
  const int rows = g[0].mode.rows, cols = g[0].mode.cols;
  for (int i = 1; i < n; i++)
    if (g[i].mode.rows != rows || g[i].mode.cols != cols) return xt_py_raise(XT_EINVAL, "dlpack: one detector size per batch");
  const size_t frame = (size_t)rows * cols, bytes = frame * (size_t)n * sizeof(float);
  export_t *e = calloc(1, sizeof *e);
  if (!e) return PyErr_NoMemory();
  xt_msg msg = {{0}};
  int rc = 0;
  int device = 0;
  Py_BEGIN_ALLOW_THREADS;
  if (b == XT_BACKEND_CUDA) {
#ifdef XT_HAVE_CUDA
    /* Device memory made once per batch (the consumer owns it after), the frames rendered into it
     * by the batch kernel, many poses per launch, without a trip through the host. */
    e->cuda = 1;
    cudaError_t ce = cudaGetDevice(&device);
    if (ce == cudaSuccess) ce = cudaMalloc(&e->mem, bytes);
    if (ce != cudaSuccess) {
      e->mem = NULL;
      rc = xt_fail(&msg, XT_EDEVICE, "dlpack: cudaMalloc of %zu bytes: %s", bytes, cudaGetErrorString(ce));
    }
    if (!rc) rc = xt_proj_render_batch_device(r->proj, g, n, e->mem, &msg);
#else
    rc = xt_fail(&msg, XT_ENODEV, "dlpack: this build has no CUDA backend");
#endif
  } else {
    xt_acq_request *q = calloc((size_t)n, sizeof *q);
    xt_acq_frame *f = malloc(sizeof *f * (size_t)n);
    e->mem = malloc(bytes ? bytes : 1);
    if (!q || !f || !e->mem) rc = xt_fail(&msg, XT_ENOMEM, "dlpack: out of memory");
    for (int i = 0; i < n && !rc; i++) {
      q[i].geom = &g[i];
      q[i].want = XT_ACQ_WANT_LINEINT;
      q[i].counter = (uint64_t)i;
    }
    if (!rc) rc = xt_acq_expose_batch(r, q, n, e->mem, f, &msg);
    free(q);
    free(f);
  }
  Py_END_ALLOW_THREADS;
  atomic_fetch_add(&live, 1);
  e->mt.manager_ctx = e;
  e->mt.deleter = export_free;
  if (rc) {
    export_free(&e->mt);
    return xt_py_raise(rc, msg.text);
  }
  e->shape[0] = n, e->shape[1] = rows, e->shape[2] = cols;
  e->strides[0] = (int64_t)frame, e->strides[1] = cols, e->strides[2] = 1;
  DLTensor *t = &e->mt.dl_tensor;
  t->data = e->mem;
  t->device.device_type = e->cuda ? kDLCUDA : kDLCPU;
  t->device.device_id = e->cuda ? device : 0;
  t->ndim = 3;
  t->dtype.code = kDLFloat, t->dtype.bits = 32, t->dtype.lanes = 1;
  t->shape = e->shape;
  t->strides = e->strides;
  t->byte_offset = 0;
  PyObject *cap = PyCapsule_New(&e->mt, "dltensor", capsule_destructor);
  if (!cap) export_free(&e->mt);
  return cap;
}

PyObject *xt_py_dlpack_live(PyObject *self, PyObject *unused) { return PyLong_FromLong(atomic_load(&live)); }

static DLManagedTensor *capsule_tensor(PyObject *cap) {
  if (!PyCapsule_IsValid(cap, "dltensor")) {
    PyErr_SetString(PyExc_ValueError, "dlpack: not an unconsumed 'dltensor' capsule");
    return NULL;
  }
  return PyCapsule_GetPointer(cap, "dltensor");
}

PyObject *xt_py_dlpack_info(PyObject *self, PyObject *cap) {
  DLManagedTensor *m = capsule_tensor(cap);
  if (!m) return NULL;
  const DLTensor *t = &m->dl_tensor;
  PyObject *shape = PyTuple_New(t->ndim), *strides = t->strides ? PyTuple_New(t->ndim) : Py_None;
  if (!shape || !strides) return NULL;
  if (strides == Py_None) Py_INCREF(Py_None);
  for (int i = 0; i < t->ndim; i++) {
    PyTuple_SET_ITEM(shape, i, PyLong_FromLongLong(t->shape[i]));
    if (t->strides) PyTuple_SET_ITEM(strides, i, PyLong_FromLongLong(t->strides[i]));
  }
  return Py_BuildValue("{sisisNsNs(iii)sKsK}", "device_type", t->device.device_type, "device_id", t->device.device_id,
                       "shape", shape, "strides", strides, "dtype", t->dtype.code, t->dtype.bits, t->dtype.lanes,
                       "byte_offset", (unsigned long long)t->byte_offset, "data", (unsigned long long)(uintptr_t)t->data);
}

/* Our own consumer: a compact float32 tensor (host or CUDA) copied into a new numpy array; the
 * capsule is marked used and its deleter called, as a consumer must. */
PyObject *xt_py_dlpack_to_numpy(PyObject *self, PyObject *cap) {
  DLManagedTensor *m = capsule_tensor(cap);
  if (!m) return NULL;
  const DLTensor *t = &m->dl_tensor;
  if (t->dtype.code != kDLFloat || t->dtype.bits != 32 || t->dtype.lanes != 1 || t->ndim < 1 || t->ndim > 8)
    return PyErr_Format(PyExc_ValueError, "dlpack: only float32 tensors of 1 to 8 dimensions");
  npy_intp dims[8];
  int64_t expect = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    dims[i] = (npy_intp)t->shape[i];
    if (t->strides && t->shape[i] > 1 && t->strides[i] != expect)
      return PyErr_Format(PyExc_ValueError, "dlpack: only compact row-major tensors");
    expect *= t->shape[i];
  }
  PyArrayObject *a = (PyArrayObject *)PyArray_SimpleNew(t->ndim, dims, NPY_FLOAT32);
  if (!a) return NULL;
  const size_t bytes = (size_t)expect * sizeof(float);
  const char *src = (const char *)t->data + t->byte_offset;
  if (t->device.device_type == kDLCPU || t->device.device_type == kDLCUDAHost) {
    memcpy(PyArray_DATA(a), src, bytes);
  } else if (t->device.device_type == kDLCUDA) {
#ifdef XT_HAVE_CUDA
    cudaError_t ce = cudaMemcpy(PyArray_DATA(a), src, bytes, cudaMemcpyDeviceToHost);
    if (ce != cudaSuccess) {
      Py_DECREF(a);
      return PyErr_Format(PyExc_RuntimeError, "dlpack: cudaMemcpy: %s", cudaGetErrorString(ce));
    }
#else
    Py_DECREF(a);
    return PyErr_Format(PyExc_RuntimeError, "dlpack: a CUDA tensor in a build without CUDA");
#endif
  } else {
    Py_DECREF(a);
    return PyErr_Format(PyExc_ValueError, "dlpack: device type %d not supported", (int)t->device.device_type);
  }
  if (PyCapsule_SetName(cap, "used_dltensor")) {
    Py_DECREF(a);
    return NULL;
  }
  if (m->deleter) m->deleter(m);
  return (PyObject *)a;
}
