/* How a Launcher is built: the plan the Python side computed (launchpad/launch/executor.py: a
 * LauncherTable of launchpad/launch/layouts.py, with the ops, one per argument, the parameter offsets,
 * the launch plan) read by name and parsed once into C structs, and the Launcher's lifetime (GC
 * traversal, clearing, deallocation). The launch itself: launcher.c.
 */
#include "claunch.h"

#include <string.h>

/* What is read of each layout, by name (lp_named); each list's order is its parse format's. */
const char *const LP_SLOT_FIELDS[] = {"offset", "size", "kind", NULL};  /* "III" */
/* "iiOOILLLisiOO" */
const char *const LP_OP_FIELDS[] = {"kind", "position", "sub", "slots", "dtype", "align", "multiple_of", "size",
                                    "ndim", "layout", "flags", "obj", "arg", NULL};
const char *const LP_HOOK_FIELDS[] = {"dict", "names", "calls", NULL};  /* "O!O!O!" */
/* launchpad.core.spec.LaunchPlan's, "OiOOppppl" */
const char *const LP_PLAN_FIELDS[] = {"block", "shared_mem", "grid_scale", "cluster", "cluster_spread",
                                      "cooperative", "pdl", "oversized_shared", "max_grid", NULL};
/* "O!O!nnnOO!OOOOOOOOOO!" */
const char *const LP_LAUNCHER_FIELDS[] = {"ops", "offsets", "buffer_size", "nargs_min", "nargs_max", "plan",
                                          "entries", "entry_fn", "new_entry", "python_launch", "get_device", "get_stream",
                                          "scratch", "same_value", "coresident", "ctx", "hooks", "tensor_types",
                                          NULL};

static int parse_slots(PyObject *seq, Op *op) {
    if (!PyTuple_Check(seq)) {
        PyErr_SetString(PyExc_TypeError, "slots must be a tuple");
        return -1;
    }
    op->nslots = PyTuple_GET_SIZE(seq);
    op->slots = PyMem_Calloc(op->nslots ? op->nslots : 1, sizeof(Slot));
    if (op->slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < op->nslots; i++) {
        unsigned int offset, size, kind;
        PyObject *t = lp_named(PyTuple_GET_ITEM(seq, i), LP_SLOT_FIELDS, "Slot");
        int ok = t != NULL && PyArg_ParseTuple(t, "III", &offset, &size, &kind);
        Py_XDECREF(t);
        if (!ok) return -1;
        /* a size of 0: a value OP_TILE_ARRAY checks but does not pass (a CuTe DSL tensor's static mode) */
        if (kind > SK_UNTYPED || (size == 0 && op->kind != OP_TILE_ARRAY) || size > LP_MAX_PARAM_BYTES) {
            PyErr_Format(PyExc_ValueError, "bad slot (%u, %u, %u)", offset, size, kind);
            return -1;
        }
        op->slots[i] = (Slot){offset, size, (uint8_t)kind};
    }
    return 0;
}

/* OP_TILE_ARRAY's promises: a tuple of 5 ints per dimension (see Op.dims). */
static int parse_tile_dims(PyObject *obj, Op *op) {
    Py_ssize_t n = 5 * (Py_ssize_t)op->ndim;
    if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != n) {
        PyErr_SetString(PyExc_ValueError, "a cuTile array operation needs 5 promise words per dimension");
        return -1;
    }
    op->dims = PyMem_Calloc(n ? n : 1, sizeof(int64_t));
    if (op->dims == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(obj, i));
        if (v == -1 && PyErr_Occurred()) return -1;
        int divisor = i % 5 == 0 || i % 5 == 2;
        if (divisor && v < 1) {
            PyErr_SetString(PyExc_ValueError, "a cuTile array divisor must be positive");
            return -1;
        }
        op->dims[i] = v;
    }
    return 0;
}

/* OP_WARP_ARRAY's element type: a tuple of its 0-2 extents (a vector's length, a matrix's rows and
 * columns), kept in dims with their count in flags. */
static int parse_warp_element(PyObject *obj, Op *op) {
    Py_ssize_t n = PyTuple_Check(obj) ? PyTuple_GET_SIZE(obj) : -1;
    if (n < 0 || n > 2 || op->ndim < 1 || op->ndim > 4 || op->size < 1) {
        PyErr_SetString(PyExc_ValueError, "a Warp array operation needs a rank of 1-4 and 0-2 element extents");
        return -1;
    }
    op->dims = PyMem_Calloc(n ? n : 1, sizeof(int64_t));
    if (op->dims == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(obj, i));
        if (v == -1 && PyErr_Occurred()) return -1;
        if (v < 1) {
            PyErr_SetString(PyExc_ValueError, "a Warp element extent must be positive");
            return -1;
        }
        op->dims[i] = v;
    }
    op->flags = (int)n;
    return 0;
}

/* An Op's fields, as LP_OP_FIELDS orders them (the tuple lp_named made). */
static int parse_op_fields(PyObject *t, Op *op) {
    int kind, position, ndim, flags;
    unsigned int dtype;
    long long align, multiple_of, size;
    PyObject *sub, *slots, *obj, *arg;
    const char *layout;
    if (!PyArg_ParseTuple(t, "iiOOILLLisiOO", &kind, &position, &sub, &slots, &dtype, &align, &multiple_of, &size,
                          &ndim, &layout, &flags, &obj, &arg))
        return -1;
    if (kind < OP_VALUE || kind > OP_WARP_ARRAY || position < 0 || position > 65535 || !PyTuple_Check(sub) ||
        PyTuple_GET_SIZE(sub) > LP_MAX_DEPTH || ndim < 0 || ndim > 32) {
        PyErr_SetString(PyExc_ValueError, "bad launch plan operation");
        return -1;
    }
    op->kind = (uint8_t)kind;
    op->position = (uint16_t)position;
    op->depth = (uint8_t)PyTuple_GET_SIZE(sub);
    for (int i = 0; i < op->depth; i++) {
        long k = PyLong_AsLong(PyTuple_GET_ITEM(sub, i));
        if (k < 0 || k > 65535) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bad tuple index in a launch plan");
            return -1;
        }
        op->sub[i] = (uint16_t)k;
    }
    op->dtype = dtype;
    op->align = align;
    op->multiple_of = multiple_of;
    op->size = size;
    op->ndim = ndim;
    op->layout = layout[0];
    op->flags = flags;
    op->obj = Py_NewRef(obj);
    op->arg = Py_NewRef(arg);
    if (parse_slots(slots, op) < 0) return -1;
    if (kind == OP_TILE_ARRAY && parse_tile_dims(obj, op) < 0) return -1;
    if (kind == OP_WARP_ARRAY && parse_warp_element(obj, op) < 0) return -1;
    Py_ssize_t needed = kind == OP_VALUE || kind == OP_SCRATCH || kind == OP_WARP_ARRAY ? 1
                        : kind == OP_NUMBA_ARRAY               ? 5 + 2 * ndim
                        : kind == OP_TILE_ARRAY                ? 1 + 2 * ndim
                                                               : -1;
    if (kind != OP_CONST && needed >= 0 && op->nslots != needed) {
        PyErr_SetString(PyExc_ValueError, "a launch plan operation has the wrong number of slots");
        return -1;
    }
    return 0;
}

static int parse_op(PyObject *named, Op *op) {
    PyObject *t = lp_named(named, LP_OP_FIELDS, "Op");
    if (t == NULL) return -1;
    int r = parse_op_fields(t, op);
    Py_DECREF(t);
    return r;
}

static int parse_dims(PyObject *obj, int out[3], const char *what) {
    out[0] = out[1] = out[2] = 0;
    if (obj == Py_None) return 0;
    if (!PyArg_ParseTuple(obj, "iii", &out[0], &out[1], &out[2])) return -1;
    if (out[0] < 1 || out[1] < 1 || out[2] < 1) {
        PyErr_Format(PyExc_ValueError, "bad %s in a launch plan", what);
        return -1;
    }
    return 0;
}

static void Launcher_clear_ops(Launcher *self) {
    for (Py_ssize_t i = 0; i < self->nops; i++) {
        PyMem_Free(self->ops[i].slots);
        PyMem_Free(self->ops[i].dims);
        Py_CLEAR(self->ops[i].obj);
        Py_CLEAR(self->ops[i].arg);
    }
    PyMem_Free(self->ops);
    self->ops = NULL;
    self->nops = 0;
}


static PyObject *launcher_new(PyTypeObject *type, PyObject *t);

/* Launcher(table): a LauncherTable (launchpad/launch/layouts.py), read by name. */
PyObject *lp_launcher_new(PyTypeObject *type, PyObject *a, PyObject *kw) {
    PyObject *table;
    if ((kw != NULL && PyDict_GET_SIZE(kw)) || !PyArg_ParseTuple(a, "O:Launcher", &table)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "Launcher takes one LauncherTable");
        return NULL;
    }
    PyObject *t = lp_named(table, LP_LAUNCHER_FIELDS, "LauncherTable");
    if (t == NULL) return NULL;
    PyObject *self = launcher_new(type, t);
    Py_DECREF(t);
    return self;
}

/* The LauncherTable's fields, as LP_LAUNCHER_FIELDS orders them. */
static PyObject *launcher_new(PyTypeObject *type, PyObject *t) {
    PyObject *ops, *offsets, *plan_obj, *entries, *entry_fn, *new_entry, *python_launch, *get_device, *get_stream, *scratch_fn;
    PyObject *same_value, *coresident, *ctx, *hooks, *tensor_types, *plan = NULL, *hook_fields = NULL;
    Py_ssize_t buffer_size, nargs_min, nargs_max;
    if (!PyArg_ParseTuple(t, "O!O!nnnOO!OOOOOOOOOOO!", &PyTuple_Type, &ops, &PyTuple_Type, &offsets, &buffer_size,
                          &nargs_min, &nargs_max, &plan_obj, &PyDict_Type, &entries, &entry_fn, &new_entry, &python_launch,
                          &get_device, &get_stream, &scratch_fn, &same_value, &coresident, &ctx, &hooks,
                          &PyTuple_Type, &tensor_types))
        return NULL;
    Launcher *self = (Launcher *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->vectorcall = lp_launcher_vectorcall;
    self->entries = Py_NewRef(entries);
    /* the launcher keeps the entry it last read (launcher.c): the table (the loader's EntryTable)
     * must call its forget() on every change, so one without add_reader is refused */
    PyObject *added = PyObject_CallMethod(entries, "add_reader", "O", (PyObject *)self);
    if (added == NULL) goto fail;
    Py_DECREF(added);
    self->entry_fn = Py_NewRef(entry_fn);
    self->new_entry = Py_NewRef(new_entry);
    self->python_launch = Py_NewRef(python_launch);
    self->get_device = Py_NewRef(get_device);
    self->get_stream = get_stream == Py_None ? NULL : Py_NewRef(get_stream);
    self->scratch_fn = Py_NewRef(scratch_fn);
    self->same_value = Py_NewRef(same_value);
    self->coresident = Py_NewRef(coresident);
    self->ctx = Py_NewRef(ctx);
    PyObject *kernel_name = PyObject_GetAttrString(ctx, "kernel_name");
    self->name = kernel_name != NULL ? PyUnicode_FromFormat("kernel %R", kernel_name) : NULL;
    Py_XDECREF(kernel_name);
    if (self->name == NULL) goto fail;
    if (hooks != Py_None) {
        PyObject *dict, *hook_names, *hook_calls;
        if ((hook_fields = lp_named(hooks, LP_HOOK_FIELDS, "HookCheck")) == NULL) goto fail;
        if (!PyArg_ParseTuple(hook_fields, "O!O!O!", &PyDict_Type, &dict, &PyTuple_Type, &hook_names, &PyTuple_Type,
                              &hook_calls) ||
            PyTuple_GET_SIZE(hook_names) != PyTuple_GET_SIZE(hook_calls))
            goto fail_hooks;
        self->hooks_dict = Py_NewRef(dict);
        self->hook_names = Py_NewRef(hook_names);
        self->hook_calls = Py_NewRef(hook_calls);
    }
    self->tensor_types = Py_NewRef(tensor_types);
    self->api = PyTuple_GET_SIZE(tensor_types) ? lp_exchange_api(PyTuple_GET_ITEM(tensor_types, 0)) : NULL;
    if (self->api == NULL && self->get_stream == NULL) {
        PyErr_SetString(PyExc_ValueError, "a Launcher without the DLPack exchange API needs get_stream");
        goto fail;
    }
    self->buffer_size = buffer_size;
    self->nargs_min = nargs_min;
    self->nargs_max = nargs_max;
    if (buffer_size < 0 || buffer_size > LP_MAX_PARAM_BYTES || nargs_min < 0 || nargs_max < nargs_min) {
        PyErr_SetString(PyExc_ValueError, "bad launch plan sizes");
        goto fail;
    }
    self->nparams = PyTuple_GET_SIZE(offsets);
    self->offsets = PyMem_Calloc(self->nparams ? self->nparams : 1, sizeof(uint32_t));
    if (self->offsets == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < self->nparams; i++) {
        long v = PyLong_AsLong(PyTuple_GET_ITEM(offsets, i));
        if (v < 0 || v >= buffer_size) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a parameter offset is outside the buffer");
            goto fail;
        }
        self->offsets[i] = (uint32_t)v;
    }
    PyObject *block, *scale, *cluster;
    long max_grid = 0;  /* the plan's limit per grid dimension; 0 (or left out): the device's alone */
    if ((plan = lp_named(plan_obj, LP_PLAN_FIELDS, "LaunchPlan")) == NULL ||
        !PyArg_ParseTuple(plan, "OiOOppppl", &block, &self->shared_default, &scale, &cluster, &self->spread,
                          &self->cooperative, &self->pdl, &self->oversized, &max_grid) ||
        parse_dims(block, self->fixed_block, "block") < 0 || parse_dims(scale, self->scale, "grid scale") < 0 ||
        parse_dims(cluster, self->cluster, "cluster") < 0)
        goto fail;
    if (self->scale[0] == 0) self->scale[0] = self->scale[1] = self->scale[2] = 1;
    self->scaled = self->scale[0] != 1 || self->scale[1] != 1 || self->scale[2] != 1;
    if (max_grid < 0) {
        PyErr_SetString(PyExc_ValueError, "bad max_grid in a launch plan");
        goto fail;
    }
    for (int i = 0; i < 3; i++) {
        unsigned int device = i ? LP_MAX_GRID_YZ : LP_MAX_GRID_X;
        self->max_grid[i] = max_grid && (unsigned long)max_grid < device ? (unsigned int)max_grid : device;
    }
    self->nops = 0;
    self->ops = PyMem_Calloc(PyTuple_GET_SIZE(ops) ? PyTuple_GET_SIZE(ops) : 1, sizeof(Op));
    if (self->ops == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(ops); i++) {
        self->nops = i + 1;
        if (parse_op(PyTuple_GET_ITEM(ops, i), &self->ops[i]) < 0) goto fail;
        for (Py_ssize_t k = 0; k < self->ops[i].nslots; k++) {
            const Slot *s = &self->ops[i].slots[k];
            if ((Py_ssize_t)s->offset + s->size > buffer_size) {
                PyErr_SetString(PyExc_ValueError, "a slot lies outside the parameter buffer");
                goto fail;
            }
        }
    }
    Py_DECREF(plan);
    Py_XDECREF(hook_fields);
    return (PyObject *)self;
fail_hooks:
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "hooks must be (dict, names, calls lists)");
fail:
    Py_XDECREF(plan);
    Py_XDECREF(hook_fields);
    Py_DECREF(self);
    return NULL;
}

int lp_launcher_traverse(Launcher *self, visitproc visit, void *arg) {
    Py_VISIT(self->entries);
    Py_VISIT(self->entry_fn);
    Py_VISIT(self->new_entry);
    Py_VISIT(self->python_launch);
    Py_VISIT(self->get_device);
    Py_VISIT(self->get_stream);
    Py_VISIT(self->scratch_fn);
    Py_VISIT(self->same_value);
    Py_VISIT(self->coresident);
    Py_VISIT(self->ctx);
    Py_VISIT(self->hooks_dict);
    Py_VISIT(self->hook_names);
    Py_VISIT(self->hook_calls);
    Py_VISIT(self->tensor_types);
    Py_VISIT(self->entry);
    for (Py_ssize_t i = 0; i < self->nops; i++) {
        Py_VISIT(self->ops[i].obj);
        Py_VISIT(self->ops[i].arg);
    }
    return 0;
}

int lp_launcher_clear(Launcher *self) {
    Py_CLEAR(self->entries);
    Py_CLEAR(self->entry_fn);
    Py_CLEAR(self->new_entry);
    Py_CLEAR(self->python_launch);
    Py_CLEAR(self->get_device);
    Py_CLEAR(self->get_stream);
    Py_CLEAR(self->scratch_fn);
    Py_CLEAR(self->same_value);
    Py_CLEAR(self->coresident);
    Py_CLEAR(self->ctx);
    Py_CLEAR(self->hooks_dict);
    Py_CLEAR(self->hook_names);
    Py_CLEAR(self->hook_calls);
    Py_CLEAR(self->tensor_types);
    Py_CLEAR(self->entry);
    Py_CLEAR(self->name);
    for (Py_ssize_t i = 0; i < self->nops; i++) {
        Py_CLEAR(self->ops[i].obj);
        Py_CLEAR(self->ops[i].arg);
    }
    return 0;
}

void lp_launcher_dealloc(Launcher *self) {
    PyObject_GC_UnTrack(self);
    if (self->weakreflist != NULL) PyObject_ClearWeakRefs((PyObject *)self);
    lp_launcher_clear(self);
    Launcher_clear_ops(self);
    PyMem_Free(self->offsets);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

