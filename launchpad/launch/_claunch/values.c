/* Argument values into the parameter buffer: one plan operation at a time.
 *
 * Every function here either writes what the Python executor would pack for the same value
 * (struct's little-endian formats, bf16 rounded to nearest even) and returns LP_OK, or returns
 * LP_FALLBACK with no exception set: a value of a kind it does not take, or one the Python
 * executor refuses, whose message is worded there.
 */
#include "claunch.h"
#include "common_values.h"

#include <string.h>

static int fallback_clearing(void) {
    PyErr_Clear();
    return LP_FALLBACK;
}

int lp_long_in_range(PyObject *obj, long lo, long hi, long *out) {
    int overflow = 0;
    long v = PyLong_AsLongAndOverflow(obj, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) return fallback_clearing();
    if (v < lo || v > hi) return LP_FALLBACK;
    *out = v;
    return LP_OK;
}

static int pack_double(char *at, uint32_t size, double d, int kind) {
    switch (kind) {
    case SK_F16:
        if (PyFloat_Pack2(d, at, 1) < 0) return fallback_clearing();
        return LP_OK;
    case SK_F32:
        if (PyFloat_Pack4(d, at, 1) < 0) return fallback_clearing();
        return LP_OK;
    case SK_F64:
        return PyFloat_Pack8(d, at, 1) < 0 ? fallback_clearing() : LP_OK;
    case SK_BF16: {  /* nearest bf16 of the float32 value, ties to even; NaN is the quiet NaN */
        char f[4];
        if (PyFloat_Pack4(d, f, 1) < 0) return fallback_clearing();
        uint32_t bits;
        memcpy(&bits, f, 4);
        uint16_t out = (bits & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FC0
                                                          : (uint16_t)((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
        memcpy(at, &out, 2);
        return LP_OK;
    }
    default:
        (void)size;
        return LP_FALLBACK;
    }
}

/* An exact int (or bool, as struct takes it) into an integer slot of ``size`` bytes. */
static int pack_int(char *at, const Slot *slot, PyObject *obj, int64_t multiple_of) {
    if (!PyLong_Check(obj) || (!PyLong_CheckExact(obj) && !PyBool_Check(obj))) return LP_FALLBACK;
    if (slot->kind == SK_UINT) {
        uint32_t bits = 8 * slot->size;
        unsigned long long v = PyLong_AsUnsignedLongLong(obj);
        if (v == (unsigned long long)-1 && PyErr_Occurred()) return fallback_clearing();
        if (bits < 64 && v >> bits) return LP_FALLBACK;
        if (multiple_of && !lp_multiple_u(v, (uint64_t)multiple_of)) return LP_FALLBACK;
        lp_store_u64(at, slot->size, v);
        return LP_OK;
    }
    long long v;
    if (!lp_compact_int(obj, &v)) {
        int overflow = 0;
        v = PyLong_AsLongLongAndOverflow(obj, &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) return fallback_clearing();
    }
    if (!lp_signed_fits(v, slot->size, multiple_of)) return LP_FALLBACK;
    lp_store_u64(at, slot->size, (uint64_t)v);
    return LP_OK;
}

/* A pointer from a tensor on the launch device (dtype and alignment checked), None or an int. */
static int pack_pointer(Launch *L, char *at, PyObject *obj, uint32_t dtype, int64_t align) {
    uint64_t address;
    if (obj == Py_None) {
        address = 0;
    } else if (PyLong_CheckExact(obj)) {  /* a raw address: the caller vouches for it */
        address = PyLong_AsUnsignedLongLong(obj);
        if (address == (uint64_t)-1 && PyErr_Occurred()) return fallback_clearing();
    } else {
        uint32_t word;
        int device;
        if (lp_read_pointer(L->self->api, L->self->tensor_types, obj, &address, &word, &device) != LP_OK ||
            !lp_tensor_fits(L, word, device, dtype))
            return LP_FALLBACK;
    }
    if (align && !lp_multiple_u(address, (uint64_t)align)) return LP_FALLBACK;
    memcpy(at, &address, 8);
    return LP_OK;
}

/* Any value into a slot, as the Python executor's fast path takes it. */
static int pack_slot(Launch *L, const Slot *slot, PyObject *obj, uint32_t dtype, int64_t align, int64_t multiple_of) {
    char *at = L->buffer + slot->offset;
    switch (slot->kind) {
    case SK_POINTER:
        return pack_pointer(L, at, obj, dtype, align);
    case SK_INT:
    case SK_UINT:
        return pack_int(at, slot, obj, multiple_of);
    case SK_BOOL:  /* struct's "?": a bool, or an int by its truth */
        if (obj == Py_True || obj == Py_False) {
            *at = obj == Py_True;
            return LP_OK;
        }
        if (PyLong_CheckExact(obj)) {
            int truth = PyObject_IsTrue(obj);
            if (truth < 0) return fallback_clearing();
            *at = (char)truth;
            return LP_OK;
        }
        return LP_FALLBACK;
    case SK_F16:
    case SK_BF16:
    case SK_F32:
    case SK_F64: {
        double d;
        if (PyFloat_CheckExact(obj)) {
            d = PyFloat_AS_DOUBLE(obj);
        } else if (PyLong_CheckExact(obj)) {
            d = PyLong_AsDouble(obj);
            if (d == -1.0 && PyErr_Occurred()) return fallback_clearing();
        } else {
            return LP_FALLBACK;
        }
        return pack_double(at, slot->size, d, slot->kind);
    }
    case SK_BYTES:
        if (!PyBytes_CheckExact(obj) || (uint32_t)PyBytes_GET_SIZE(obj) != slot->size) return LP_FALLBACK;
        memcpy(at, PyBytes_AS_STRING(obj), slot->size);
        return LP_OK;
    case SK_UNTYPED: {  /* only the size is known: an int's bits, a float at that width, a tensor */
        uint32_t bits = 8 * slot->size;
        if (PyBool_Check(obj)) {
            lp_store_u64(at, slot->size, obj == Py_True);
            return LP_OK;
        }
        if (PyLong_CheckExact(obj)) {
            if (bits == 64) {  /* [-2**63, 2**64) */
                int overflow = 0;
                long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
                if (overflow > 0) {
                    unsigned long long u = PyLong_AsUnsignedLongLong(obj);
                    if (u == (unsigned long long)-1 && PyErr_Occurred()) return fallback_clearing();
                    lp_store_u64(at, 8, u);
                    return LP_OK;
                }
                if (overflow < 0 || (v == -1 && PyErr_Occurred())) return fallback_clearing();
                lp_store_u64(at, 8, (uint64_t)v);
                return LP_OK;
            }
            int overflow = 0;
            long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
            if (overflow || (v == -1 && PyErr_Occurred())) return fallback_clearing();
            if (v < -(1LL << (bits - 1)) || v >= (1LL << bits)) return LP_FALLBACK;
            lp_store_u64(at, slot->size, (uint64_t)v);
            return LP_OK;
        }
        if (PyFloat_CheckExact(obj)) {
            int kind = slot->size == 2 ? SK_F16 : slot->size == 4 ? SK_F32 : slot->size == 8 ? SK_F64 : -1;
            return kind < 0 ? LP_FALLBACK : pack_double(at, slot->size, PyFloat_AS_DOUBLE(obj), kind);
        }
        if (slot->size == 8) return pack_pointer(L, at, obj, 0, 0);
        return LP_FALLBACK;
    }
    default:
        return LP_FALLBACK;
    }
}

/* The value at an operation's path, or NULL for an argument left out (positional count). */
static PyObject *value_at(const Op *op, PyObject *const *args, Py_ssize_t nargs, int *bad) {
    *bad = 0;
    if (op->position >= nargs) return NULL;
    PyObject *v = args[op->position];
    for (int i = 0; i < op->depth; i++) {
        Py_ssize_t k = op->sub[i];
        if (PyTuple_CheckExact(v) && k < PyTuple_GET_SIZE(v)) {
            v = PyTuple_GET_ITEM(v, k);
        } else if (PyList_CheckExact(v) && k < PyList_GET_SIZE(v)) {
            v = PyList_GET_ITEM(v, k);
        } else {
            *bad = 1;
            return NULL;
        }
    }
    return v;
}

static int run_const(Launch *L, const Op *op, PyObject *value) {
    if (value == NULL) return LP_OK;  /* left out: the kernel has the value built in */
    if (op->flags & 2) {  /* an argument Triton specialized, to 1 or to None: either is right */
        if (value == Py_None) return LP_OK;
        if (PyLong_CheckExact(value)) {
            int overflow;
            long v = PyLong_AsLongAndOverflow(value, &overflow);
            if (v == 1 && !overflow) return LP_OK;
        }
        return LP_FALLBACK;
    }
    if (op->flags & 1) return LP_FALLBACK;  /* given, but the compiled value is not recorded */
    if (value == op->obj) return LP_OK;
    if (PyLong_CheckExact(value) && PyLong_CheckExact(op->obj)) {
        int same = PyObject_RichCompareBool(value, op->obj, Py_EQ);
        return same == 1 ? LP_OK : same < 0 ? fallback_clearing() : LP_FALLBACK;
    }
    PyObject *pair[2] = {value, op->obj};
    PyObject *r = PyObject_Vectorcall(L->self->same_value, pair, 2, NULL);
    if (r == NULL) return fallback_clearing();
    int same = r == Py_True;
    Py_DECREF(r);
    return same ? LP_OK : LP_FALLBACK;
}

static int run_scratch(Launch *L, const Op *op) {
    char *at = L->buffer + op->slots[0].offset;
    uint64_t zero = 0;
    if (op->size == 0) {
        memcpy(at, &zero, 8);
        return LP_OK;
    }
    if (L->nkeep >= (int)(sizeof L->keep / sizeof L->keep[0])) return LP_FALLBACK;
    unsigned long long blocks = (unsigned long long)L->grid[0] * L->grid[1] * L->grid[2];
    PyObject *argv[5];
    argv[0] = PyLong_FromUnsignedLongLong(blocks * (unsigned long long)op->size);
    argv[1] = PyLong_FromLongLong(op->align);
    argv[2] = PyLong_FromLong(L->device);
    argv[3] = PyLong_FromVoidPtr(L->stream);
    argv[4] = PyBool_FromLong(op->flags & 1);
    PyObject *r = NULL;
    if (argv[0] && argv[1] && argv[2] && argv[3]) r = PyObject_Vectorcall(L->self->scratch_fn, argv, 5, NULL);
    for (int i = 0; i < 5; i++) Py_XDECREF(argv[i]);
    if (r == NULL) return fallback_clearing();
    if (!PyTuple_CheckExact(r) || PyTuple_GET_SIZE(r) != 2 || !PyLong_Check(PyTuple_GET_ITEM(r, 1))) {
        Py_DECREF(r);
        return LP_FALLBACK;
    }
    uint64_t address = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(r, 1));
    if (address == (uint64_t)-1 && PyErr_Occurred()) {
        Py_DECREF(r);
        return fallback_clearing();
    }
    memcpy(at, &address, 8);
    L->keep[L->nkeep++] = r;  /* the owner stays alive until the driver has copied the arguments */
    return LP_OK;
}

/* Numba's array ABI from a tensor: meminfo, parent, nitems, itemsize, data, shape, byte strides. */
static int run_numba_array(Launch *L, const Op *op, PyObject *value) {
    DLTensor t;
    if (lp_read_tensor(L->self->api, L->self->tensor_types, value, &t) != LP_OK || !lp_on_device(&t, L->device)) return LP_FALLBACK;
    if (lp_dtype_word(&t) != op->dtype || t.ndim != op->ndim) return LP_FALLBACK;
    int64_t nitems = 1, expected = 1, strides[32];
    if (t.ndim > 32) return LP_FALLBACK;
    for (int d = t.ndim - 1; d >= 0; d--) {  /* no strides: compact row-major */
        strides[d] = t.strides ? t.strides[d] : expected;
        expected *= t.shape[d];
    }
    for (int d = 0; d < t.ndim; d++) nitems *= t.shape[d];
    if (op->layout != 'A' && nitems) {  /* C or F contiguity, extent-1 dimensions excepted */
        expected = 1;
        for (int i = 0; i < t.ndim; i++) {
            int d = op->layout == 'C' ? t.ndim - 1 - i : i;
            if (t.shape[d] != 1 && strides[d] != expected) return LP_FALLBACK;
            expected *= t.shape[d];
        }
    }
    int64_t head[5] = {0, 0, nitems, op->size, (int64_t)((uintptr_t)t.data + t.byte_offset)};
    for (int i = 0; i < 5; i++) memcpy(L->buffer + op->slots[i].offset, &head[i], 8);
    for (int d = 0; d < t.ndim; d++) {
        int64_t stride_bytes = strides[d] * op->size;
        memcpy(L->buffer + op->slots[5 + d].offset, &t.shape[d], 8);
        memcpy(L->buffer + op->slots[5 + t.ndim + d].offset, &stride_bytes, 8);
    }
    return LP_OK;
}

static int run_expand(Launch *L, const Op *op, PyObject *value) {
    PyObject *argv[5];
    argv[0] = value;
    argv[1] = PyLong_FromLong(L->device);
    argv[2] = PyLong_FromVoidPtr(L->stream);
    argv[3] = L->self->ctx;
    argv[4] = op->arg;
    PyObject *r = argv[1] && argv[2] ? PyObject_Vectorcall(op->obj, argv, 5, NULL) : NULL;
    Py_XDECREF(argv[1]);
    Py_XDECREF(argv[2]);
    if (r == NULL) return fallback_clearing();
    int status = LP_FALLBACK;
    if (PyTuple_CheckExact(r) && PyTuple_GET_SIZE(r) == op->nslots) {
        status = LP_OK;
        for (Py_ssize_t i = 0; i < op->nslots && status == LP_OK; i++)
            status = pack_slot(L, &op->slots[i], PyTuple_GET_ITEM(r, i), 0, 0, 0);
    }
    /* The values may own what they point to (a record's device copy): like the Python executor's
     * locals, they are held until the driver has the arguments. */
    if (status == LP_OK && L->nkeep < (int)(sizeof L->keep / sizeof L->keep[0])) {
        L->keep[L->nkeep++] = r;
        return LP_OK;
    }
    Py_DECREF(r);
    return LP_FALLBACK;
}

int lp_run_op(Launch *L, const Op *op, PyObject *const *args, Py_ssize_t nargs) {
    if (op->kind == OP_SCRATCH) return run_scratch(L, op);
    int bad;
    PyObject *value = value_at(op, args, nargs, &bad);
    if (bad) return LP_FALLBACK;
    switch (op->kind) {
    case OP_CONST:
        return run_const(L, op, value);
    case OP_VALUE:
        return value ? pack_slot(L, &op->slots[0], value, op->dtype, op->align, op->multiple_of) : LP_FALLBACK;
    case OP_NUMBA_ARRAY:
        return value ? run_numba_array(L, op, value) : LP_FALLBACK;
    case OP_EXPAND:
        return value ? run_expand(L, op, value) : LP_FALLBACK;
    case OP_TILE_ARRAY:
        return value ? lp_run_tile_array(L, op, value) : LP_FALLBACK;
    case OP_WARP_ARRAY:
        return value ? lp_run_warp_array(L, op, value) : LP_FALLBACK;
    default:
        return LP_FALLBACK;
    }
}

int lp_pack_scalar(char *at, const Slot *slot, PyObject *obj, int64_t multiple_of) {
    if (slot->kind == SK_POINTER || slot->kind == SK_BYTES) return LP_FALLBACK;  /* scalars only: no launch */
    if (!PyLong_Check(obj) && !PyFloat_Check(obj)) return LP_FALLBACK;  /* numbers only: no tensor read */
    Slot here = *slot;
    here.offset = 0;
    Launch L;
    memset(&L, 0, sizeof L);
    L.buffer = at;
    return pack_slot(&L, &here, obj, 0, 0, multiple_of);
}
