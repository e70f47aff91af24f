/* ``kernel[grid, block]``: a launch with its configuration fixed (the Configured type), made by
 * ``Launcher.configure``; called with the kernel's arguments, it launches through lp_launch, or
 * hands calls with keywords to the Python executor with its configuration added. */
#include "claunch.h"

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Launcher *launcher;
    PyObject *grid, *block, *stream, *shared_mem;  /* stream and shared_mem may be NULL */
} Configured;

static PyObject *Configured_vectorcall(PyObject *o, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Configured *self = (Configured *)o;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (kwnames == NULL || PyTuple_GET_SIZE(kwnames) == 0)
        return lp_launch(self->launcher, self->grid, self->block, args, n, self->stream, self->shared_mem);
    /* keywords: the Python executor, with the configuration's options added (a fallback, counted) */
    PyObject *kw = PyDict_New();
    PyObject *pos = PyTuple_New(n + 2);
    PyObject *r = NULL;
    if (kw == NULL || pos == NULL) goto out;
    PyTuple_SET_ITEM(pos, 0, Py_NewRef(self->grid));
    PyTuple_SET_ITEM(pos, 1, Py_NewRef(self->block));
    for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(pos, i + 2, Py_NewRef(args[i]));
    if ((self->stream && PyDict_SetItem(kw, lp_str_stream, self->stream) < 0) ||
        (self->shared_mem && PyDict_SetItem(kw, lp_str_shared_mem, self->shared_mem) < 0))
        goto out;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++)
        if (PyDict_SetItem(kw, PyTuple_GET_ITEM(kwnames, i), args[n + i]) < 0) goto out;
    self->launcher->fallbacks++;
    r = lp_fell_back(PyObject_Call(self->launcher->python_launch, pos, kw), self->launcher->name);
out:
    Py_XDECREF(kw);
    Py_XDECREF(pos);
    return r;
}

static int Configured_traverse(Configured *self, visitproc visit, void *arg) {
    Py_VISIT(self->launcher);
    Py_VISIT(self->grid);
    Py_VISIT(self->block);
    Py_VISIT(self->stream);
    Py_VISIT(self->shared_mem);
    return 0;
}

static int Configured_clear(Configured *self) {
    Py_CLEAR(self->launcher);
    Py_CLEAR(self->grid);
    Py_CLEAR(self->block);
    Py_CLEAR(self->stream);
    Py_CLEAR(self->shared_mem);
    return 0;
}

static void Configured_dealloc(Configured *self) {
    PyObject_GC_UnTrack(self);
    Configured_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Configured_repr(Configured *self) {
    return PyUnicode_FromFormat("<launchpad launch with grid %R, block %R>", self->grid, self->block);
}

PyTypeObject Configured_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "launchpad.launch._claunch.Configured",
    .tp_basicsize = sizeof(Configured),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "kernel[grid, block]: a launch whose configuration is fixed; call it with the kernel's arguments.",
    .tp_vectorcall_offset = offsetof(Configured, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = (traverseproc)Configured_traverse,
    .tp_clear = (inquiry)Configured_clear,
    .tp_dealloc = (destructor)Configured_dealloc,
    .tp_repr = (reprfunc)Configured_repr,
};

PyObject *lp_configure(Launcher *self, PyObject *args) {
    PyObject *grid, *block, *stream, *shared_mem;
    if (!PyArg_ParseTuple(args, "OOOO", &grid, &block, &stream, &shared_mem)) return NULL;
    Configured *c = PyObject_GC_New(Configured, &Configured_Type);
    if (c == NULL) return NULL;
    c->vectorcall = Configured_vectorcall;
    c->launcher = (Launcher *)Py_NewRef(self);
    c->grid = Py_NewRef(grid);
    c->block = Py_NewRef(block);
    c->stream = stream == Py_None ? NULL : Py_NewRef(stream);
    c->shared_mem = shared_mem == Py_None ? NULL : Py_NewRef(shared_mem);
    PyObject_GC_Track(c);
    return (PyObject *)c;
}

