/* A plain torch tensor's address, dtype and device read straight from torch's own objects: the
 * THPVariable, its TensorImpl and its StorageImpl, at offsets launchpad/launch/torch_fields.py
 * learned from this process's torch (and checked against the DLPack exchange API on every probe)
 * before it set them here.
 *
 * Why: a pointer argument needs three facts of a tensor. torch's DLPack exchange read gives them
 * through pybind11 (a type cast, a Tensor copy, its refcount) in 40-150 ns; these loads and
 * compares take a few. Why it is safe: the read takes only what torch's probes showed, and
 * everything else goes to the exchange API as before. A tensor is read here only when
 *   - its Python object's words before the TensorImpl pointer, if any, are as on every probe (a
 *     torch whose THPVariable holds a MaybeOwned<Tensor> keeps its "borrowed" flag there; 2.11 and
 *     2.13 hold the Tensor itself, at offset 16);
 *   - its TensorImpl is a plain TensorImpl (the vtable word), not a subclass (batched, functional,
 *     nested, sparse, quantized, wrapper subclasses);
 *   - its dispatch key set is one a plain dense probe had: no Python, conjugate, negative, zero,
 *     functionalize or batched key; and none of its policy bits say that its sizes, strides, device
 *     or layout come from Python (torch.Tensor._make_subclass's dispatch_* arguments);
 *   - its storage is a plain StorageImpl whose memory comes from an allocator the probes used (the
 *     deleter word: a copy-on-write storage, or memory of a foreign owner, has another), and whose
 *     data_ptr() runs no check first (has_mutable_data_ptr_check_: a throwing, warning or lazily
 *     materialized storage);
 *   - it has elements (torch gives no address for an empty tensor), a dtype the probes mapped, and
 *     a CPU or CUDA device.
 * The result is what TensorImpl::data() computes: storage data + storage_offset * itemsize.
 *
 * The layout is process state (one torch per process), set once under the GIL; launches read it
 * under the GIL. Nothing here raises on the launch path: a tensor it does not take is LP_FALLBACK.
 */
#include "claunch.h"
#include "common_values.h"

#include <string.h>

const char *const LP_TORCH_FIELDS_FIELDS[] = {"impl_at", "guard", "impl_type", "keys_at", "keys", "storage_at",
                                              "offset_at", "numel_at", "dtype_at", "device_at", "dtypes",
                                              "storage_type", "data_at", "deleter_at", "deleters", "device_types",
                                              "ndim_at", "sizes_at", "strides_at", "check_at", "policy_at",
                                              "policy_mask", NULL};

enum { LP_INLINE_DIMS = 5 };  /* c10::SizesAndStrides keeps up to 5 dimensions in the TensorImpl */
/* The most of each object the learning reads (launchpad/launch/torch_fields.py): every offset is within. */
enum { MAX_GUARD = 4, MAX_KEYS = 8, MAX_DELETERS = 4, MAX_TYPEMETA = 64, OBJECT_BYTES = 64, IMPL_BYTES = 256,
       STORAGE_BYTES = 64 };

typedef struct {
    int set;
    uint32_t impl_at, nguard;
    uint64_t guard[MAX_GUARD];
    uint64_t impl_type, storage_type;
    uint32_t keys_at, storage_at, offset_at, numel_at, dtype_at, device_at, data_at, deleter_at;
    uint32_t ndim_at, sizes_at, strides_at;  /* SizesAndStrides: the rank, the inline sizes and strides */
    uint32_t check_at;  /* StorageImpl: has_mutable_data_ptr_check_, 0 on a plain storage */
    uint32_t policy_at;  /* TensorImpl: the word whose policy_mask bits are clear on a plain tensor */
    uint64_t policy_mask;
    uint64_t keys[MAX_KEYS];
    int nkeys;
    uint64_t deleters[MAX_DELETERS];
    int ndeleters;
    int cpu_type, cuda_type;              /* c10::DeviceType bytes; -1: not learned */
    uint32_t dtype_word[MAX_TYPEMETA];    /* by TypeMeta index: the DLPack dtype word; 0: not mapped */
    uint8_t itemsize[MAX_TYPEMETA];
} TorchFields;

static TorchFields fields;  /* the process's torch, as learned; fields.set == 0: not learned */

static uint64_t load64(const char *at) {
    uint64_t v;
    memcpy(&v, at, 8);
    return v;
}

static int listed(uint64_t v, const uint64_t *list, int n) {
    for (int i = 0; i < n; i++)
        if (list[i] == v) return 1;
    return 0;
}

/* Fills ``out`` as torch's DLPack export would (the offset folded into ``data``; CPU device id 0), its
 * shape and strides pointing into the TensorImpl as the export's do; with ``dims`` 0 they are left NULL
 * and any rank is taken (a pointer argument needs none of them). Inlined into each reader: in
 * lp_torch_address only what a pointer needs of it stays. */
LP_ALWAYS_INLINE int read_fields(const TorchFields *f, PyObject *obj, DLTensor *out, int dims) {
    if (!f->set) return LP_FALLBACK;
    const char *o = (const char *)obj;
    for (uint32_t i = 0; i < f->nguard; i++)
        if (load64(o + 16 + 8 * i) != f->guard[i]) return LP_FALLBACK;
    const char *impl = (const char *)(uintptr_t)load64(o + f->impl_at);
    if (impl == NULL || load64(impl) != f->impl_type) return LP_FALLBACK;
    if (!listed(load64(impl + f->keys_at), f->keys, f->nkeys)) return LP_FALLBACK;
    if (load64(impl + f->policy_at) & f->policy_mask) return LP_FALLBACK;  /* sizes, device or layout from Python */
    const char *storage = (const char *)(uintptr_t)load64(impl + f->storage_at);
    if (storage == NULL || load64(storage) != f->storage_type) return LP_FALLBACK;
    if (!listed(load64(storage + f->deleter_at), f->deleters, f->ndeleters)) return LP_FALLBACK;
    if (storage[f->check_at] != 0) return LP_FALLBACK;  /* data_ptr() would check, warn or materialize first */
    int64_t numel = (int64_t)load64(impl + f->numel_at), offset = (int64_t)load64(impl + f->offset_at);
    uint16_t meta;
    memcpy(&meta, impl + f->dtype_at, 2);
    if (numel <= 0 || offset < 0 || meta >= MAX_TYPEMETA || f->dtype_word[meta] == 0) return LP_FALLBACK;
    /* c10::optional<c10::Device>: the type byte, the index byte, then "engaged" */
    int type = (uint8_t)impl[f->device_at], index = (int8_t)impl[f->device_at + 1];
    if (impl[f->device_at + 2] != 1) return LP_FALLBACK;
    if (type == f->cpu_type && index == -1) out->device.device_type = kDLCPU, out->device.device_id = 0;
    else if (type == f->cuda_type && index >= 0) out->device.device_type = kDLCUDA, out->device.device_id = index;
    else return LP_FALLBACK;
    uint64_t ndim = load64(impl + f->ndim_at);
    if (dims && ndim > LP_INLINE_DIMS) return LP_FALLBACK;  /* more: torch keeps them out of line */
    uint64_t data = load64(storage + f->data_at);
    if (data == 0) return LP_FALLBACK;
    uint32_t word = f->dtype_word[meta];
    out->data = (void *)(uintptr_t)(data + (uint64_t)offset * f->itemsize[meta]);
    out->byte_offset = 0;
    out->ndim = (int32_t)ndim;
    out->dtype.code = (uint8_t)word, out->dtype.bits = (uint8_t)(word >> 8), out->dtype.lanes = (uint16_t)(word >> 16);
    out->shape = dims ? (int64_t *)(impl + f->sizes_at) : NULL;
    out->strides = dims ? (int64_t *)(impl + f->strides_at) : NULL;
    return LP_OK;
}

int lp_torch_tensor(PyObject *obj, DLTensor *out) { return read_fields(&fields, obj, out, 1); }

int lp_torch_pointer(PyObject *obj, DLTensor *out) { return read_fields(&fields, obj, out, 0); }

int lp_torch_address(PyObject *obj, uint64_t *address, uint32_t *dtype, int *device) {
    DLTensor t;
    if (read_fields(&fields, obj, &t, 0) != LP_OK) return LP_FALLBACK;
    *device = t.device.device_type == kDLCPU ? -1 : t.device.device_id;  /* read_fields: CPU or CUDA only */
    *address = (uint64_t)(uintptr_t)t.data;
    *dtype = lp_dtype_word(&t);
    return LP_OK;
}

/* A uint64 tuple of at most ``max`` items into ``out``; -1 with an exception set otherwise. */
static int parse_words(PyObject *seq, uint64_t *out, int max, int *n, const char *what) {
    if (!PyTuple_Check(seq) || PyTuple_GET_SIZE(seq) > max) {
        PyErr_Format(PyExc_ValueError, "TorchFields.%s: a tuple of at most %d words", what, max);
        return -1;
    }
    *n = (int)PyTuple_GET_SIZE(seq);
    for (int i = 0; i < *n; i++) {
        out[i] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(seq, i));
        if (out[i] == (uint64_t)-1 && PyErr_Occurred()) return -1;
    }
    return 0;
}

/* The TorchFields NamedTuple (launchpad/launch/layouts.py) into ``f``; -1 with an exception set. */
static int parse_fields(PyObject *obj, TorchFields *f) {
    memset(f, 0, sizeof *f);
    PyObject *t = lp_named(obj, LP_TORCH_FIELDS_FIELDS, "TorchFields");
    if (t == NULL) return -1;
    PyObject *guard, *keys, *dtypes, *deleters;
    unsigned long long impl_type, storage_type;
    unsigned long long policy_mask;
    int ok = PyArg_ParseTuple(t, "IO!KIO!IIIIIO!KIIO!(ii)IIIIIK", &f->impl_at, &PyTuple_Type, &guard, &impl_type,
                              &f->keys_at, &PyTuple_Type, &keys, &f->storage_at, &f->offset_at, &f->numel_at,
                              &f->dtype_at, &f->device_at, &PyTuple_Type, &dtypes, &storage_type, &f->data_at,
                              &f->deleter_at, &PyTuple_Type, &deleters, &f->cpu_type, &f->cuda_type, &f->ndim_at,
                              &f->sizes_at, &f->strides_at, &f->check_at, &f->policy_at, &policy_mask);
    int nguard = 0;
    if (ok) {
        f->impl_type = impl_type, f->storage_type = storage_type, f->policy_mask = policy_mask;
        ok = parse_words(guard, f->guard, MAX_GUARD, &nguard, "guard") == 0 &&
             parse_words(keys, f->keys, MAX_KEYS, &f->nkeys, "keys") == 0 &&
             parse_words(deleters, f->deleters, MAX_DELETERS, &f->ndeleters, "deleters") == 0;
    }
    f->nguard = (uint32_t)nguard;
    /* each field within its object (64-bit sums: no offset wraps around) */
    const uint64_t impl_words[] = {f->keys_at, f->storage_at, f->offset_at, f->numel_at, f->ndim_at, f->policy_at,
                                   (uint64_t)f->sizes_at + 8 * (LP_INLINE_DIMS - 1),
                                   (uint64_t)f->strides_at + 8 * (LP_INLINE_DIMS - 1)};
    for (size_t i = 0; ok && i < sizeof impl_words / sizeof impl_words[0]; i++) ok = impl_words[i] + 8 <= IMPL_BYTES;
    ok = ok && (uint64_t)f->dtype_at + 2 <= IMPL_BYTES && (uint64_t)f->device_at + 3 <= IMPL_BYTES;
    ok = ok && (uint64_t)f->data_at + 8 <= STORAGE_BYTES && (uint64_t)f->deleter_at + 8 <= STORAGE_BYTES;
    ok = ok && f->check_at < STORAGE_BYTES && (uint64_t)f->impl_at + 8 <= OBJECT_BYTES;
    if (ok && f->impl_at != 16 + 8 * f->nguard) ok = 0;
    if (!ok) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "TorchFields: an offset out of range");
        Py_DECREF(t);
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(dtypes); i++) {
        unsigned int meta, word, size;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(dtypes, i), "III", &meta, &word, &size)) break;
        if (meta >= MAX_TYPEMETA || word == 0 || size == 0 || size > 255) {
            PyErr_SetString(PyExc_ValueError, "TorchFields.dtypes: (TypeMeta index < 64, DLPack word, itemsize)");
            break;
        }
        f->dtype_word[meta] = word, f->itemsize[meta] = (uint8_t)size;
    }
    Py_DECREF(t);
    if (PyErr_Occurred()) return -1;
    f->set = 1;
    return 0;
}

/* set_torch_fields(fields | None): what every later launch reads tensors with (None: the exchange API). */
PyObject *lp_set_torch_fields(PyObject *module, PyObject *arg) {
    (void)module;
    TorchFields f;
    if (arg == Py_None) memset(&f, 0, sizeof f);
    else if (parse_fields(arg, &f) < 0) return NULL;
    fields = f;
    Py_RETURN_NONE;
}

static PyObject *described(const DLTensor *t) {
    PyObject *shape = PyTuple_New(t->ndim), *strides = PyTuple_New(t->ndim);
    for (int d = 0; shape != NULL && strides != NULL && d < t->ndim; d++) {
        PyTuple_SET_ITEM(shape, d, PyLong_FromLongLong(t->shape[d]));
        PyTuple_SET_ITEM(strides, d, PyLong_FromLongLong(t->strides ? t->strides[d] : 0));
    }
    if (shape == NULL || strides == NULL || PyErr_Occurred()) {
        Py_XDECREF(shape), Py_XDECREF(strides);
        return NULL;
    }
    return Py_BuildValue("(KiiIKKNN)", (unsigned long long)((uintptr_t)t->data + t->byte_offset), t->device.device_type,
                         t->device.device_id, lp_dtype_word(t), (unsigned long long)(uintptr_t)t->shape,
                         (unsigned long long)(uintptr_t)t->strides, shape, strides);
}

/* torch_tensor(fields | None, tensor, dims) -> (address, DLPack device type, device id, dtype word, shape
 * address, strides address, shape, strides) | None: one read with the given fields (None: the ones set)
 * as a launch reads (dims False: a pointer argument's read, no shape), None where it hands the tensor
 * to the exchange API. */
PyObject *lp_torch_tensor_py(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *given, *tensor;
    int dims;
    if (!PyArg_ParseTuple(args, "OOp:torch_tensor", &given, &tensor, &dims)) return NULL;
    TorchFields f;
    if (given == Py_None) f = fields;
    else if (parse_fields(given, &f) < 0) return NULL;
    /* a launch reads only objects of exactly torch's tensor types; here, anything with a ``_cdata`` (its
     * TensorImpl's address) where the fields say the THPVariable keeps it */
    PyObject *cdata = PyObject_GetAttrString(tensor, "_cdata");
    unsigned long long impl = cdata != NULL ? PyLong_AsUnsignedLongLong(cdata) : 0;
    Py_XDECREF(cdata);
    if (PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return NULL;
        PyErr_Clear();  /* not a tensor */
        Py_RETURN_NONE;
    }
    if (!f.set || Py_TYPE(tensor)->tp_basicsize < (Py_ssize_t)f.impl_at + 8 ||
        load64((const char *)tensor + f.impl_at) != impl)
        Py_RETURN_NONE;
    DLTensor t;
    if (read_fields(&f, tensor, &t, dims) != LP_OK) Py_RETURN_NONE;
    if (!dims) return Py_BuildValue("(KiiI)", (unsigned long long)(uintptr_t)t.data, t.device.device_type,
                                    t.device.device_id, lp_dtype_word(&t));
    return described(&t);
}

/* dlpack_tensor(tensor, dims) -> the same through torch's DLPack exchange API. */
PyObject *lp_dlpack_tensor(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *tensor;
    int dims;
    if (!PyArg_ParseTuple(args, "Op:dlpack_tensor", &tensor, &dims)) return NULL;
    const DLPackExchangeAPI *api = lp_exchange_api((PyObject *)Py_TYPE(tensor));
    if (api == NULL) {
        PyErr_Format(PyExc_TypeError, "%.200s has no DLPack C exchange API (version 1)", Py_TYPE(tensor)->tp_name);
        return NULL;
    }
    DLTensor t;
    if (api->dltensor_from_py_object_no_sync(tensor, &t) != 0) return NULL;
    if (!dims) return Py_BuildValue("(KiiI)", (unsigned long long)((uintptr_t)t.data + t.byte_offset),
                                    t.device.device_type, t.device.device_id, lp_dtype_word(&t));
    return described(&t);
}
