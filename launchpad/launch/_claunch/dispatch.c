/* The Dispatcher type: ``triton_launcher(fn)[grid](*args, **kwargs)`` in C.
 *
 * Per call it binds the arguments to the JIT function's parameters (positional, by name,
 * defaults), computes the specialization key Triton would (a tensor's dtype and 16-byte
 * alignment, an int's width, whether it equals 1 and divides by 16, bool, float, None, a
 * constexpr's value) into an array of words while reading the arguments, finds the compiled
 * variant by that key in a hash table, and launches it through its Launcher with no Python
 * tuple or dict built. The key is at least as fine as Triton's, so a variant is never used for
 * arguments Triton would have compiled differently. On anything it does not key (tuples,
 * descriptors, objects) or a new key, it calls back into Python: ``slow(grid, *args, **kw)``
 * for the whole call, or ``resolve(args)`` for the variant of a new key, which it then keeps.
 */
#include "claunch.h"

#include <string.h>

#define KEY_WORDS 2  /* per parameter: a tag and a value */

enum {
    TAG_MISSING = 0, TAG_INT = 1, TAG_BOOL = 2, TAG_NONE = 3, TAG_FLOAT = 4,
    TAG_TENSOR = 10, TAG_RUNTIME_INT = 11, TAG_RUNTIME_BOOL = 12, TAG_RUNTIME_FLOAT = 13, TAG_RUNTIME_NONE = 14,
};

typedef struct {
    uint64_t hash;
    uint64_t *key;       /* KEY_WORDS * nparams words (owned) */
    PyObject *launcher;  /* the variant's Launcher; NULL: an empty slot */
} Variant;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Py_ssize_t nparams;
    PyObject *names;       /* tuple of interned parameter names */
    PyObject *defaults;    /* tuple: a default, or a sentinel for required parameters */
    PyObject *required;    /* the sentinel */
    char *constexpr_;      /* 1 where the parameter is a constexpr (keyed by value) */
    PyObject *resolve;     /* resolve(args tuple) -> Launcher */
    PyObject *slow;        /* slow(grid, *args, **kwargs): the Python dispatcher */
    PyObject *tensor_types;
    const DLPackExchangeAPI *api;
    Variant *table;
    Py_ssize_t capacity, count;
} Dispatcher;

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    return h * 0xBF58476D1CE4E5B9ull;
}

/* One parameter's key words; LP_FALLBACK for a value the fast path does not key. */
static int key_of(Dispatcher *self, Py_ssize_t i, PyObject *v, uint64_t *out) {
    if (self->constexpr_[i]) {
        if (v == Py_None) {
            out[0] = TAG_NONE, out[1] = 0;
        } else if (PyBool_Check(v)) {
            out[0] = TAG_BOOL, out[1] = v == Py_True;
        } else if (PyLong_CheckExact(v)) {
            int overflow = 0;
            long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (overflow || (x == -1 && PyErr_Occurred())) {
                PyErr_Clear();
                return LP_FALLBACK;
            }
            out[0] = TAG_INT, out[1] = (uint64_t)x;
        } else if (PyFloat_CheckExact(v)) {
            double d = PyFloat_AS_DOUBLE(v);
            out[0] = TAG_FLOAT;
            memcpy(&out[1], &d, 8);
        } else {
            return LP_FALLBACK;  /* dtypes, strings, functions: Python keys them */
        }
        return LP_OK;
    }
    if (v == Py_None) {
        out[0] = TAG_RUNTIME_NONE, out[1] = 0;
    } else if (PyBool_Check(v)) {
        out[0] = TAG_RUNTIME_BOOL, out[1] = 0;
    } else if (PyLong_CheckExact(v)) {
        /* Triton's width (i32, i64, u64), whether it is 1, and whether 16 divides it */
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        uint64_t width, low;
        if (overflow > 0) {
            unsigned long long u = PyLong_AsUnsignedLongLong(v);
            if (u == (unsigned long long)-1 && PyErr_Occurred()) {
                PyErr_Clear();
                return LP_FALLBACK;
            }
            width = 2, low = u & 15;
        } else if (overflow < 0 || (x == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return LP_FALLBACK;
        } else {
            width = (x >= -2147483648LL && x <= 2147483647LL) ? 0 : 1;
            low = (uint64_t)x & 15;
        }
        out[0] = TAG_RUNTIME_INT | width << 8 | (uint64_t)(x == 1 && !overflow) << 16;
        out[1] = low == 0;
    } else if (PyFloat_CheckExact(v)) {
        out[0] = TAG_RUNTIME_FLOAT, out[1] = 0;
    } else {
        uint64_t address;
        uint32_t dtype;
        int device;
        if (lp_read_pointer(self->api, self->tensor_types, v, &address, &dtype, &device) != LP_OK) return LP_FALLBACK;
        out[0] = TAG_TENSOR | (uint64_t)((address & 15) == 0) << 8;
        out[1] = dtype;
    }
    return LP_OK;
}

static Variant *find(Dispatcher *self, const uint64_t *key, uint64_t hash) {
    if (self->capacity == 0) return NULL;
    size_t words = KEY_WORDS * self->nparams * sizeof(uint64_t);
    for (Py_ssize_t probe = 0; probe < self->capacity; probe++) {
        Variant *v = &self->table[(hash + probe) & (self->capacity - 1)];
        if (v->launcher == NULL) return NULL;
        if (v->hash == hash && memcmp(v->key, key, words) == 0) return v;
    }
    return NULL;
}

/* Add a key's launcher; -1 with MemoryError set when the table or the key cannot be allocated. */
static int insert(Dispatcher *self, const uint64_t *key, uint64_t hash, PyObject *launcher) {
    if ((self->count + 1) * 2 > self->capacity) {  /* grow: at most half full */
        Py_ssize_t capacity = self->capacity ? self->capacity * 2 : 8;
        Variant *table = PyMem_Calloc(capacity, sizeof(Variant));
        if (table == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < self->capacity; i++) {
            Variant *v = &self->table[i];
            if (v->launcher == NULL) continue;
            Py_ssize_t j = v->hash & (capacity - 1);
            while (table[j].launcher != NULL) j = (j + 1) & (capacity - 1);
            table[j] = *v;
        }
        PyMem_Free(self->table);
        self->table = table;
        self->capacity = capacity;
    }
    size_t words = KEY_WORDS * self->nparams * sizeof(uint64_t);
    uint64_t *copy = PyMem_Malloc(words ? words : 1);
    if (copy == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(copy, key, words);
    Py_ssize_t j = hash & (self->capacity - 1);
    while (self->table[j].launcher != NULL) j = (j + 1) & (self->capacity - 1);
    self->table[j] = (Variant){hash, copy, Py_NewRef(launcher)};
    self->count++;
    return 0;
}

static PyObject *call_slow(Dispatcher *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    return PyObject_Vectorcall(self->slow, args, PyVectorcall_NARGS(nargsf), kwnames);
}

/* dispatcher(grid, *args, **kwargs) */
static PyObject *Dispatcher_vectorcall(PyObject *o, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Dispatcher *self = (Dispatcher *)o;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf), np = self->nparams;
    if (n < 1 || n - 1 > np) return call_slow(self, args, nargsf, kwnames);
    PyObject *grid = args[0];
    PyObject *local_values[32];
    uint64_t local_key[KEY_WORDS * 32];
    PyObject **values = np <= 32 ? local_values : PyMem_Malloc(np * sizeof(PyObject *));
    uint64_t *key = np <= 32 ? local_key : PyMem_Malloc(KEY_WORDS * np * sizeof(uint64_t));
    PyObject *result = NULL, *bound = NULL;
    if (values == NULL || key == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < np; i++) values[i] = i < n - 1 ? args[1 + i] : NULL;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {  /* by name: interned names compare by pointer first */
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        Py_ssize_t i = 0;
        for (; i < np; i++) {
            PyObject *p = PyTuple_GET_ITEM(self->names, i);
            if (p == name || PyUnicode_Compare(p, name) == 0) break;
        }
        if (i == np || values[i] != NULL) goto slow;  /* a compile option, or a duplicate: Python's */
        values[i] = args[n + k];
    }
    uint64_t hash = 0x2545F4914F6CDD1Dull;
    for (Py_ssize_t i = 0; i < np; i++) {
        if (values[i] == NULL) {
            values[i] = PyTuple_GET_ITEM(self->defaults, i);
            if (values[i] == self->required) goto slow;  /* Python raises Triton's TypeError */
        }
        if (key_of(self, i, values[i], key + KEY_WORDS * i) != LP_OK) goto slow;
        hash = mix(mix(hash, key[KEY_WORDS * i]), key[KEY_WORDS * i + 1]);
    }
    Variant *variant = find(self, key, hash);
    PyObject *launcher;
    if (variant != NULL) {
        launcher = Py_NewRef(variant->launcher);
    } else {
        PyObject *tuple = PyTuple_New(np);
        if (tuple == NULL) goto out;
        for (Py_ssize_t i = 0; i < np; i++) PyTuple_SET_ITEM(tuple, i, Py_NewRef(values[i]));
        launcher = PyObject_CallOneArg(self->resolve, tuple);
        Py_DECREF(tuple);
        if (launcher == NULL) goto out;
        if (!PyObject_TypeCheck(launcher, &Launcher_Type)) {  /* no compiled launch for it: Python's */
            Py_DECREF(launcher);
            goto slow;
        }
        if (insert(self, key, hash, launcher) < 0) {
            Py_DECREF(launcher);
            goto out;
        }
    }
    if (!PyTuple_CheckExact(grid) && PyCallable_Check(grid)) {  /* grid(meta): every argument by name */
        bound = PyDict_New();
        if (bound == NULL) {
            Py_DECREF(launcher);
            goto out;
        }
        for (Py_ssize_t i = 0; i < np; i++) {
            if (PyDict_SetItem(bound, PyTuple_GET_ITEM(self->names, i), values[i]) < 0) {
                Py_DECREF(launcher);
                goto out;
            }
        }
        grid = PyObject_CallOneArg(grid, bound);
        if (grid == NULL) {
            Py_DECREF(launcher);
            goto out;
        }
    } else {
        Py_INCREF(grid);
    }
    result = lp_launch((Launcher *)launcher, grid, Py_None, values, np, NULL, NULL);
    Py_DECREF(grid);
    Py_DECREF(launcher);
    goto out;
slow:
    result = call_slow(self, args, nargsf, kwnames);
out:
    Py_XDECREF(bound);
    if (values != local_values) PyMem_Free(values);
    if (key != local_key) PyMem_Free(key);
    return result;
}

/* Dispatcher(names, defaults, required, constexprs, resolve, slow, tensor_types) */
static PyObject *Dispatcher_new(PyTypeObject *type, PyObject *a, PyObject *kw) {
    PyObject *names, *defaults, *required, *constexprs, *resolve, *slow, *tensor_types;
    if (kw != NULL && PyDict_GET_SIZE(kw)) {
        PyErr_SetString(PyExc_TypeError, "Dispatcher takes positional arguments only");
        return NULL;
    }
    if (!PyArg_ParseTuple(a, "O!O!OO!OOO!", &PyTuple_Type, &names, &PyTuple_Type, &defaults, &required,
                          &PyTuple_Type, &constexprs, &resolve, &slow, &PyTuple_Type, &tensor_types))
        return NULL;
    Py_ssize_t np = PyTuple_GET_SIZE(names);
    if (PyTuple_GET_SIZE(defaults) != np || PyTuple_GET_SIZE(constexprs) != np) {
        PyErr_SetString(PyExc_ValueError, "names, defaults and constexprs must have one entry per parameter");
        return NULL;
    }
    Dispatcher *self = (Dispatcher *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->vectorcall = Dispatcher_vectorcall;
    self->nparams = np;
    self->names = PyTuple_New(np);
    self->constexpr_ = PyMem_Calloc(np ? np : 1, 1);
    if (self->names == NULL || self->constexpr_ == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < np; i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i);
        if (!PyUnicode_CheckExact(name)) {
            PyErr_SetString(PyExc_TypeError, "parameter names must be str");
            Py_DECREF(self);
            return NULL;
        }
        Py_INCREF(name);
        PyUnicode_InternInPlace(&name);
        PyTuple_SET_ITEM(self->names, i, name);
        int c = PyObject_IsTrue(PyTuple_GET_ITEM(constexprs, i));
        if (c < 0) {
            Py_DECREF(self);
            return NULL;
        }
        self->constexpr_[i] = (char)c;
    }
    self->defaults = Py_NewRef(defaults);
    self->required = Py_NewRef(required);
    self->resolve = Py_NewRef(resolve);
    self->slow = Py_NewRef(slow);
    self->tensor_types = Py_NewRef(tensor_types);
    self->api = PyTuple_GET_SIZE(tensor_types) ? lp_exchange_api(PyTuple_GET_ITEM(tensor_types, 0)) : NULL;
    return (PyObject *)self;
}

static int Dispatcher_traverse(Dispatcher *self, visitproc visit, void *arg) {
    Py_VISIT(self->names);
    Py_VISIT(self->defaults);
    Py_VISIT(self->required);
    Py_VISIT(self->resolve);
    Py_VISIT(self->slow);
    Py_VISIT(self->tensor_types);
    for (Py_ssize_t i = 0; i < self->capacity; i++) Py_VISIT(self->table[i].launcher);
    return 0;
}

static int Dispatcher_clear(Dispatcher *self) {
    Py_CLEAR(self->names);
    Py_CLEAR(self->defaults);
    Py_CLEAR(self->required);
    Py_CLEAR(self->resolve);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->tensor_types);
    for (Py_ssize_t i = 0; i < self->capacity; i++) {
        Py_CLEAR(self->table[i].launcher);
        PyMem_Free(self->table[i].key);
        self->table[i].key = NULL;
    }
    self->count = 0;
    return 0;
}

static void Dispatcher_dealloc(Dispatcher *self) {
    PyObject_GC_UnTrack(self);
    Dispatcher_clear(self);
    PyMem_Free(self->table);
    PyMem_Free(self->constexpr_);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Dispatcher_get_variants(Dispatcher *self, void *closure) {
    (void)closure;
    return PyLong_FromSsize_t(self->count);
}

static PyGetSetDef Dispatcher_getset[] = {
    {"variants", (getter)Dispatcher_get_variants, NULL, "How many specializations the table holds.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject Dispatcher_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "launchpad.launch._claunch.Dispatcher",
    .tp_basicsize = sizeof(Dispatcher),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "triton_launcher's compiled dispatch: dispatcher(grid, *args, **kwargs).",
    .tp_new = Dispatcher_new,
    .tp_vectorcall_offset = offsetof(Dispatcher, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = (traverseproc)Dispatcher_traverse,
    .tp_clear = (inquiry)Dispatcher_clear,
    .tp_dealloc = (destructor)Dispatcher_dealloc,
    .tp_getset = Dispatcher_getset,
};
