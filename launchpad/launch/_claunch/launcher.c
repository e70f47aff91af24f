/* The Launcher type: one kernel's compiled launch path (see claunch.h).
 *
 * ``launcher(grid, block, *args, stream=None, shared_mem=None)`` launches, or hands the call to
 * the Python executor. ``launcher.configure(grid, block, stream, shared_mem)`` returns the
 * ``kernel[grid, block]`` callable (a Configured, configured.c) that does the same without
 * re-reading its configuration. How a Launcher is built from its plan: launcher_build.c.
 */
#include "claunch.h"
#include "common_values.h"

#include <alloca.h>
#include <string.h>

static const unsigned int MAX_BLOCK[3] = {1024u, 1024u, 64u};

/* --- one launch ------------------------------------------------------------------------------- */

/* grid or block: an exact int, or a tuple of 1-3 exact ints, each within [low, max]. Inline: a
 * launch reads two. */
LP_ALWAYS_INLINE int read_dims(PyObject *obj, unsigned int out[3], const unsigned int max[3], unsigned int low) {
    long v;
    out[1] = out[2] = 1;
    if (PyLong_CheckExact(obj)) {
        if (lp_small_int(obj, low, max[0], &v) != LP_OK) return LP_FALLBACK;
        out[0] = (unsigned int)v;
        return LP_OK;
    }
    if (!PyTuple_CheckExact(obj) || PyTuple_GET_SIZE(obj) < 1 || PyTuple_GET_SIZE(obj) > 3) return LP_FALLBACK;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(obj); i++) {
        if (lp_small_int(PyTuple_GET_ITEM(obj, i), low, max[i], &v) != LP_OK) return LP_FALLBACK;
        out[i] = (unsigned int)v;
    }
    return LP_OK;
}

/* The launch takes what the launcher keeps of its entry. */
static inline void copy_entry(Launch *L) {
    Launcher *self = L->self;
    L->function = self->function, L->launch = self->launch, L->launch_ex = self->launch_ex;
    L->max_threads = self->max_threads, L->shared_limit = self->shared_limit;
}

/* What is read of the loader's Entry (launchpad/core/loader.py), by name: as claunch.h's EN_* order it. */
const char *const LP_ENTRY_FIELDS[] = {"max_threads", "shared_limit", "address", "launch", "launch_ex",
                                       "ctx_get_device", "visible_devices", NULL};

/* What the device's entry says (its function's limits and address, the driver's cuLaunchKernel,
 * cuLaunchKernelEx and cuCtxGetDevice, how many devices the driver shows), read by name when the
 * entry is new (the first launch, a raised shared-memory limit, a reload) and kept with it until
 * the next: nothing per launch. A new entry is also when new_entry(device) learns that device's
 * tensor fields (once per process). */
static int read_entry(Launch *L, PyObject *entry) {
    Launcher *self = L->self;
    if (entry != self->entry) {
        PyObject *t = lp_named(entry, LP_ENTRY_FIELDS, "Entry");
        if (t == NULL) {
            PyErr_Clear();
            return LP_FALLBACK;
        }
        long max_threads = PyLong_AsLong(PyTuple_GET_ITEM(t, EN_MAX_THREADS));
        long shared_limit = PyLong_AsLong(PyTuple_GET_ITEM(t, EN_SHARED_LIMIT));
        CUfunction function = (CUfunction)PyLong_AsVoidPtr(PyTuple_GET_ITEM(t, EN_ADDRESS));
        LaunchFn launch = (LaunchFn)PyLong_AsVoidPtr(PyTuple_GET_ITEM(t, EN_LAUNCH));
        LaunchExFn launch_ex = (LaunchExFn)PyLong_AsVoidPtr(PyTuple_GET_ITEM(t, EN_LAUNCH_EX));
        CtxGetDeviceFn ctx_get_device = (CtxGetDeviceFn)PyLong_AsVoidPtr(PyTuple_GET_ITEM(t, EN_CTX_GET_DEVICE));
        long visible_devices = PyLong_AsLong(PyTuple_GET_ITEM(t, EN_VISIBLE_DEVICES));
        Py_DECREF(t);
        if (PyErr_Occurred() || launch == NULL || launch_ex == NULL) {
            PyErr_Clear();
            return LP_FALLBACK;
        }
        Py_XSETREF(self->entry, Py_NewRef(entry));
        PyObject *device = PyLong_FromLong(L->device), *r = device ? PyObject_CallOneArg(self->new_entry, device) : NULL;
        Py_XDECREF(device);
        Py_XDECREF(r);
        PyErr_Clear();  /* new_entry only learns (torch_fields.ensure, which refuses by itself): nothing to fail */
        self->function = function, self->launch = launch, self->launch_ex = launch_ex;
        self->max_threads = max_threads, self->shared_limit = shared_limit;
        if (ctx_get_device != NULL) self->ctx_get_device = ctx_get_device;
        self->sole_device = visible_devices == 1 && self->ctx_get_device != NULL;
    }
    self->entry_device = L->device;
    copy_entry(L);
    return LP_OK;
}

/* torch's current device: the current context's. One device shown to the process: 0, without
 * asking, which is what asking gives: the driver's query can only say 0, and where it fails (no
 * context current, a fresh thread) torch's says 0 too, and the launch then fails cleanly
 * (CUDA_ERROR_INVALID_CONTEXT) into the Python executor, which makes the context current and
 * retries, as it does after asking. Otherwise the driver's query, the cheap one; with no context
 * or none known yet, torch's own. LP_OK and *out, or LP_FALLBACK (no exception set). */
static int current_device(Launcher *self, int *out) {
    long v = 0;
    if (self->sole_device) {
        *out = 0;
        return LP_OK;
    }
    if (self->ctx_get_device != NULL && self->ctx_get_device(out) == 0) return LP_OK;
    PyObject *device = PyObject_CallNoArgs(self->get_device);
    int status = device != NULL ? lp_small_int(device, -1, 1 << 16, &v) : LP_FALLBACK;
    Py_XDECREF(device);
    PyErr_Clear();
    *out = (int)v;
    return status;
}

/* Whether a launch hook is set: an entry of the hooks' dict that is not None (a hook chain: its
 * ``calls`` list not empty), or else the class's hook chain with calls. The dict is an instance's
 * ``__dict__``, empty unless a user assigned a hook there: then every lookup would miss, so only
 * the class chains are read (the dict lookups are ~200 instructions of a 2,000-instruction launch). */
static int hooks_armed(Launcher *self) {
    if (PyDict_GET_SIZE(self->hooks_dict) == 0) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->hook_calls); i++) {
            PyObject *calls = PyTuple_GET_ITEM(self->hook_calls, i);
            if (PyList_CheckExact(calls) && PyList_GET_SIZE(calls) > 0) return 1;
        }
        return 0;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->hook_names); i++) {
        PyObject *hook = PyDict_GetItemWithError(self->hooks_dict, PyTuple_GET_ITEM(self->hook_names, i));
        if (hook == NULL) {
            if (PyErr_Occurred()) {
                PyErr_Clear();
                return 1;
            }
            PyObject *calls = PyTuple_GET_ITEM(self->hook_calls, i);
            if (PyList_CheckExact(calls) && PyList_GET_SIZE(calls) > 0) return 1;
            continue;
        }
        if (hook == Py_None) continue;
        PyObject *calls = PyObject_GetAttr(hook, lp_str_calls);
        int armed = calls == NULL || !PyList_CheckExact(calls) || PyList_GET_SIZE(calls) > 0;
        Py_XDECREF(calls);
        PyErr_Clear();
        if (armed) return 1;
    }
    return 0;
}

static int launch_with_attributes(Launch *L, void **params, CUresult *err) {
    Launcher *self = L->self;
    CUlaunchAttribute attrs[5];
    unsigned int n = 0;
    memset(attrs, 0, sizeof attrs);
    if (self->cluster[0]) {
        for (int i = 0; i < 3; i++)
            if (!lp_multiple_u(L->grid[i], (uint64_t)self->cluster[i])) return LP_FALLBACK;
        attrs[n].id = LP_ATTR_CLUSTER_DIMENSION;
        attrs[n].value.dim.x = self->cluster[0];
        attrs[n].value.dim.y = self->cluster[1];
        attrs[n++].value.dim.z = self->cluster[2];
        if (self->spread) {
            attrs[n].id = LP_ATTR_CLUSTER_SCHEDULING;
            attrs[n++].value.value = LP_CLUSTER_SPREAD;
        }
    }
    if (self->cooperative) {
        PyObject *r = PyObject_CallFunction(self->coresident, "iII", L->device,
                                            L->block[0] * L->block[1] * L->block[2], L->shared_mem);
        long capacity = r ? PyLong_AsLong(r) : -1;
        Py_XDECREF(r);
        if (capacity < 0) {
            PyErr_Clear();
            return LP_FALLBACK;
        }
        if ((unsigned long long)L->grid[0] * L->grid[1] * L->grid[2] > (unsigned long long)capacity) return LP_FALLBACK;
        attrs[n].id = LP_ATTR_COOPERATIVE;
        attrs[n++].value.value = 1;
    }
    if (self->pdl) {
        attrs[n].id = LP_ATTR_PROGRAMMATIC_SERIALIZATION;
        attrs[n++].value.value = 1;
    }
    if (self->oversized && L->shared_mem > LP_OVERSIZED_LAUNCH_BYTES) {
        attrs[n].id = LP_ATTR_SHARED_MEMORY_MODE;
        attrs[n++].value.value = LP_SHARED_MEMORY_OVERSIZED;
    }
    CUlaunchConfig config = {L->grid[0], L->grid[1], L->grid[2], L->block[0], L->block[1], L->block[2],
                             L->shared_mem, (CUstream)L->stream, attrs, n};
    LaunchExFn launch_ex = L->launch_ex;
    CUfunction function = L->function;
    Py_BEGIN_ALLOW_THREADS
    *err = launch_ex(&config, function, params, NULL);
    Py_END_ALLOW_THREADS
    return LP_OK;
}

static int attributes_needed(const Launcher *self, unsigned int shared_mem) {
    return self->cluster[0] || self->cooperative || self->pdl ||
           (self->oversized && shared_mem > LP_OVERSIZED_LAUNCH_BYTES);
}

PyObject *lp_launch(Launcher *self, PyObject *grid, PyObject *block, PyObject *const *args, Py_ssize_t nargs,
                    PyObject *stream, PyObject *shared_mem) {
    if (nargs < self->nargs_min || nargs > self->nargs_max) goto fallback;
#ifdef LP_PROFILE
    lp_profile_calls++;
#endif
    LP_UNMARK(0);
    Launch L;  /* each field set before it is read: what the cleanup reads, here (no memset: a launch's
                * fixed cost, ~10 ns, for a struct mostly written again below) */
    L.self = self, L.entry = NULL, L.nkeep = 0;
    int status = LP_FALLBACK;
    char *heap = NULL;  /* the parameter buffer of a launch whose parameters do not fit the stack's share */
    long v;

    if (current_device(self, &L.device) != LP_OK) goto fallback;
    LP_MARK(0);
    LP_UNMARK(1);
    /* a new reference: the entry holds the module, which stays loaded until this launch returns */
    if (self->entry != NULL && L.device == self->entry_device) {
        L.entry = Py_NewRef(self->entry);  /* unchanged since it was read: the loader's table says */
        copy_entry(&L);
    } else {
        PyObject *device = PyLong_FromLong(L.device);
        if (device == NULL) goto done;
        L.entry = PyDict_GetItemWithError(self->entries, device);
        if (L.entry != NULL) {
            Py_INCREF(L.entry);
        } else if (!PyErr_Occurred()) {
            L.entry = PyObject_CallOneArg(self->entry_fn, device);
        }
        Py_DECREF(device);
        if (L.entry == NULL || read_entry(&L, L.entry) != LP_OK) goto done;
    }
    LP_MARK(1);
    LP_UNMARK(2);

    /* zero grids and grids above the limit: Python's, which launches nothing or words the refusal */
    if (read_dims(grid, L.grid, self->max_grid, 1) != LP_OK) goto done;
    if (self->fixed_block[0]) {
        if (block != Py_None) goto done;
        for (int i = 0; i < 3; i++) L.block[i] = (unsigned int)self->fixed_block[i];
    } else if (read_dims(block, L.block, MAX_BLOCK, 1) != LP_OK ||
               (long)L.block[0] * L.block[1] * L.block[2] > L.max_threads) {
        goto done;
    }
    for (int i = 0; self->scaled && i < 3; i++) {
        unsigned long long g = (unsigned long long)L.grid[i] * (unsigned int)self->scale[i];
        if (g > 0xFFFFFFFFull) goto done;
        L.grid[i] = (unsigned int)g;
    }
    if (shared_mem == NULL || shared_mem == Py_None) {
        L.shared_mem = (unsigned int)self->shared_default;
    } else if (lp_small_int(shared_mem, 0, L.shared_limit, &v) == LP_OK) {  /* above: Python raises the limit */
        L.shared_mem = (unsigned int)v;
    } else {
        goto done;
    }
    LP_MARK(2);
    LP_UNMARK(3);
    if (stream == NULL || stream == Py_None) {
        if (lp_current_stream(self->get_stream, self->api, L.device, &L.stream) != LP_OK) goto done;
    } else if (PyLong_CheckExact(stream)) {  /* a raw handle on the current device (0: the legacy default) */
        /* unsigned: -1 is no handle (the Python executor says so), where PyLong_AsVoidPtr takes it */
        L.stream = (void *)(uintptr_t)PyLong_AsUnsignedLongLong(stream);
        if (PyErr_Occurred()) {
            PyErr_Clear();
            goto done;
        }
    } else {
        goto done;
    }
    LP_MARK(3);
    LP_UNMARK(4);
    if (self->hooks_dict != NULL && hooks_armed(self)) goto done;
    LP_MARK(4);
    LP_UNMARK(5);

    /* the buffer (the driver reads each parameter: pads stay unread), then the pointer array */
    size_t pointers_at = ((size_t)self->buffer_size + sizeof(void *) - 1) / sizeof(void *) * sizeof(void *);
    size_t need = pointers_at + (size_t)(self->nparams ? self->nparams : 1) * sizeof(void *);
    if (need > LP_STACK_PARAM_BYTES) {
        heap = PyMem_Malloc(need);
        if (heap == NULL) goto done;  /* the Python executor tries, and raises MemoryError if it must */
    }
    char *memory = heap != NULL ? heap : alloca(need <= LP_STACK_PARAM_BYTES ? need : 1);
    L.buffer = memory;
    void **params = (void **)(memory + pointers_at);
    for (Py_ssize_t i = 0; i < self->nparams; i++) params[i] = L.buffer + self->offsets[i];
    for (Py_ssize_t i = 0; i < self->nops; i++) {
        const Op *op = &self->ops[i];
        if (lp_run_common_value(&L, op, args, nargs) != LP_OK && lp_run_op(&L, op, args, nargs) != LP_OK) goto done;
    }
    LP_MARK(5);
    LP_UNMARK(6);

    CUresult err = 0;
    if (attributes_needed(self, L.shared_mem)) {
        if (launch_with_attributes(&L, self->nparams ? params : NULL, &err) != LP_OK) goto done;
    } else {
        LaunchFn launch = L.launch;
        CUfunction function = L.function;
        Py_BEGIN_ALLOW_THREADS
        err = launch(function, L.grid[0], L.grid[1], L.grid[2], L.block[0], L.block[1], L.block[2], L.shared_mem,
                     (CUstream)L.stream, self->nparams ? params : NULL, NULL);
        Py_END_ALLOW_THREADS
    }
    /* a failed launch did nothing: the Python executor repeats it, retries in the right context
     * or raises the CudaError naming the kernel */
    status = err == 0 ? LP_OK : LP_FALLBACK;
    LP_MARK(6);
done:
    LP_UNMARK(7);
    for (int i = 0; i < L.nkeep; i++) Py_DECREF(L.keep[i]);
    Py_XDECREF(L.entry);
    if (heap != NULL) PyMem_Free(heap);
    LP_MARK(7);
    if (status == LP_OK) Py_RETURN_NONE;
    PyErr_Clear();
fallback:
    return lp_fallback(self, grid, block, args, nargs, stream, shared_mem);
}

int lp_current_stream(PyObject *get_stream, const DLPackExchangeAPI *api, int device, void **out) {
    if (get_stream != NULL) {
        PyObject *dev = PyLong_FromLong(device);
        PyObject *s = dev ? PyObject_CallOneArg(get_stream, dev) : NULL;
        Py_XDECREF(dev);
        if (s == NULL || !PyLong_Check(s)) {
            Py_XDECREF(s);
            PyErr_Clear();
            return LP_FALLBACK;
        }
        *out = PyLong_AsVoidPtr(s);
        Py_DECREF(s);
        if (PyErr_Occurred()) {
            PyErr_Clear();
            return LP_FALLBACK;
        }
        return LP_OK;
    }
    if (device < 0 || api == NULL || api->current_work_stream == NULL ||
        api->current_work_stream(kDLCUDA, device, out) != 0) {
        PyErr_Clear();
        return LP_FALLBACK;
    }
    return LP_OK;
}

PyObject *lp_fallback(Launcher *self, PyObject *grid, PyObject *block, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *stream, PyObject *shared_mem) {
    Py_ssize_t nkw = (stream != NULL) + (shared_mem != NULL);
    Py_ssize_t total = 2 + nargs + nkw;
    PyObject *local[16];
    PyObject **vec = total <= 16 ? local : PyMem_Malloc(total * sizeof(PyObject *));
    if (vec == NULL) return PyErr_NoMemory();
    vec[0] = grid;
    vec[1] = block;
    if (nargs) memcpy(vec + 2, args, nargs * sizeof(PyObject *));
    PyObject *kwnames = NULL;
    if (nkw) {
        kwnames = PyTuple_New(nkw);
        if (kwnames == NULL) goto out;
        Py_ssize_t k = 0;
        if (stream != NULL) {
            PyTuple_SET_ITEM(kwnames, k, Py_NewRef(lp_str_stream));
            vec[2 + nargs + k++] = stream;
        }
        if (shared_mem != NULL) {
            PyTuple_SET_ITEM(kwnames, k, Py_NewRef(lp_str_shared_mem));
            vec[2 + nargs + k++] = shared_mem;
        }
    }
    self->fallbacks++;
    PyObject *r = lp_fell_back(PyObject_Vectorcall(self->python_launch, vec, 2 + nargs, kwnames), self->name);
    Py_XDECREF(kwnames);
    if (vec != local) PyMem_Free(vec);
    return r;
out:
    if (vec != local) PyMem_Free(vec);
    return NULL;
}

PyObject *lp_launcher_vectorcall(PyObject *o, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Launcher *self = (Launcher *)o;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    PyObject *stream = NULL, *shared_mem = NULL;
    if (n < 2) goto python;
    if (kwnames != NULL) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++) {
            PyObject *name = PyTuple_GET_ITEM(kwnames, i);
            if (name == lp_str_stream || PyUnicode_Compare(name, lp_str_stream) == 0)
                stream = args[n + i];
            else if (name == lp_str_shared_mem || PyUnicode_Compare(name, lp_str_shared_mem) == 0)
                shared_mem = args[n + i];
            else
                goto python;  /* arguments by name, other launch options: the Python executor binds them */
        }
    }
    return lp_launch(self, args[0], args[1], args + 2, n - 2, stream, shared_mem);
python:  /* a fallback too (a launch with arguments by name is Python's by design) */
    self->fallbacks++;
    return lp_fell_back(PyObject_Vectorcall(self->python_launch, args, n, kwnames), self->name);
}

static PyObject *Launcher_forget(Launcher *self, PyObject *unused) {
    (void)unused;
    Py_CLEAR(self->entry);  /* the module it holds is unloaded once nothing else holds it */
    self->entry_device = -2;  /* no device: the next launch looks its entry up */
    Py_RETURN_NONE;
}

static PyMethodDef Launcher_methods[] = {
    {"forget", (PyCFunction)Launcher_forget, METH_NOARGS,
     "forget(): drop the entry kept from the last launch (Kernel.close, and the loader's EntryTable on a change)."},
    {"configure", (PyCFunction)lp_configure, METH_VARARGS,
     "configure(grid, block, stream, shared_mem): the kernel[grid, block] callable (None: not given)."},
    {NULL, NULL, 0, NULL},
};

static PyObject *Launcher_get_python(Launcher *self, void *closure) {
    (void)closure;
    return Py_NewRef(self->python_launch);
}

static PyObject *Launcher_get_fallbacks(Launcher *self, void *closure) {
    (void)closure;
    return PyLong_FromUnsignedLongLong(self->fallbacks);
}

static PyGetSetDef Launcher_getset[] = {
    {"python", (getter)Launcher_get_python, NULL, "The Python executor's launch, where every fallback goes.", NULL},
    {"fallbacks", (getter)Launcher_get_fallbacks, NULL,
     "How many calls this launcher handed to the Python executor (refusals and calls with keywords included).",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject Launcher_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "launchpad.launch._claunch.Launcher",
    .tp_basicsize = sizeof(Launcher),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A kernel's compiled launch: launcher(grid, block, *args, stream=None, shared_mem=None).",
    .tp_new = lp_launcher_new,
    .tp_vectorcall_offset = offsetof(Launcher, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = (traverseproc)lp_launcher_traverse,
    .tp_clear = (inquiry)lp_launcher_clear,
    .tp_dealloc = (destructor)lp_launcher_dealloc,
    .tp_weaklistoffset = offsetof(Launcher, weakreflist),
    .tp_methods = Launcher_methods,
    .tp_getset = Launcher_getset,
};
