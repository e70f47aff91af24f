/* The Replay type: a recorded sequence's replay (launchpad/sequences/pyreplay.py is its reference).
 *
 * The Python side found where each input and output goes and made each target once
 * (launchpad/sequences/state.py's SequenceState, whose tables creplay.py hands over). A use is a
 * target node, an offset, a size, a slot kind, and for a device target's use its entry in every ring
 * slot. A target is a device node (its changes go into the ring slot the graph's updater node reads),
 * a kernel node's parameter block, or a copy node's parameter struct. A replay goes in five steps:
 *
 * 1. It binds the arguments to the inputs and checks every new value: a tensor's device, dtype, shape,
 *    strides and alignment, read through DLPack; a scalar, packed as a launch packs it. It checks that
 *    every tensor input left out still holds the memory the graph reads.
 * 2. It checks that the current device is the sequence's and that torch's current stream is not
 *    capturing, and gives each output new memory (the sequence's allocators).
 * 3. Under the sequence's lock, it writes the full ring slot (the new words, and the last staged word
 *    of every other use: SequenceState.words, shared with Python) and the host targets, and hands those
 *    to the driver. It launches the graph on torch's current stream, with the GIL released around the
 *    driver calls (or through torch's graph replay, where the step draws random numbers). A failed
 *    driver call restores every host target first.
 * 4. Still under the lock, it records the new values in the sequence's one list of current values
 *    (SequenceState.current) and takes them for the result.
 * 5. After the lock is released, it builds the result.
 *
 * Anything it does not take, and every refusal, goes to the Python replay, which redoes the call and
 * words the error.
 */
#include "replay.h"

#include <sched.h>
#include <string.h>
#include <time.h>

/* One call's memory, cut from one block: the C stack's, or one allocation beyond it. */
typedef struct {
    uint64_t *value;     /* per change: the use's new word */
    uint64_t *undo;      /* per change of a host target: the bytes it replaced */
    Py_ssize_t *given;   /* per value given (positional ones, then keywords'): its input */
    PyObject **old;      /* the current values replaced, released once the lock is */
    PyObject **fresh;    /* each output's new memory */
    uint32_t *changed;   /* per change: its use */
    char *dirty;         /* per target: host bytes changed */
    Py_ssize_t ngiven, nchanged, nold;
} Call;

size_t lp_replay_block_size(const Replay *self) {
    size_t words = 2 * (size_t)self->nuses, slots = (size_t)(2 * self->ninputs + self->noutputs);
    return words * sizeof(uint64_t) + slots * sizeof(void *) + (size_t)self->nuses * sizeof(uint32_t) +
           (size_t)self->ntargets + 1;
}

static void cut(const Replay *self, char *block, Call *c) {
    c->value = (uint64_t *)block;
    c->undo = c->value + self->nuses;
    c->given = (Py_ssize_t *)(c->undo + self->nuses);
    c->old = (PyObject **)(c->given + self->ninputs);
    c->fresh = c->old + self->ninputs;
    c->changed = (uint32_t *)(c->fresh + self->noutputs);
    c->dirty = (char *)(c->changed + self->nuses);
    c->ngiven = c->nchanged = c->nold = 0;
    memset(c->fresh, 0, sizeof(PyObject *) * (size_t)self->noutputs);
}

/* A word of the ring, which the device writes. */
static uint64_t ring_word(const Replay *self, int i) { return ((volatile const uint64_t *)self->ring)[i]; }

/* A call the Python replay makes instead: counted (Sequence.fallbacks), and an error where
 * LAUNCHPAD_NO_FALLBACK is set and the Python replay completed it. */
static PyObject *fallback(Replay *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    PyErr_Clear();
    self->fallbacks++;
    return lp_fell_back(PyObject_Vectorcall(self->fallback, args, nargsf, kwnames), self->name);
}

/* Which input each value is: positional ones by position, keywords by name (interned: compared by
 * identity first); an unknown name, or one given twice, goes to Python. */
static int bind(Replay *self, Py_ssize_t nargs, PyObject *kwnames, Call *c) {
    for (Py_ssize_t i = 0; i < nargs; i++) c->given[c->ngiven++] = i;
    for (Py_ssize_t k = 0; kwnames != NULL && k < PyTuple_GET_SIZE(kwnames); k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        Py_ssize_t found = -1;
        for (Py_ssize_t i = 0; i < self->ninputs && found < 0; i++) {
            if (self->inputs[i].name == key) found = i;
        }
        for (Py_ssize_t i = 0; i < self->ninputs && found < 0; i++) {
            int eq = PyUnicode_Compare(self->inputs[i].name, key) == 0;
            if (PyErr_Occurred()) return LP_FALLBACK;
            if (eq) found = i;
        }
        if (found < nargs) return LP_FALLBACK;  /* unknown, or given positionally too */
        for (Py_ssize_t j = nargs; j < c->ngiven; j++) {
            if (c->given[j] == found) return LP_FALLBACK;
        }
        c->given[c->ngiven++] = found;
    }
    return LP_OK;
}

/* Read a tensor and check it against an input: its device, dtype, shape and strides. */
static int read_as_recorded(Replay *self, const Input *in, PyObject *value, DLTensor *t) {
    if (lp_read_tensor(self->api, self->tensor_types, value, t) != LP_OK || !lp_on_device(t, self->device) ||
        lp_dtype_word(t) != in->dtype || t->ndim != in->ndim)
        return LP_FALLBACK;
    int64_t expected = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {  /* no strides: compact row-major */
        if (t->shape[d] != in->shape[d] || (t->strides ? t->strides[d] : expected) != in->strides[d])
            return LP_FALLBACK;
        expected *= t->shape[d];
    }
    return LP_OK;
}

/* Check a new tensor against an input and stage each use's pointer. */
static int stage_tensor(Replay *self, const Input *in, PyObject *value, uint64_t *staged) {
    DLTensor t;
    if (read_as_recorded(self, in, value, &t) != LP_OK) return LP_FALLBACK;
    uint64_t address = (uint64_t)(uintptr_t)t.data + t.byte_offset;
    const Use *uses = self->uses + in->first;
    for (Py_ssize_t u = 0; u < in->nuses; u++) {
        uint64_t at = address + (uint64_t)uses[u].delta;
        if (uses[u].align && !lp_multiple_u(at, (uint64_t)uses[u].align)) return LP_FALLBACK;
        staged[u] = at;
    }
    return LP_OK;
}

static int stage(Replay *self, const Input *in, PyObject *value, uint64_t *staged) {
    if (in->python_only) return LP_FALLBACK;
    if (in->is_tensor) return stage_tensor(self, in, value, staged);
    if (!PyLong_CheckExact(value) && !PyFloat_CheckExact(value) && !PyBool_Check(value)) return LP_FALLBACK;
    const Use *uses = self->uses + in->first;
    for (Py_ssize_t u = 0; u < in->nuses; u++) {
        staged[u] = 0;  /* (the bytes past the slot's size stay zero, as Python's word has them) */
        if (lp_pack_scalar((char *)&staged[u], &uses[u].slot, value, uses[u].multiple_of) != LP_OK) return LP_FALLBACK;
    }
    return LP_OK;
}

static int stage_inputs(Replay *self, PyObject *const *args, Call *c) {
    for (Py_ssize_t j = 0; j < c->ngiven; j++) {
        const Input *in = &self->inputs[c->given[j]];
        if (stage(self, in, args[j], c->value + c->nchanged) != LP_OK) return LP_FALLBACK;
        for (Py_ssize_t u = 0; u < in->nuses; u++) c->changed[c->nchanged++] = (uint32_t)(in->first + u);
    }
    return LP_OK;
}

/* Whether each tensor input left out of this call is still the memory and layout the graph reads: one whose
 * tensor changed since (x.set_(), a resize_, x.data = ...) goes to the Python replay, which takes it as given:
 * checked, and followed (the graph would read memory the tensor may have left). */
static int left_out_in_place(Replay *self, Call *c) {
    if (PyList_GET_SIZE(self->current) != self->ninputs) return LP_FALLBACK;
    for (Py_ssize_t i = 0; i < self->ninputs; i++) {
        const Input *in = &self->inputs[i];
        int given = !in->is_tensor || in->nuses == 0;
        for (Py_ssize_t j = 0; j < c->ngiven && !given; j++) given = c->given[j] == i;
        if (given) continue;
        DLTensor t;
        if (read_as_recorded(self, in, PyList_GET_ITEM(self->current, i), &t) != LP_OK) return LP_FALLBACK;
        uint64_t address = (uint64_t)(uintptr_t)t.data + t.byte_offset + (uint64_t)self->uses[in->first].delta;
        if (address != self->staged[in->first]) return LP_FALLBACK;
    }
    return LP_OK;
}

/* A small output's next tensor from its batch (launchpad/sequences/output_memory.py): a new batch on
 * this stream where the last is used up, a tensor of its own (``allocate``) on another stream than
 * the batch's. No Python runs between a check and the take that follows it, and a new batch is in
 * place before the old one is released: two threads never take one tensor. */
static PyObject *take_from_batch(Output *out, void *stream) {
    if (out->batch != NULL && out->taken < PyTuple_GET_SIZE(out->batch) && out->stream != stream)
        return PyObject_CallNoArgs(out->allocate);
    if (out->batch == NULL || out->taken >= PyTuple_GET_SIZE(out->batch)) {
        PyObject *batch = PyObject_CallNoArgs(out->refill);
        if (batch == NULL || !PyTuple_CheckExact(batch) || PyTuple_GET_SIZE(batch) == 0) {
            Py_XDECREF(batch);
            return NULL;
        }
        PyObject *last = out->batch;
        out->batch = batch, out->taken = 1, out->stream = stream;
        PyObject *fresh = Py_NewRef(PyTuple_GET_ITEM(batch, 0));
        Py_XDECREF(last);  /* (after the take: releasing the old batch may run Python) */
        return fresh;
    }
    return Py_NewRef(PyTuple_GET_ITEM(out->batch, out->taken++));
}

/* New memory for each output, and every word that points into it. */
static int stage_outputs(Replay *self, Call *c, void *stream) {
    for (Py_ssize_t s = 0; s < self->noutputs; s++) {
        Output *out = &self->outputs[s];
        DLTensor t;
        c->fresh[s] = out->refill != NULL ? take_from_batch(out, stream) : PyObject_CallNoArgs(out->allocate);
        if (c->fresh[s] == NULL || lp_read_tensor(self->api, self->tensor_types, c->fresh[s], &t) != LP_OK)
            return LP_FALLBACK;
        uint64_t address = (uint64_t)(uintptr_t)t.data + t.byte_offset;
        for (Py_ssize_t u = 0; u < out->nuses; u++) {
            c->value[c->nchanged] = address + (uint64_t)self->uses[out->first + u].delta;
            c->changed[c->nchanged++] = (uint32_t)(out->first + u);
        }
    }
    return LP_OK;
}

/* Until the slot of launch ``launch`` is free (the updater started the launch that used it last), or
 * an update failed: polled with the GIL released, never a context- or device-wide synchronization
 * (which would invalidate another thread's stream capture). */
static int wait_for_slot(Replay *self, uint64_t launch) {
    if (launch - ring_word(self, R_CONSUMED) < self->slots) return LP_OK;
    Py_BEGIN_ALLOW_THREADS
    for (unsigned int spins = 0;
         launch - ring_word(self, R_CONSUMED) >= self->slots && ring_word(self, R_FAILURE) == 0; spins++) {
        if (spins < 64) {
            sched_yield();
        } else {
            struct timespec pause = {0, spins < 1024 ? 1000 : 100000};
            nanosleep(&pause, NULL);
        }
    }
    Py_END_ALLOW_THREADS
    return ring_word(self, R_FAILURE) == 0 ? LP_OK : LP_FALLBACK;
}

static CUresult apply_target(Replay *self, const Target *t) {
    if (t->kind == T_KERNEL) return self->set_params(self->exec, t->handle, &t->params);
    return (t->kind == T_MEMCPY ? self->set_memcpy : self->set_memset)(self->exec, t->handle, t->blob, t->ctx);
}

/* Every host target's bytes back, in the driver too (the GIL released): the targets before
 * ``failed_at`` took the new bytes. */
static void restore(Replay *self, Call *c, Py_ssize_t failed_at) {
    for (Py_ssize_t j = c->nchanged - 1; j >= 0; j--) {
        const Use *use = &self->uses[c->changed[j]];
        const Target *t = &self->targets[use->target];
        if (t->kind != T_DEVICE) memcpy(t->blob + use->offset, &c->undo[j], use->slot.size);
    }
    for (Py_ssize_t i = 0; i < failed_at; i++) {
        if (c->dirty[i] && apply_target(self, &self->targets[i]) != 0) self->state[S_BROKEN] = 1;
    }
}

/* Under the lock: the ring slot (the full state), the host targets, the launch; every host target
 * restored on failure. */
static int commit(Replay *self, Call *c, void *stream) {
    uint64_t launch = self->state[S_LAUNCHES];
    if (self->ring != NULL) {
        if (wait_for_slot(self, launch) != LP_OK) return LP_FALLBACK;
        uint64_t *slot = self->ring + R_HEADER + (launch % self->slots) * (1 + 3 * self->capacity);
        uint64_t *values = slot + 3;  /* an entry's value is its third word */
        for (Py_ssize_t k = 0; k < self->nentries; k++) values[3 * k] = self->staged[self->entry_use[k]];
        for (Py_ssize_t j = 0; j < c->nchanged; j++) {
            int32_t entry = self->uses[c->changed[j]].entry;
            if (entry >= 0) values[3 * (size_t)entry] = c->value[j];
        }
        slot[0] = (uint64_t)self->nentries | (launch & 0xffffffffu) << 32;  /* the head: stamped with the launch */
    }
    memset(c->dirty, 0, (size_t)self->ntargets);
    for (Py_ssize_t j = 0; j < c->nchanged; j++) {
        const Use *use = &self->uses[c->changed[j]];
        Target *t = &self->targets[use->target];
        if (t->kind == T_DEVICE) continue;
        memcpy(&c->undo[j], t->blob + use->offset, use->slot.size);
        memcpy(t->blob + use->offset, &c->value[j], use->slot.size);
        c->dirty[use->target] = 1;
    }
    CUresult err = 0;
    Py_ssize_t failed_at = self->ntargets;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < self->ntargets; i++) {
        if (c->dirty[i] && (err = apply_target(self, &self->targets[i])) != 0) {
            failed_at = i;
            break;
        }
    }
    if (err == 0 && self->launch == NULL) err = self->graph_launch(self->exec, stream);
    if (err != 0) restore(self, c, failed_at);
    Py_END_ALLOW_THREADS
    if (err != 0) return LP_FALLBACK;  /* the Python replay updates again and raises the CudaError */
    if (self->launch != NULL) {  /* torch's graph replay: the generators' seeds and offsets, then the launch */
        PyObject *r = PyObject_CallNoArgs(self->launch);
        if (r == NULL) {
            PyErr_Clear();  /* the Python replay calls it again and raises */
            Py_BEGIN_ALLOW_THREADS
            restore(self, c, self->ntargets);
            Py_END_ALLOW_THREADS
            return LP_FALLBACK;
        }
        Py_DECREF(r);
    }
    for (Py_ssize_t j = 0; j < c->nchanged; j++) self->staged[c->changed[j]] = c->value[j];
    self->state[S_LAUNCHES] = launch + 1;
    return LP_OK;
}

static PyObject *result_of(Replay *self, Call *c, PyObject *snapshot) {
    if (self->build == NULL) return Py_NewRef(self->noutputs ? c->fresh[0] : Py_None);
    PyObject *fresh = PyTuple_New(self->noutputs);
    if (fresh == NULL) return NULL;
    for (Py_ssize_t s = 0; s < self->noutputs; s++) PyTuple_SET_ITEM(fresh, s, Py_NewRef(c->fresh[s]));
    PyObject *argv[2] = {fresh, snapshot != NULL ? snapshot : Py_None};
    PyObject *result = PyObject_Vectorcall(self->build, argv, 2, NULL);
    Py_DECREF(fresh);
    return result;
}

PyObject *Replay_vectorcall(PyObject *o, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Replay *self = (Replay *)o;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs > self->npositional || nargs + nkw > self->ninputs || self->state[S_BROKEN] ||
        (self->ring != NULL && ring_word(self, R_FAILURE) != 0))
        return fallback(self, args, nargsf, kwnames);
    uint64_t local[REPLAY_STACK_BYTES / sizeof(uint64_t)];
    char *heap = NULL;
    if (self->block_size > sizeof local && (heap = PyMem_Malloc(self->block_size)) == NULL) return PyErr_NoMemory();
    Call c;
    cut(self, heap != NULL ? heap : (char *)local, &c);
    PyObject *result = NULL, *snapshot = NULL, *got = NULL;
    void *stream = NULL;
    int ordinal = -1, capturing = 0, locked = 0;
    if (bind(self, nargs, kwnames, &c) != LP_OK || stage_inputs(self, args, &c) != LP_OK ||
        left_out_in_place(self, &c) != LP_OK)
        goto slow;
    /* the graph belongs to its device: replay there, on torch's current stream, unless it captures */
    if (self->ctx_get_device == NULL || self->ctx_get_device(&ordinal) != 0 || ordinal != self->device) goto slow;
    if (lp_current_stream(self->get_stream, self->api, self->device, &stream) != LP_OK) goto slow;
    if (self->is_capturing(stream, &capturing) != 0 || capturing != 0) goto slow;
    if (stage_outputs(self, &c, stream) != LP_OK) goto slow;
    if ((got = PyObject_CallNoArgs(self->acquire)) == NULL) goto out;
    Py_DECREF(got);
    locked = 1;
    if (PyList_GET_SIZE(self->current) != self->ninputs || commit(self, &c, stream) != LP_OK) goto slow;
    for (Py_ssize_t j = 0; j < c.ngiven; j++) {  /* the new values are current (the list's references move) */
        c.old[c.nold++] = PyList_GET_ITEM(self->current, c.given[j]);
        PyList_SET_ITEM(self->current, c.given[j], Py_NewRef(args[j]));
    }
    /* what the result is built from, taken before another replay can change it */
    if (self->snapshot && (snapshot = PyList_AsTuple(self->current)) == NULL) goto out;
    locked = 0;
    if ((got = PyObject_CallNoArgs(self->release)) == NULL) goto out;
    Py_DECREF(got);
    if (self->ring != NULL && ring_word(self, R_FAILURE) != 0) {
        /* an update failed since the check above (this launch's, or one before it whose failure stops every
         * later update): no result is returned as good; the Python replay, given nothing, words the failure */
        if ((result = PyObject_Vectorcall(self->fallback, NULL, 0, NULL)) != NULL) {
            Py_CLEAR(result);
            PyErr_SetString(PyExc_RuntimeError, "a device-side update of this sequence failed");
        }
        goto out;
    }
    result = result_of(self, &c, snapshot);
    goto out;
slow:
    if (locked) {
        locked = 0;
        if ((got = PyObject_CallNoArgs(self->release)) == NULL) goto out;
        Py_DECREF(got);
    }
    result = fallback(self, args, nargsf, kwnames);
out:
    if (locked) {
        PyObject *type, *value, *trace;
        PyErr_Fetch(&type, &value, &trace);
        Py_XDECREF(PyObject_CallNoArgs(self->release));
        PyErr_Restore(type, value, trace);
    }
    /* (released once unlocked: a finalizer may replay this sequence) */
    for (Py_ssize_t j = 0; j < c.nold; j++) Py_DECREF(c.old[j]);
    for (Py_ssize_t s = 0; s < self->noutputs; s++) Py_XDECREF(c.fresh[s]);
    Py_XDECREF(snapshot);
    PyMem_Free(heap);
    return result;
}
