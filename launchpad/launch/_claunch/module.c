/* The launchpad.launch._claunch module: its types and one helper (see claunch.h for what it is). */
#include "claunch.h"
#include <string.h>

PyObject *lp_str_stream, *lp_str_shared_mem, *lp_str_calls;

/* --- the layouts read by name (see claunch.h and launchpad/launch/layouts.py) -------------------- */

/* The fields each layout's reader reads, by layout name: exported as LAYOUTS for the test that
 * compares them with the Python NamedTuples (tests/test_layouts.py). */
static const struct { const char *name; const char *const *fields; } LAYOUTS[] = {
    {"Slot", LP_SLOT_FIELDS},
    {"Op", LP_OP_FIELDS},
    {"HookCheck", LP_HOOK_FIELDS},
    {"LaunchPlan", LP_PLAN_FIELDS},
    {"LauncherTable", LP_LAUNCHER_FIELDS},
    {"Entry", LP_ENTRY_FIELDS},
    {"TorchFields", LP_TORCH_FIELDS_FIELDS},
    {"ReplayUse", LP_REPLAY_USE_FIELDS},
    {"ReplayInput", LP_REPLAY_INPUT_FIELDS},
    {"ReplayOutput", LP_REPLAY_OUTPUT_FIELDS},
    {"DeviceTarget", LP_DEVICE_TARGET_FIELDS},
    {"KernelTarget", LP_KERNEL_TARGET_FIELDS},
    {"CopyTarget", LP_COPY_TARGET_FIELDS},
    {"GraphEntryPoints", LP_GRAPH_ENTRY_FIELDS},
    {"Ring", LP_RING_FIELDS},
    {"Staged", LP_STAGED_FIELDS},
    {"ReplayTables", LP_REPLAY_FIELDS},
};

static Py_ssize_t count_fields(const char *const *fields) {
    Py_ssize_t n = 0;
    while (fields[n] != NULL) n++;
    return n;
}

PyObject *lp_named(PyObject *obj, const char *const *fields, const char *layout) {
    Py_ssize_t n = count_fields(fields);
    PyObject *t = PyTuple_New(n);
    if (t == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyObject_GetAttrString(obj, fields[i]);
        if (v == NULL) {
            if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError, "a %s needs the field %s (%.100s has none)", layout, fields[i],
                             Py_TYPE(obj)->tp_name);
            }
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

static PyObject *layouts_dict(void) {
    PyObject *d = PyDict_New();
    for (size_t k = 0; d != NULL && k < sizeof LAYOUTS / sizeof LAYOUTS[0]; k++) {
        Py_ssize_t n = count_fields(LAYOUTS[k].fields);
        PyObject *t = PyTuple_New(n);
        for (Py_ssize_t i = 0; t != NULL && i < n; i++) {
            PyObject *name = PyUnicode_FromString(LAYOUTS[k].fields[i]);
            if (name == NULL) Py_CLEAR(t);
            else PyTuple_SET_ITEM(t, i, name);
        }
        if (t == NULL || PyDict_SetItemString(d, LAYOUTS[k].name, t) < 0) Py_CLEAR(d);
        Py_XDECREF(t);
    }
    return d;
}

/* Whether LAUNCHPAD_NO_FALLBACK is set (not "" nor "0"): read on the fallback path only. */
static int no_fallback(void) {
    const char *v = getenv("LAUNCHPAD_NO_FALLBACK");
    return v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
}

PyObject *lp_fell_back(PyObject *result, PyObject *what) {
    if (result == NULL || !no_fallback()) return result;
    Py_DECREF(result);
    PyObject *errors = PyImport_ImportModule("launchpad.errors");
    PyObject *cls = errors != NULL ? PyObject_GetAttrString(errors, "LaunchpadError") : NULL;
    Py_XDECREF(errors);
    if (cls == NULL) return NULL;
    PyErr_Format(cls, "%S: the compiled executor handed this call to the Python one, which completed it (a silent "
                      "slow path); LAUNCHPAD_NO_FALLBACK is set, so that is an error (unset it to allow it)", what);
    Py_DECREF(cls);
    return NULL;
}

/* launch_loop(cuLaunchKernel, function, count, grid, block, shared_mem, stream, params) -> CUresult:
 * ``count`` launches of one prepacked launch from a C loop, the GIL released: the floor that the
 * benchmarks (launchpad.bench) compare every launcher with. Addresses come as ints (``params``: a
 * ``void**`` of the kernel's arguments); stops at the first error and returns its code. */
static PyObject *launch_loop(PyObject *module, PyObject *args) {
    (void)module;
    unsigned long long launch_addr, function, stream, params;
    long long count;
    unsigned int g[3], b[3], shared_mem;
    if (!PyArg_ParseTuple(args, "KKL(III)(III)IKK:launch_loop", &launch_addr, &function, &count, &g[0], &g[1], &g[2],
                          &b[0], &b[1], &b[2], &shared_mem, &stream, &params))
        return NULL;
    if (launch_addr == 0) {
        PyErr_SetString(PyExc_ValueError, "launch_loop: no cuLaunchKernel address");
        return NULL;
    }
    LaunchFn launch = (LaunchFn)(uintptr_t)launch_addr;
    CUresult r = 0;
    Py_BEGIN_ALLOW_THREADS
    for (long long i = 0; i < count && r == 0; i++)
        r = launch((CUfunction)(uintptr_t)function, g[0], g[1], g[2], b[0], b[1], b[2], shared_mem,
                   (CUstream)(uintptr_t)stream, (void **)(uintptr_t)params, NULL);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong((long)r);
}

/* dlpack_loop(tensor, count) -> bool: ``count`` reads of one tensor through torch's DLPack C exchange
 * API (dltensor_from_py_object_no_sync, the call every launch makes per tensor argument) from a C loop,
 * the GIL held as a launch holds it: what the breakdown (launchpad.bench.breakdown) times as torch's
 * share of a tensor argument. False where the tensor's type has no such API. */
static PyObject *dlpack_loop(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *tensor;
    long long count;
    if (!PyArg_ParseTuple(args, "OL:dlpack_loop", &tensor, &count)) return NULL;
    const DLPackExchangeAPI *api = lp_exchange_api((PyObject *)Py_TYPE(tensor));
    if (api == NULL) Py_RETURN_FALSE;
    DLTensor t;
    for (long long i = 0; i < count; i++) {
        if (api->dltensor_from_py_object_no_sync(tensor, &t) != 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "dlpack_loop: the DLPack read failed");
            return NULL;
        }
    }
    Py_RETURN_TRUE;
}

/* launch_first(pair, *args, **kwargs) -> pair[0](*args, **kwargs). Kernel.launch is this function bound
 * to (the kernel's launcher, what torch.compile needs of it): in eager one more C call, no Python frame;
 * under torch.compile, launchpad/tracing.py has Dynamo trace a polyfill of it instead, which launches
 * through the kernel's operator (Dynamo cannot trace into a C function). */
static PyObject *launch_first(PyObject *module, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    (void)module;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 1 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) < 1) {
        PyErr_SetString(PyExc_TypeError, "launch_first(pair, *args, **kwargs) takes a tuple whose first item it calls");
        return NULL;
    }
    /* args[0] is this call's own argument: the callee may borrow its slot (PY_VECTORCALL_ARGUMENTS_OFFSET) */
    return PyObject_Vectorcall(PyTuple_GET_ITEM(args[0], 0), args + 1, (size_t)(nargs - 1) | PY_VECTORCALL_ARGUMENTS_OFFSET,
                               kwnames);
}

/* dynamo_compiling() -> False: what Kernel.__getitem__ and triton_launcher ask before returning their
 * C launch paths, at the cost of a C call (torch.compiler.is_dynamo_compiling is a Python frame). Under
 * torch.compile Dynamo traces launchpad/tracing.py's stand-in, which says True. */
static PyObject *dynamo_compiling(PyObject *module, PyObject *unused) {
    (void)module, (void)unused;
    Py_RETURN_FALSE;
}

#ifdef LP_PROFILE
#include <time.h>
unsigned long long lp_profile_ns[LP_STEPS], lp_profile_calls;

static unsigned long long monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

/* The time stamp counter where there is one: a read costs a few ns, where clock_gettime's 20-40 would
 * be most of a step's time; _profile() converts its ticks to ns. */
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
unsigned long long lp_now_ns(void) { return __rdtsc(); }
static double ticks_per_ns(void) {
    static double rate;
    if (rate == 0) {
        unsigned long long t0 = monotonic_ns(), c0 = __rdtsc(), t1;
        while ((t1 = monotonic_ns()) - t0 < 20000000ull) {}
        rate = (double)(__rdtsc() - c0) / (double)(t1 - t0);
    }
    return rate;
}
#else
unsigned long long lp_now_ns(void) { return monotonic_ns(); }
static double ticks_per_ns(void) { return 1.0; }
#endif

static PyObject *profile(PyObject *module, PyObject *unused) {
    (void)module, (void)unused;
    PyObject *steps = PyList_New(LP_STEPS);
    if (steps == NULL) return NULL;
    double rate = ticks_per_ns();
    for (int i = 0; i < LP_STEPS; i++) {
        PyList_SET_ITEM(steps, i, PyLong_FromUnsignedLongLong((unsigned long long)((double)lp_profile_ns[i] / rate)));
        lp_profile_ns[i] = 0;
    }
    PyObject *r = Py_BuildValue("(KN)", lp_profile_calls, steps);
    lp_profile_calls = 0;
    return r;
}
#endif

static PyMethodDef module_methods[] = {
    {"dynamo_compiling", dynamo_compiling, METH_NOARGS,
     "dynamo_compiling() -> False in eager; True to Dynamo, which traces launchpad.tracing's stand-in."},
    {"launch_first", (PyCFunction)(void (*)(void))launch_first, METH_FASTCALL | METH_KEYWORDS,
     "launch_first(pair, *args, **kwargs) -> pair[0](*args, **kwargs): Kernel.launch, bound to its pair."},
    {"set_torch_fields", lp_set_torch_fields, METH_O,
     "set_torch_fields(fields | None): the TorchFields every later launch reads plain tensors with."},
    {"torch_tensor", lp_torch_tensor_py, METH_VARARGS,
     "torch_tensor(fields | None, tensor, dims) -> tuple | None: one read from torch's fields, as a launch reads."},
    {"dlpack_tensor", lp_dlpack_tensor, METH_VARARGS,
     "dlpack_tensor(tensor, dims) -> tuple: the same read through torch's DLPack exchange API."},
    {"dlpack_loop", dlpack_loop, METH_VARARGS,
     "dlpack_loop(tensor, count) -> bool: count DLPack C exchange reads of a tensor (the breakdown's torch share)."},
    {"launch_loop", launch_loop, METH_VARARGS,
     "launch_loop(cuLaunchKernel, function, count, grid, block, shared_mem, stream, params) -> CUresult: the C floor."},
#ifdef LP_PROFILE
    {"_profile", profile, METH_NOARGS, "_profile() -> (launches, [ns per step]); resets (LP_PROFILE builds)."},
#endif
    {NULL, NULL, 0, NULL},
};

static int module_exec(PyObject *m) {
    /* interned once per process: constants, whichever interpreter imports the module first */
    if (lp_str_stream == NULL && (lp_str_stream = PyUnicode_InternFromString("stream")) == NULL) return -1;
    if (lp_str_shared_mem == NULL && (lp_str_shared_mem = PyUnicode_InternFromString("shared_mem")) == NULL) return -1;
    if (lp_str_calls == NULL && (lp_str_calls = PyUnicode_InternFromString("calls")) == NULL) return -1;
    PyTypeObject *types[] = {&Launcher_Type, &Configured_Type, &Bound_Type, &Dispatcher_Type, &Replay_Type};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        if (PyType_Ready(types[i]) < 0) return -1;
        const char *name = strrchr(types[i]->tp_name, '.') + 1;
        if (PyModule_AddObjectRef(m, name, (PyObject *)types[i]) < 0) return -1;
    }
    if (PyModule_AddIntConstant(m, "DLPACK_MAJOR", 1) < 0) return -1;
    PyObject *layouts = layouts_dict();
    int added = layouts != NULL ? PyModule_AddObjectRef(m, "LAYOUTS", layouts) : -1;
    Py_XDECREF(layouts);
    if (added < 0) return -1;
    return 0;
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "launchpad.launch._claunch",
    .m_doc = "The compiled launch executor of launchpad (see claunch.h).",
    .m_size = 0,
    .m_methods = module_methods,
    .m_slots = module_slots,
};

PyMODINIT_FUNC PyInit__claunch(void) { return PyModuleDef_Init(&module_def); }
