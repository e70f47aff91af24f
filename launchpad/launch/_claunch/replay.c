/* The Replay type: a recorded sequence's replay (launchpad/sequences/pyreplay.py is its reference).
 *
 * The Python side found where each input and output goes (uses: a target node, an offset, a size,
 * a slot kind) and made each target once: a device node (its changes go into the ring slot the
 * graph's updater node reads), a kernel node's parameter block, or a copy node's parameter struct.
 * A replay checks every new value first (a tensor's device, dtype, shape, strides and alignment,
 * read through DLPack; a scalar packed as a launch packs it), gives each output new memory (the
 * sequence's allocators), and only then, under the sequence's lock, writes the ring slot and the
 * host targets, hands those to the driver, launches the graph on torch's current stream (the GIL
 * released around the driver calls) and records the new values in the sequence's one list of
 * current values. A failed driver call restores every host target first. Anything it does not
 * take, or any refusal, goes to the Python replay, which words the error.
 */
#include "replay.h"

#include <string.h>

static PyObject *fallback(Replay *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    PyErr_Clear();
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

/* Check a new tensor against an input and stage each use's pointer (8 bytes a use). */
static int stage_tensor(Replay *self, const Input *in, PyObject *value, uint64_t *staged) {
    DLTensor t;
    if (lp_read_tensor(self->api, self->tensor_types, value, &t) != LP_OK || !lp_on_device(&t, self->device) ||
        lp_dtype_word(&t) != in->dtype || t.ndim != in->ndim)
        return LP_FALLBACK;
    int64_t expected = 1;
    for (int d = t.ndim - 1; d >= 0; d--) {  /* no strides: compact row-major */
        if (t.shape[d] != in->shape[d] || (t.strides ? t.strides[d] : expected) != in->strides[d]) return LP_FALLBACK;
        expected *= t.shape[d];
    }
    uint64_t address = (uint64_t)(uintptr_t)t.data + t.byte_offset;
    for (Py_ssize_t u = 0; u < in->nuses; u++) {
        uint64_t at = address + (uint64_t)in->uses[u].delta;
        if (in->uses[u].align && at % (uint64_t)in->uses[u].align) return LP_FALLBACK;
        staged[u] = at;
    }
    return LP_OK;
}

static int stage(Replay *self, const Input *in, PyObject *value, uint64_t *staged) {
    if (in->is_tensor) return stage_tensor(self, in, value, staged);
    if (!PyLong_CheckExact(value) && !PyFloat_CheckExact(value) && !PyBool_Check(value)) return LP_FALLBACK;
    for (Py_ssize_t u = 0; u < in->nuses; u++) {
        staged[u] = 0;
        if (lp_pack_scalar((char *)&staged[u], &in->uses[u].slot, value, in->uses[u].multiple_of) != LP_OK)
            return LP_FALLBACK;
    }
    return LP_OK;
}

static CUresult apply_target(Replay *self, const Target *t) {
    if (t->kind == T_KERNEL) return self->set_params(self->exec, t->handle, &t->params);
    return (t->kind == T_MEMCPY ? self->set_memcpy : self->set_memset)(self->exec, t->handle, t->blob, t->ctx);
}

/* Under the lock: the ring slot, the host targets, the launch; every host target restored on failure. */
static int commit(Replay *self, Use **uses, uint64_t *staged, Py_ssize_t n, uint64_t *undo, char *dirty,
                  void *stream) {
    uint64_t launch = self->state[S_LAUNCHES];
    if (self->ring != NULL && launch - self->ring[0] >= self->slots) {  /* that slot's launch has not started */
        CUresult err;
        Py_BEGIN_ALLOW_THREADS
        err = self->sync();  /* the device, not a stream: the last launch's may be gone (a thread's own) */
        Py_END_ALLOW_THREADS
        if (err != 0 || launch - self->ring[0] >= self->slots) return LP_FALLBACK;
    }
    uint64_t count = 0, *slot = NULL, *entries = NULL;  /* a slot: its count, then its entries */
    if (self->ring != NULL) {
        slot = self->ring + 2 + (launch % self->slots) * (1 + 3 * self->capacity);
        entries = slot + 1;
    }
    memset(dirty, 0, (size_t)self->ntargets);
    for (Py_ssize_t k = 0; k < n; k++) {
        const Use *use = uses[k];
        Target *t = &self->targets[use->target];
        if (t->kind == T_DEVICE) {
            if (entries == NULL || count >= self->capacity) return LP_FALLBACK;
            entries[3 * count] = (uint64_t)(uintptr_t)t->handle;
            entries[3 * count + 1] = use->offset | (uint64_t)use->slot.size << 32;
            entries[3 * count + 2] = staged[k];
            count++;
            continue;
        }
        memcpy(&undo[k], t->blob + use->offset, use->slot.size);
        memcpy(t->blob + use->offset, &staged[k], use->slot.size);
        dirty[use->target] = 1;
    }
    if (slot != NULL) *slot = count;
    CUresult err = 0;
    Py_ssize_t failed_at = self->ntargets;  /* the targets before it took their new bytes */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < self->ntargets; i++) {
        if (dirty[i] && (err = apply_target(self, &self->targets[i])) != 0) {
            failed_at = i;
            break;
        }
    }
    if (err == 0) err = self->graph_launch(self->exec, stream);
    if (err != 0) {  /* every host target back as it was, in the driver too */
        for (Py_ssize_t k = n - 1; k >= 0; k--) {
            const Target *t = &self->targets[uses[k]->target];
            if (t->kind != T_DEVICE) memcpy(t->blob + uses[k]->offset, &undo[k], uses[k]->slot.size);
        }
        for (Py_ssize_t i = 0; i < failed_at; i++) {
            if (dirty[i] && apply_target(self, &self->targets[i]) != 0) self->state[S_BROKEN] = 1;
        }
    }
    Py_END_ALLOW_THREADS
    if (err != 0) return LP_FALLBACK;  /* the Python replay updates again and raises the CudaError */
    self->state[S_LAUNCHES] = launch + 1;
    return LP_OK;
}

PyObject *Replay_vectorcall(PyObject *o, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Replay *self = (Replay *)o;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs > self->ninputs || nargs + nkw > self->ninputs || self->state[S_BROKEN])
        return fallback(self, args, nargsf, kwnames);
    Py_ssize_t ngiven = 0, total = 0, nfresh = 0;
    Py_ssize_t *given = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(self->ninputs + 1));
    PyObject **fresh = PyMem_Calloc((size_t)self->noutputs + 1, sizeof(PyObject *));
    uint64_t *staged = NULL, *undo = NULL;
    Use **uses = NULL;
    char *dirty = NULL;
    PyObject *result = NULL;
    void *stream = NULL;
    int ordinal = -1, locked = 0;
    if (given == NULL || fresh == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) given[ngiven++] = i;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        Py_ssize_t found = -1;
        for (Py_ssize_t i = 0; i < self->ninputs && found < 0; i++) {
            if (self->inputs[i].name == key) found = i;
        }
        for (Py_ssize_t i = 0; i < self->ninputs && found < 0; i++) {
            int eq = PyUnicode_Compare(self->inputs[i].name, key) == 0;
            if (PyErr_Occurred()) goto slow;
            if (eq) found = i;
        }
        if (found < nargs) goto slow;  /* unknown, or twice */
        for (Py_ssize_t j = nargs; j < ngiven; j++) {
            if (given[j] == found) goto slow;
        }
        given[ngiven++] = found;
    }
    for (Py_ssize_t j = 0; j < ngiven; j++) total += self->inputs[given[j]].nuses;
    for (Py_ssize_t s = 0; s < self->noutputs; s++) total += self->outputs[s].nuses;
    staged = PyMem_Calloc((size_t)total + 1, sizeof(uint64_t));
    undo = PyMem_Calloc((size_t)total + 1, sizeof(uint64_t));
    uses = PyMem_Calloc((size_t)total + 1, sizeof(Use *));
    dirty = PyMem_Calloc((size_t)self->ntargets + 1, 1);
    if (staged == NULL || undo == NULL || uses == NULL || dirty == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    Py_ssize_t at = 0;
    for (Py_ssize_t j = 0; j < ngiven; j++) {
        const Input *in = &self->inputs[given[j]];
        PyObject *value = args[j];  /* the keywords' values follow the positional ones, in given's order */
        if (stage(self, in, value, staged + at) != LP_OK) goto slow;
        for (Py_ssize_t u = 0; u < in->nuses; u++) uses[at + u] = &in->uses[u];
        at += in->nuses;
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
    for (Py_ssize_t s = 0; s < self->noutputs; s++, nfresh++) {  /* new memory for each output */
        const Output *out = &self->outputs[s];
        DLTensor t;
        fresh[s] = PyObject_CallNoArgs(out->allocate);
        if (fresh[s] == NULL || lp_read_tensor(self->api, self->tensor_types, fresh[s], &t) != LP_OK) goto slow;
        for (Py_ssize_t u = 0; u < out->nuses; u++) {
            staged[at + u] = (uint64_t)(uintptr_t)t.data + t.byte_offset + (uint64_t)out->uses[u].delta;
            uses[at + u] = &out->uses[u];
        }
        at += out->nuses;
    }
    PyObject *got = PyObject_CallMethod(self->lock, "acquire", NULL);
    if (got == NULL) goto out;
    Py_DECREF(got);
    locked = 1;
    if (commit(self, uses, staged, at, undo, dirty, stream) != LP_OK) goto slow;
    for (Py_ssize_t j = 0; j < ngiven; j++) {  /* the new values are current: the replaced ones go */
        if (PyList_SetItem(self->current, given[j], Py_NewRef(args[j])) < 0) goto out;
    }
    got = PyObject_CallMethod(self->lock, "release", NULL);
    locked = 0;
    if (got == NULL) goto out;
    Py_DECREF(got);
    if (self->build != NULL) {
        PyObject *tuple = PyTuple_New(self->noutputs);
        if (tuple == NULL) goto out;
        for (Py_ssize_t s = 0; s < self->noutputs; s++) PyTuple_SET_ITEM(tuple, s, Py_NewRef(fresh[s]));
        result = PyObject_CallOneArg(self->build, tuple);
        Py_DECREF(tuple);
    } else {
        result = Py_NewRef(self->noutputs ? fresh[0] : Py_None);
    }
    goto out;
slow:
    if (locked) {
        PyObject *r = PyObject_CallMethod(self->lock, "release", NULL);
        locked = 0;
        if (r == NULL) goto out;
        Py_DECREF(r);
    }
    result = fallback(self, args, nargsf, kwnames);
out:
    if (locked) {
        PyObject *type, *value, *trace;
        PyErr_Fetch(&type, &value, &trace);
        PyObject *r = PyObject_CallMethod(self->lock, "release", NULL);
        Py_XDECREF(r);
        PyErr_Restore(type, value, trace);
    }
    for (Py_ssize_t s = 0; fresh != NULL && s < self->noutputs; s++) Py_XDECREF(fresh[s]);
    PyMem_Free(fresh);
    PyMem_Free(given);
    PyMem_Free(staged);
    PyMem_Free(undo);
    PyMem_Free(uses);
    PyMem_Free(dirty);
    return result;
}
