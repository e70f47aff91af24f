/* The Replay type: a recorded sequence's replay (launchpad/launch/sequence.py), with new inputs.
 *
 * The Python side recorded where each input goes (the kernel nodes, the parameter offsets) and
 * built each updated node's parameter block and pointer array once. A replay checks every new
 * value first (a tensor's device, dtype, shape, strides and alignment, read through DLPack; a
 * scalar's range and type, as a launch packs it) and only then, under the sequence's lock, writes
 * them into the nodes' blocks, hands each changed node to cuGraphExecKernelNodeSetParams and
 * launches the graph on torch's current stream, with the GIL released around the driver calls.
 * Anything it does not take, or any refusal, goes to the Python replay, which words the error.
 */
#include "claunch.h"

#include <string.h>

/* CUDA_KERNEL_NODE_PARAMS_v2 as cuda.h lays it out (cuGetProcAddress gives the _v2 entry point). */
typedef struct {
    CUfunction func;
    unsigned int grid[3], block[3], shared_mem;
    void **kernel_params;
    void **extra;
    void *kern;
    void *ctx;
} NodeParams;

typedef CUresult (*SetParamsFn)(void *exec, void *node, const NodeParams *params);
typedef CUresult (*GraphLaunchFn)(void *exec, void *stream);

typedef struct {
    uint32_t node, offset;
    Slot slot;
    int64_t delta, align, multiple_of;
} Use;

typedef struct {
    PyObject *name;
    int is_tensor, frozen;  /* frozen: a node launchpad did not make reads it; only its value passes */
    uint32_t dtype;
    int ndim;
    int64_t *shape, *strides;  /* 2 * ndim, owned */
    Use *uses;
    Py_ssize_t nuses;
    PyObject *current;  /* the value the graph now reads */
} Input;

typedef struct {
    void *handle;
    char *buffer;  /* the node's parameter block (a bytearray of the Python side, held in keep) */
    NodeParams params;
} Node;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Input *inputs;
    Py_ssize_t ninputs;
    Node *nodes;
    Py_ssize_t nnodes;
    void *exec;
    int device;
    SetParamsFn set_params;
    GraphLaunchFn graph_launch;
    CtxGetDeviceFn ctx_get_device;
    PyObject *fallback;  /* the Python replay: every refusal and everything not taken here */
    PyObject *get_stream;  /* (device) -> int, or NULL: DLPack's current_work_stream (tests give one) */
    PyObject *lock;      /* the sequence's threading.Lock, shared with the Python replay */
    PyObject *keep;      /* what the node blocks and the graph live in */
    PyObject *tensor_types;
    const DLPackExchangeAPI *api;
} Replay;

enum { STAGED_ON_STACK = 64 };

/* Check one new value against an input; put what each use writes into staged (8 bytes a use). */
static int stage(Replay *self, const Input *in, PyObject *value, uint64_t *staged) {
    if (in->is_tensor) {
        DLTensor t;
        if (lp_read_tensor(self->api, self->tensor_types, value, &t) != LP_OK || !lp_on_device(&t, self->device) ||
            lp_dtype_word(&t) != in->dtype || t.ndim != in->ndim)
            return LP_FALLBACK;
        int64_t expected = 1;
        for (int d = t.ndim - 1; d >= 0; d--) {  /* no strides: compact row-major */
            if (t.shape[d] != in->shape[d] || (t.strides ? t.strides[d] : expected) != in->strides[d])
                return LP_FALLBACK;
            expected *= t.shape[d];
        }
        uint64_t address = (uint64_t)(uintptr_t)t.data + t.byte_offset;
        if (in->frozen && value != in->current) return LP_FALLBACK;
        for (Py_ssize_t u = 0; u < in->nuses; u++) {
            uint64_t at = address + (uint64_t)in->uses[u].delta;
            if (in->uses[u].align && at % (uint64_t)in->uses[u].align) return LP_FALLBACK;
            staged[u] = at;
        }
        return LP_OK;
    }
    if (!PyLong_CheckExact(value) && !PyFloat_CheckExact(value) && !PyBool_Check(value)) return LP_FALLBACK;
    if (in->frozen && value != in->current) return LP_FALLBACK;
    for (Py_ssize_t u = 0; u < in->nuses; u++) {
        staged[u] = 0;
        if (lp_pack_scalar((char *)&staged[u], &in->uses[u].slot, value, in->uses[u].multiple_of) != LP_OK)
            return LP_FALLBACK;
    }
    return LP_OK;
}

static PyObject *fallback(Replay *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    PyErr_Clear();
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

static PyObject *Replay_vectorcall(PyObject *o, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Replay *self = (Replay *)o;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs > self->ninputs || nargs + nkw > STAGED_ON_STACK) return fallback(self, args, nargsf, kwnames);
    Input *given[STAGED_ON_STACK];
    PyObject *values[STAGED_ON_STACK];
    Py_ssize_t ngiven = 0, total_uses = 0;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        given[ngiven] = &self->inputs[i];
        values[ngiven++] = args[i];
    }
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        Py_ssize_t found = -1;
        for (Py_ssize_t i = 0; i < self->ninputs && found < 0; i++) {
            if (self->inputs[i].name == key) found = i;
        }
        for (Py_ssize_t i = 0; i < self->ninputs && found < 0; i++) {
            int eq = PyUnicode_Compare(self->inputs[i].name, key) == 0;
            if (PyErr_Occurred()) return fallback(self, args, nargsf, kwnames);
            if (eq) found = i;
        }
        if (found < 0 || found < nargs) return fallback(self, args, nargsf, kwnames);  /* unknown, or twice */
        for (Py_ssize_t j = nargs; j < ngiven; j++) {
            if (given[j] == &self->inputs[found]) return fallback(self, args, nargsf, kwnames);
        }
        given[ngiven] = &self->inputs[found];
        values[ngiven++] = args[nargs + k];
    }
    for (Py_ssize_t j = 0; j < ngiven; j++) total_uses += given[j]->nuses;
    uint64_t staged_local[STAGED_ON_STACK];
    uint64_t *staged = total_uses <= STAGED_ON_STACK ? staged_local : PyMem_Malloc(total_uses * sizeof(uint64_t));
    char dirty_local[STAGED_ON_STACK];
    char *dirty = self->nnodes <= STAGED_ON_STACK ? dirty_local : PyMem_Calloc(self->nnodes, 1);
    PyObject *result = NULL;
    void *stream = NULL;
    int ordinal = -1;
    if (staged == NULL || dirty == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    if (dirty == dirty_local) memset(dirty_local, 0, sizeof dirty_local);
    for (Py_ssize_t j = 0, at = 0; j < ngiven; at += given[j++]->nuses) {
        if (stage(self, given[j], values[j], staged + at) != LP_OK) goto slow;
    }
    /* the graph belongs to its device: replay there, on torch's current stream */
    if (self->ctx_get_device == NULL || self->ctx_get_device(&ordinal) != 0 || ordinal != self->device) goto slow;
    if (self->get_stream != NULL) {
        PyObject *dev = PyLong_FromLong(self->device);
        PyObject *s = dev ? PyObject_CallOneArg(self->get_stream, dev) : NULL;
        Py_XDECREF(dev);
        stream = s ? PyLong_AsVoidPtr(s) : NULL;
        Py_XDECREF(s);
        if (PyErr_Occurred()) goto slow;
    } else if (self->api == NULL || self->api->current_work_stream(kDLCUDA, self->device, &stream) != 0) {
        goto slow;
    }
    PyObject *got = PyObject_CallMethod(self->lock, "acquire", NULL);
    if (got == NULL) goto out;
    Py_DECREF(got);
    for (Py_ssize_t j = 0, at = 0; j < ngiven; at += given[j++]->nuses) {
        const Input *in = given[j];
        for (Py_ssize_t u = 0; u < in->nuses; u++) {
            const Use *use = &in->uses[u];
            memcpy(self->nodes[use->node].buffer + use->offset, &staged[at + u], use->slot.size);
            dirty[use->node] = 1;
        }
    }
    for (Py_ssize_t j = 0; j < ngiven; j++) Py_SETREF(given[j]->current, Py_NewRef(values[j]));
    CUresult err = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t n = 0; n < self->nnodes && err == 0; n++) {
        if (dirty[n]) err = self->set_params(self->exec, self->nodes[n].handle, &self->nodes[n].params);
    }
    if (err == 0) err = self->graph_launch(self->exec, stream);
    Py_END_ALLOW_THREADS
    got = PyObject_CallMethod(self->lock, "release", NULL);
    if (got == NULL) goto out;
    Py_DECREF(got);
    if (err != 0) goto slow;  /* the Python replay updates again and raises the CudaError */
    result = Py_NewRef(Py_None);
    goto out;
slow:
    result = fallback(self, args, nargsf, kwnames);
out:
    if (staged != staged_local) PyMem_Free(staged);
    if (dirty != dirty_local) PyMem_Free(dirty);
    return result;
}

static int parse_input(PyObject *t, Input *in, Py_ssize_t nnodes, Node *nodes) {
    PyObject *name, *shape, *strides, *uses, *current;
    unsigned int dtype;
    if (!PyArg_ParseTuple(t, "UpIO!O!O!pO", &name, &in->is_tensor, &dtype, &PyTuple_Type, &shape, &PyTuple_Type,
                          &strides, &PyTuple_Type, &uses, &in->frozen, &current))
        return -1;
    in->name = Py_NewRef(name);
    PyUnicode_InternInPlace(&in->name);
    in->current = Py_NewRef(current);
    in->dtype = dtype;
    in->ndim = (int)PyTuple_GET_SIZE(shape);
    if (in->ndim != PyTuple_GET_SIZE(strides) || in->ndim > 64) {
        PyErr_SetString(PyExc_ValueError, "shape and strides differ in rank");
        return -1;
    }
    in->shape = PyMem_Calloc(2 * (size_t)in->ndim + 1, sizeof(int64_t));
    in->nuses = PyTuple_GET_SIZE(uses);
    in->uses = PyMem_Calloc(in->nuses ? (size_t)in->nuses : 1, sizeof(Use));
    if (in->shape == NULL || in->uses == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    in->strides = in->shape + in->ndim;
    for (int d = 0; d < in->ndim; d++) {
        in->shape[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
        in->strides[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(strides, d));
    }
    if (PyErr_Occurred()) return -1;
    for (Py_ssize_t u = 0; u < in->nuses; u++) {
        Use *use = &in->uses[u];
        unsigned int node, offset, size, kind;
        long long delta, align, multiple_of;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(uses, u), "IIIILLL", &node, &offset, &size, &kind, &delta, &align,
                              &multiple_of))
            return -1;
        if (node >= nnodes || size == 0 || size > 8 || kind > SK_UNTYPED || nodes[node].buffer == NULL) {
            PyErr_Format(PyExc_ValueError, "bad use (%u, %u, %u, %u)", node, offset, size, kind);
            return -1;
        }
        *use = (Use){node, offset, {0, size, (uint8_t)kind}, delta, align, multiple_of};
    }
    return 0;
}

static int parse_node(PyObject *t, Node *node) {
    unsigned long long handle, function, context, params;
    PyObject *buffer;
    NodeParams *p = &node->params;
    if (!PyArg_ParseTuple(t, "KK(III)(III)IKYK", &handle, &function, &p->grid[0], &p->grid[1], &p->grid[2],
                          &p->block[0], &p->block[1], &p->block[2], &p->shared_mem, &context, &buffer, &params))
        return -1;
    node->handle = (void *)(uintptr_t)handle;
    node->buffer = PyByteArray_AS_STRING(buffer);
    p->func = (CUfunction)(uintptr_t)function;
    p->ctx = (void *)(uintptr_t)context;
    p->kernel_params = (void **)(uintptr_t)params;
    return 0;
}

static void Replay_free(Replay *self) {
    for (Py_ssize_t i = 0; self->inputs != NULL && i < self->ninputs; i++) {
        Py_CLEAR(self->inputs[i].name);
        Py_CLEAR(self->inputs[i].current);
        PyMem_Free(self->inputs[i].shape);
        PyMem_Free(self->inputs[i].uses);
    }
    PyMem_Free(self->inputs);
    PyMem_Free(self->nodes);
    self->inputs = NULL;
    self->nodes = NULL;
}

/* Replay(inputs, nodes, exec, device, set_params, graph_launch, ctx_get_device, fallback, lock, keep,
 *        tensor_types, get_stream): see launchpad/launch/sequence.py for the tuples. */
static PyObject *Replay_new(PyTypeObject *type, PyObject *a, PyObject *kw) {
    PyObject *inputs, *nodes, *fallback_fn, *lock, *keep, *tensor_types, *get_stream;
    unsigned long long exec, set_params, graph_launch, ctx_get_device;
    int device;
    if (kw != NULL && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "Replay takes positional arguments only");
        return NULL;
    }
    if (!PyArg_ParseTuple(a, "O!O!KiKKKOOOO!O", &PyTuple_Type, &inputs, &PyTuple_Type, &nodes, &exec, &device,
                          &set_params, &graph_launch, &ctx_get_device, &fallback_fn, &lock, &keep, &PyTuple_Type,
                          &tensor_types, &get_stream))
        return NULL;
    Replay *self = (Replay *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->vectorcall = Replay_vectorcall;
    self->exec = (void *)(uintptr_t)exec;
    self->device = device;
    self->set_params = (SetParamsFn)(uintptr_t)set_params;
    self->graph_launch = (GraphLaunchFn)(uintptr_t)graph_launch;
    self->ctx_get_device = (CtxGetDeviceFn)(uintptr_t)ctx_get_device;
    self->fallback = Py_NewRef(fallback_fn);
    self->get_stream = get_stream == Py_None ? NULL : Py_NewRef(get_stream);
    self->lock = Py_NewRef(lock);
    self->keep = Py_NewRef(keep);
    self->tensor_types = Py_NewRef(tensor_types);
    self->api = PyTuple_GET_SIZE(tensor_types) ? lp_exchange_api(PyTuple_GET_ITEM(tensor_types, 0)) : NULL;
    self->nnodes = PyTuple_GET_SIZE(nodes);
    self->nodes = PyMem_Calloc(self->nnodes ? (size_t)self->nnodes : 1, sizeof(Node));
    self->ninputs = PyTuple_GET_SIZE(inputs);
    self->inputs = PyMem_Calloc(self->ninputs ? (size_t)self->ninputs : 1, sizeof(Input));
    if (self->nodes == NULL || self->inputs == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    if (self->set_params == NULL || self->graph_launch == NULL || self->ninputs > STAGED_ON_STACK) {
        PyErr_SetString(PyExc_ValueError, "a Replay needs the driver's entry points and at most 64 inputs");
        goto fail;
    }
    for (Py_ssize_t n = 0; n < self->nnodes; n++) {
        PyObject *node = PyTuple_GET_ITEM(nodes, n);
        if (node != Py_None && parse_node(node, &self->nodes[n]) < 0) goto fail;
    }
    for (Py_ssize_t i = 0; i < self->ninputs; i++) {
        if (parse_input(PyTuple_GET_ITEM(inputs, i), &self->inputs[i], self->nnodes, self->nodes) < 0) goto fail;
    }
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

static int Replay_traverse(Replay *self, visitproc visit, void *arg) {
    Py_VISIT(self->fallback);
    Py_VISIT(self->get_stream);
    Py_VISIT(self->lock);
    Py_VISIT(self->keep);
    Py_VISIT(self->tensor_types);
    for (Py_ssize_t i = 0; self->inputs != NULL && i < self->ninputs; i++) Py_VISIT(self->inputs[i].current);
    return 0;
}

static int Replay_clear(Replay *self) {
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->get_stream);
    Py_CLEAR(self->lock);
    Py_CLEAR(self->keep);
    Py_CLEAR(self->tensor_types);
    Replay_free(self);
    return 0;
}

static void Replay_dealloc(Replay *self) {
    PyObject_GC_UnTrack(self);
    Replay_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

PyTypeObject Replay_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "launchpad.launch._claunch.Replay",
    .tp_basicsize = sizeof(Replay),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A recorded sequence's replay with new inputs (see launchpad/launch/sequence.py).",
    .tp_new = Replay_new,
    .tp_dealloc = (destructor)Replay_dealloc,
    .tp_traverse = (traverseproc)Replay_traverse,
    .tp_clear = (inquiry)Replay_clear,
    .tp_vectorcall_offset = offsetof(Replay, vectorcall),
    .tp_call = PyVectorcall_Call,
};
