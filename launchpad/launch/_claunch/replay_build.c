/* The Replay type's construction and lifetime (see replay.c; launchpad/sequences/creplay.py builds
 * the tuples). Every table is checked here: a use's target, its slot, that it lies inside its
 * target's block, and that the ring entries are the device targets' uses, each once and all in a
 * slot; so a replay never writes outside a block or a slot. */
#include "replay.h"

#include <stdarg.h>

/* What is read of each table, by name (lp_named; launchpad/launch/layouts.py): each list's order is
 * its parse format's. */
const char *const LP_REPLAY_USE_FIELDS[] = {"target", "offset", "size", "kind", "delta", "align", "multiple_of",
                                            "entry", NULL};  /* "IIIILLLi" */
const char *const LP_REPLAY_INPUT_FIELDS[] = {"name", "is_tensor", "dtype", "shape", "strides", "uses",
                                              "python_only", NULL};  /* "UpIO!O!Op" */
const char *const LP_REPLAY_OUTPUT_FIELDS[] = {"allocate", "uses", "refill", NULL};  /* "OOO" */
const char *const LP_DEVICE_TARGET_FIELDS[] = {"kind", "handle", "size", NULL};  /* "iKn" */
const char *const LP_KERNEL_TARGET_FIELDS[] = {"kind", "handle", "function", "grid", "block", "shared_mem", "context",
                                               "blob", "pointers", NULL};  /* "iKK(III)(III)IKYK" */
const char *const LP_COPY_TARGET_FIELDS[] = {"kind", "handle", "blob", "context", NULL};  /* "iKYK" */
const char *const LP_GRAPH_ENTRY_FIELDS[] = {"set_params", "graph_launch", "set_memcpy", "set_memset",
                                             "is_capturing", NULL};  /* "KKKKK" */
const char *const LP_RING_FIELDS[] = {"address", "slots", "capacity", NULL};  /* "KKK" */
const char *const LP_STAGED_FIELDS[] = {"address", "words", NULL};  /* "Kn" */
/* "O!O!O!KiOKKOOO!OOOOO!OnpO" */
const char *const LP_REPLAY_FIELDS[] = {"inputs", "targets", "outputs", "exec", "device", "entry_points",
                                        "ctx_get_device", "counters", "ring", "staged", "current", "fallback", "build",
                                        "lock", "keep", "tensor_types", "get_stream", "positional", "snapshot",
                                        "launch", NULL};

/* ``named``'s fields (``fields``) parsed with ``format`` into the pointers that follow; -1 with an exception. */
static int parse_named(PyObject *named, const char *const *fields, const char *layout, const char *format, ...) {
    PyObject *t = lp_named(named, fields, layout);
    if (t == NULL) return -1;
    va_list va;
    va_start(va, format);
    int ok = PyArg_VaParse(t, format, va);
    va_end(va);
    Py_DECREF(t);
    return ok ? 0 : -1;
}

static int parse_use(PyObject *t, Use *use, const Replay *self) {
    unsigned int target, offset, size, kind;
    long long delta, align, multiple_of;
    int entry;
    if (parse_named(t, LP_REPLAY_USE_FIELDS, "ReplayUse", "IIIILLLi", &target, &offset, &size, &kind, &delta, &align,
                    &multiple_of, &entry) < 0)
        return -1;
    if (target >= self->ntargets || size == 0 || size > 8 || kind > SK_UNTYPED ||
        (Py_ssize_t)offset + (Py_ssize_t)size > self->targets[target].size || entry < -1 ||
        (entry >= 0) != (self->targets[target].kind == T_DEVICE)) {
        PyErr_Format(PyExc_ValueError, "bad use (target %u, offset %u, size %u, kind %u, entry %d)", target, offset,
                     size, kind, entry);
        return -1;
    }
    *use = (Use){target, offset, (int32_t)entry, {0, size, (uint8_t)kind}, delta, align, multiple_of};
    return 0;
}

/* The uses of one input or output, from self->uses[*first] on (``at`` counts the uses parsed). */
static int parse_uses(PyObject *tuple, Py_ssize_t *first, Py_ssize_t *n, Py_ssize_t *at, Replay *self) {
    if (!PyTuple_Check(tuple) || *at + PyTuple_GET_SIZE(tuple) > self->nuses) {
        PyErr_SetString(PyExc_TypeError, "uses must be a tuple (of the uses counted)");
        return -1;
    }
    *first = *at;
    *n = PyTuple_GET_SIZE(tuple);
    for (Py_ssize_t u = 0; u < *n; u++) {
        if (parse_use(PyTuple_GET_ITEM(tuple, u), &self->uses[*at + u], self) < 0) return -1;
    }
    *at += *n;
    return 0;
}

/* How many uses the inputs' and outputs' tables hold (the ``uses`` of each). */
static Py_ssize_t count_uses(PyObject *table) {
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(table); i++) {
        PyObject *uses = PyObject_GetAttrString(PyTuple_GET_ITEM(table, i), "uses");
        if (uses == NULL || !PyTuple_Check(uses)) {
            Py_XDECREF(uses);
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError, "an input or output holds a tuple of uses");
            return -1;
        }
        n += PyTuple_GET_SIZE(uses);
        Py_DECREF(uses);
    }
    return n;
}

static int parse_input_fields(PyObject *t, Input *in, Py_ssize_t *at, Replay *self);

static int parse_input(PyObject *named, Input *in, Py_ssize_t *at, Replay *self) {
    PyObject *t = lp_named(named, LP_REPLAY_INPUT_FIELDS, "ReplayInput");
    if (t == NULL) return -1;
    int r = parse_input_fields(t, in, at, self);
    Py_DECREF(t);
    return r;
}

/* A ReplayInput's fields, as LP_REPLAY_INPUT_FIELDS orders them. */
static int parse_input_fields(PyObject *t, Input *in, Py_ssize_t *at, Replay *self) {
    PyObject *name, *shape, *strides, *uses;
    unsigned int dtype;
    if (!PyArg_ParseTuple(t, "UpIO!O!Op", &name, &in->is_tensor, &dtype, &PyTuple_Type, &shape, &PyTuple_Type,
                          &strides, &uses, &in->python_only))
        return -1;
    in->name = Py_NewRef(name);
    PyUnicode_InternInPlace(&in->name);
    in->dtype = dtype;
    in->ndim = (int)PyTuple_GET_SIZE(shape);
    if (in->ndim != PyTuple_GET_SIZE(strides) || in->ndim > 64) {
        PyErr_SetString(PyExc_ValueError, "shape and strides differ in rank");
        return -1;
    }
    in->shape = PyMem_Calloc(2 * (size_t)in->ndim + 1, sizeof(int64_t));
    if (in->shape == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    in->strides = in->shape + in->ndim;
    for (int d = 0; d < in->ndim; d++) {
        in->shape[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
        in->strides[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(strides, d));
    }
    if (PyErr_Occurred()) return -1;
    return parse_uses(uses, &in->first, &in->nuses, at, self);
}

static int parse_target(PyObject *t, Target *target) {
    unsigned long long handle, function, context, pointers;
    Py_ssize_t size;
    PyObject *blob;
    int kind;
    PyObject *kind_obj = PyObject_GetAttrString(t, "kind");
    kind = kind_obj != NULL ? (int)PyLong_AsLong(kind_obj) : -1;
    Py_XDECREF(kind_obj);
    if (kind < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a target's kind is not negative");
        return -1;
    }
    target->kind = kind;
    NodeParams *p = &target->params;
    if (kind == T_DEVICE) {
        if (parse_named(t, LP_DEVICE_TARGET_FIELDS, "DeviceTarget", "iKn", &kind, &handle, &size) < 0) return -1;
        target->size = size;
    } else if (kind == T_KERNEL) {
        if (parse_named(t, LP_KERNEL_TARGET_FIELDS, "KernelTarget", "iKK(III)(III)IKYK", &kind, &handle, &function,
                        &p->grid[0], &p->grid[1], &p->grid[2], &p->block[0], &p->block[1], &p->block[2],
                        &p->shared_mem, &context, &blob, &pointers) < 0)
            return -1;
        p->func = (CUfunction)(uintptr_t)function;
        p->ctx = (void *)(uintptr_t)context;
        p->kernel_params = (void **)(uintptr_t)pointers;
    } else if (kind == T_MEMCPY || kind == T_MEMSET) {
        if (parse_named(t, LP_COPY_TARGET_FIELDS, "CopyTarget", "iKYK", &kind, &handle, &blob, &context) < 0) return -1;
        target->ctx = (void *)(uintptr_t)context;
    } else {
        PyErr_Format(PyExc_ValueError, "unknown target kind %d", kind);
        return -1;
    }
    target->handle = (void *)(uintptr_t)handle;
    if (kind != T_DEVICE) {
        target->blob = PyByteArray_AS_STRING(blob);
        target->size = PyByteArray_GET_SIZE(blob);
    }
    return 0;
}

/* The ring entries: each device target's use has one, each entry one use, all within a slot. */
static int index_entries(Replay *self) {
    for (Py_ssize_t u = 0; u < self->nuses; u++) self->nentries += self->uses[u].entry >= 0;
    if (self->nentries && (self->ring == NULL || (uint64_t)self->nentries > self->capacity)) {
        PyErr_SetString(PyExc_ValueError, "the ring entries do not fit a ring slot");
        return -1;
    }
    self->entry_use = PyMem_Malloc(sizeof(uint32_t) * ((size_t)self->nentries + 1));
    if (self->entry_use == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < self->nentries; k++) self->entry_use[k] = UINT32_MAX;
    for (Py_ssize_t u = 0; u < self->nuses; u++) {
        int32_t entry = self->uses[u].entry;
        if (entry < 0) continue;
        if (entry >= self->nentries || self->entry_use[entry] != UINT32_MAX) {
            PyErr_Format(PyExc_ValueError, "ring entry %d is not one of 0 to %zd, once each", entry, self->nentries - 1);
            return -1;
        }
        self->entry_use[entry] = (uint32_t)u;
    }
    return 0;
}

static void Replay_free(Replay *self) {
    for (Py_ssize_t i = 0; self->inputs != NULL && i < self->ninputs; i++) {
        Py_CLEAR(self->inputs[i].name);
        PyMem_Free(self->inputs[i].shape);
    }
    for (Py_ssize_t s = 0; self->outputs != NULL && s < self->noutputs; s++) {
        Py_CLEAR(self->outputs[s].allocate);
        Py_CLEAR(self->outputs[s].refill);
        Py_CLEAR(self->outputs[s].batch);
    }
    PyMem_Free(self->inputs);
    PyMem_Free(self->outputs);
    PyMem_Free(self->targets);
    PyMem_Free(self->uses);
    PyMem_Free(self->entry_use);
    self->inputs = NULL;
    self->outputs = NULL;
    self->targets = NULL;
    self->uses = NULL;
    self->entry_use = NULL;
}

static PyObject *replay_new(PyTypeObject *type, PyObject *t);

/* Replay(tables): a ReplayTables (launchpad/launch/layouts.py, built by launchpad/sequences/creplay.py),
 * read by name. */
static PyObject *Replay_new(PyTypeObject *type, PyObject *a, PyObject *kw) {
    PyObject *tables;
    if ((kw != NULL && PyDict_GET_SIZE(kw)) || !PyArg_ParseTuple(a, "O:Replay", &tables)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "Replay takes one ReplayTables");
        return NULL;
    }
    PyObject *t = lp_named(tables, LP_REPLAY_FIELDS, "ReplayTables");
    if (t == NULL) return NULL;
    PyObject *self = replay_new(type, t);
    Py_DECREF(t);
    return self;
}

/* The ReplayTables' fields, as LP_REPLAY_FIELDS orders them. */
static PyObject *replay_new(PyTypeObject *type, PyObject *a) {
    PyObject *inputs, *targets, *outputs, *ring, *current, *fallback_fn, *build, *lock, *keep, *tensor_types,
        *get_stream, *launch, *entry_points, *staged_table;
    unsigned long long exec, set_params, graph_launch, set_memcpy, set_memset, is_capturing, ctx_get_device, state,
        staged;
    Py_ssize_t nstaged, positional;
    int device, snapshot;
    if (!PyArg_ParseTuple(a, "O!O!O!KiOKKOOO!OOOOO!OnpO", &PyTuple_Type, &inputs, &PyTuple_Type, &targets,
                          &PyTuple_Type, &outputs, &exec, &device, &entry_points, &ctx_get_device, &state, &ring,
                          &staged_table, &PyList_Type, &current, &fallback_fn, &build, &lock, &keep, &PyTuple_Type,
                          &tensor_types, &get_stream, &positional, &snapshot, &launch) ||
        parse_named(entry_points, LP_GRAPH_ENTRY_FIELDS, "GraphEntryPoints", "KKKKK", &set_params, &graph_launch,
                    &set_memcpy, &set_memset, &is_capturing) < 0 ||
        parse_named(staged_table, LP_STAGED_FIELDS, "Staged", "Kn", &staged, &nstaged) < 0)
        return NULL;
    if (!set_params || !graph_launch || !set_memcpy || !set_memset || !is_capturing || !state || !staged ||
        PyList_GET_SIZE(current) != PyTuple_GET_SIZE(inputs) || positional < 0 ||
        positional > PyTuple_GET_SIZE(inputs) || (launch != Py_None && !PyCallable_Check(launch))) {
        PyErr_SetString(PyExc_ValueError, "a Replay needs the driver's entry points, its state, the staged words, one "
                                          "current value per input and at most as many positional ones");
        return NULL;
    }
    Replay *self = (Replay *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->vectorcall = Replay_vectorcall;
    self->exec = (void *)(uintptr_t)exec;
    self->device = device;
    self->npositional = positional;
    self->snapshot = snapshot;
    self->set_params = (SetParamsFn)(uintptr_t)set_params;
    self->graph_launch = (GraphLaunchFn)(uintptr_t)graph_launch;
    self->set_memcpy = (SetCopyFn)(uintptr_t)set_memcpy;
    self->set_memset = (SetCopyFn)(uintptr_t)set_memset;
    self->is_capturing = (IsCapturingFn)(uintptr_t)is_capturing;
    self->ctx_get_device = (CtxGetDeviceFn)(uintptr_t)ctx_get_device;
    self->state = (uint64_t *)(uintptr_t)state;
    self->staged = (uint64_t *)(uintptr_t)staged;
    self->current = Py_NewRef(current);
    self->fallback = Py_NewRef(fallback_fn);
    self->build = build == Py_None ? NULL : Py_NewRef(build);
    self->launch = launch == Py_None ? NULL : Py_NewRef(launch);
    self->get_stream = get_stream == Py_None ? NULL : Py_NewRef(get_stream);
    self->lock = Py_NewRef(lock);
    self->keep = Py_NewRef(keep);
    self->tensor_types = Py_NewRef(tensor_types);
    self->api = PyTuple_GET_SIZE(tensor_types) ? lp_exchange_api(PyTuple_GET_ITEM(tensor_types, 0)) : NULL;
    if ((self->name = PyUnicode_FromString("a recorded sequence")) == NULL) goto fail;
    /* (looked up once: a replay calls them, not a lookup by name) */
    if ((self->acquire = PyObject_GetAttrString(lock, "acquire")) == NULL ||
        (self->release = PyObject_GetAttrString(lock, "release")) == NULL)
        goto fail;
    if (ring != Py_None) {
        unsigned long long address;
        if (parse_named(ring, LP_RING_FIELDS, "Ring", "KKK", &address, &self->slots, &self->capacity) < 0) goto fail;
        self->ring = (uint64_t *)(uintptr_t)address;
        if (self->ring == NULL || self->slots == 0) {
            PyErr_SetString(PyExc_ValueError, "a ring needs its memory and slots");
            goto fail;
        }
    }
    self->ntargets = PyTuple_GET_SIZE(targets);
    self->ninputs = PyTuple_GET_SIZE(inputs);
    self->noutputs = PyTuple_GET_SIZE(outputs);
    Py_ssize_t in_uses = count_uses(inputs), out_uses = in_uses < 0 ? -1 : count_uses(outputs);
    if (out_uses < 0) goto fail;
    self->nuses = in_uses + out_uses;
    if (nstaged != self->nuses || self->nuses > UINT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%zd staged words for %zd uses", nstaged, self->nuses);
        goto fail;
    }
    self->targets = PyMem_Calloc((size_t)self->ntargets + 1, sizeof(Target));
    self->inputs = PyMem_Calloc((size_t)self->ninputs + 1, sizeof(Input));
    self->outputs = PyMem_Calloc((size_t)self->noutputs + 1, sizeof(Output));
    self->uses = PyMem_Calloc((size_t)self->nuses + 1, sizeof(Use));
    if (self->targets == NULL || self->inputs == NULL || self->outputs == NULL || self->uses == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t t = 0; t < self->ntargets; t++) {
        if (parse_target(PyTuple_GET_ITEM(targets, t), &self->targets[t]) < 0) goto fail;
        if (self->targets[t].kind == T_DEVICE && self->ring == NULL) {
            PyErr_SetString(PyExc_ValueError, "a device target needs the ring");
            goto fail;
        }
    }
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; i < self->ninputs; i++) {
        if (parse_input(PyTuple_GET_ITEM(inputs, i), &self->inputs[i], &at, self) < 0) goto fail;
    }
    for (Py_ssize_t s = 0; s < self->noutputs; s++) {
        PyObject *allocate, *uses, *refill, *fields = lp_named(PyTuple_GET_ITEM(outputs, s), LP_REPLAY_OUTPUT_FIELDS,
                                                                "ReplayOutput");
        if (fields == NULL) goto fail;
        int ok = PyArg_ParseTuple(fields, "OOO", &allocate, &uses, &refill);
        if (ok) {
            self->outputs[s].allocate = Py_NewRef(allocate);
            self->outputs[s].refill = refill == Py_None ? NULL : Py_NewRef(refill);
            ok = parse_uses(uses, &self->outputs[s].first, &self->outputs[s].nuses, &at, self) == 0;
        }
        Py_DECREF(fields);
        if (!ok) goto fail;
    }
    if (index_entries(self) < 0) goto fail;
    self->block_size = lp_replay_block_size(self);
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

static int Replay_traverse(Replay *self, visitproc visit, void *arg) {
    Py_VISIT(self->current);
    Py_VISIT(self->fallback);
    Py_VISIT(self->build);
    Py_VISIT(self->launch);
    Py_VISIT(self->get_stream);
    Py_VISIT(self->lock);
    Py_VISIT(self->acquire);
    Py_VISIT(self->release);
    Py_VISIT(self->keep);
    Py_VISIT(self->tensor_types);
    for (Py_ssize_t s = 0; self->outputs != NULL && s < self->noutputs; s++) {
        Py_VISIT(self->outputs[s].allocate);
        Py_VISIT(self->outputs[s].refill);
        Py_VISIT(self->outputs[s].batch);
    }
    return 0;
}

static int Replay_clear(Replay *self) {
    Py_CLEAR(self->current);
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->build);
    Py_CLEAR(self->launch);
    Py_CLEAR(self->get_stream);
    Py_CLEAR(self->lock);
    Py_CLEAR(self->acquire);
    Py_CLEAR(self->release);
    Py_CLEAR(self->keep);
    Py_CLEAR(self->tensor_types);
    Py_CLEAR(self->name);
    Replay_free(self);
    return 0;
}

static void Replay_dealloc(Replay *self) {
    PyObject_GC_UnTrack(self);
    Replay_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Replay_get_fallbacks(Replay *self, void *closure) {
    (void)closure;
    return PyLong_FromUnsignedLongLong(self->fallbacks);
}

static PyGetSetDef Replay_getset[] = {
    {"fallbacks", (getter)Replay_get_fallbacks, NULL,
     "How many calls the Python replay made instead (refusals and values only it checks included).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject Replay_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "launchpad.launch._claunch.Replay",
    .tp_basicsize = sizeof(Replay),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A recorded sequence's replay with new inputs (see launchpad/sequences/pyreplay.py).",
    .tp_new = Replay_new,
    .tp_dealloc = (destructor)Replay_dealloc,
    .tp_traverse = (traverseproc)Replay_traverse,
    .tp_clear = (inquiry)Replay_clear,
    .tp_vectorcall_offset = offsetof(Replay, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_getset = Replay_getset,
};
