/* The Bound type: ``Kernel.bind(...)``'s launch, packed once and repeated with nothing to compute.
 *
 * Its buffer is written once at construction and never again, so threads calling one bound
 * launch share nothing mutable (the driver copies the arguments before it returns).
 */
#include "claunch.h"

#include <string.h>
#include <structmember.h>

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *entry;      /* keeps the module loaded while this launch exists */
    PyObject *relaunch;   /* relaunch(*args, **named): the checked launch, for new arguments or a failure */
    CUfunction function;
    LaunchFn launch;
    unsigned int grid[3], block[3], shared_mem;
    void *stream;
    char *buffer;
    void **params;
    Py_ssize_t nparams;
} Bound;

static PyObject *Bound_vectorcall(PyObject *o, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Bound *self = (Bound *)o;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (n || (kwnames && PyTuple_GET_SIZE(kwnames))) return PyObject_Vectorcall(self->relaunch, args, n, kwnames);
    CUresult err;
    LaunchFn launch = self->launch;
    Py_BEGIN_ALLOW_THREADS
    err = launch(self->function, self->grid[0], self->grid[1], self->grid[2], self->block[0], self->block[1],
                 self->block[2], self->shared_mem, (CUstream)self->stream, self->nparams ? self->params : NULL, NULL);
    Py_END_ALLOW_THREADS
    if (err == 0) Py_RETURN_NONE;
    return PyObject_CallNoArgs(self->relaunch);  /* the checked launch retries or raises the CudaError */
}

/* Bound(entry, grid, block, shared_mem, stream, packed, offsets, relaunch); the entry: the loader's Entry */
static PyObject *Bound_new(PyTypeObject *type, PyObject *a, PyObject *kw) {
    PyObject *entry, *offsets, *relaunch;
    unsigned int grid[3], block[3], shared_mem;
    unsigned long long stream;
    Py_buffer packed;
    if (kw != NULL && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "Bound takes positional arguments only");
        return NULL;
    }
    if (!PyArg_ParseTuple(a, "O(III)(III)IKy*O!O", &entry, &grid[0], &grid[1], &grid[2], &block[0],
                          &block[1], &block[2], &shared_mem, &stream, &packed, &PyTuple_Type, &offsets, &relaunch))
        return NULL;
    Bound *self = (Bound *)type->tp_alloc(type, 0);
    if (self == NULL) {
        PyBuffer_Release(&packed);
        return NULL;
    }
    self->vectorcall = Bound_vectorcall;
    self->entry = Py_NewRef(entry);
    self->relaunch = Py_NewRef(relaunch);
    memcpy(self->grid, grid, sizeof grid);
    memcpy(self->block, block, sizeof block);
    self->shared_mem = shared_mem;
    self->stream = (void *)(uintptr_t)stream;
    self->nparams = PyTuple_GET_SIZE(offsets);
    self->buffer = PyMem_Calloc(packed.len ? packed.len : 1, 1);
    self->params = PyMem_Calloc(self->nparams ? self->nparams : 1, sizeof(void *));
    if (self->buffer == NULL || self->params == NULL) {
        PyBuffer_Release(&packed);
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    memcpy(self->buffer, packed.buf, packed.len);
    for (Py_ssize_t i = 0; i < self->nparams; i++) {
        long off = PyLong_AsLong(PyTuple_GET_ITEM(offsets, i));
        if (off < 0 || off >= packed.len) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a parameter offset is outside the packed launch");
            PyBuffer_Release(&packed);
            Py_DECREF(self);
            return NULL;
        }
        self->params[i] = self->buffer + off;
    }
    PyBuffer_Release(&packed);
    PyObject *fields = lp_named(entry, LP_ENTRY_FIELDS, "Entry");  /* the loader's Entry, by name */
    if (fields == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    self->function = (CUfunction)PyLong_AsVoidPtr(PyTuple_GET_ITEM(fields, EN_ADDRESS));
    self->launch = (LaunchFn)PyLong_AsVoidPtr(PyTuple_GET_ITEM(fields, EN_LAUNCH));
    Py_DECREF(fields);
    if (PyErr_Occurred() || self->launch == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a launch entry without cuLaunchKernel");
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int Bound_traverse(Bound *self, visitproc visit, void *arg) {
    Py_VISIT(self->entry);
    Py_VISIT(self->relaunch);
    return 0;
}

static int Bound_clear(Bound *self) {
    Py_CLEAR(self->entry);
    Py_CLEAR(self->relaunch);
    return 0;
}

static void Bound_dealloc(Bound *self) {
    PyObject_GC_UnTrack(self);
    Bound_clear(self);
    PyMem_Free(self->buffer);
    PyMem_Free(self->params);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef Bound_members[] = {
    {"relaunch", T_OBJECT, offsetof(Bound, relaunch), READONLY, "The checked launch with new arguments."},
    {"entry", T_OBJECT, offsetof(Bound, entry), READONLY, "The device entry it launches (holds the module)."},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject Bound_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "launchpad.launch._claunch.Bound",
    .tp_basicsize = sizeof(Bound),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Kernel.bind(...): one packed launch; bound() repeats it, bound(*args) relaunches with new ones.",
    .tp_new = Bound_new,
    .tp_vectorcall_offset = offsetof(Bound, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = (traverseproc)Bound_traverse,
    .tp_clear = (inquiry)Bound_clear,
    .tp_dealloc = (destructor)Bound_dealloc,
    .tp_members = Bound_members,
};
