/* launchpad.launch._claunch: the compiled launch executor.
 *
 * It executes the same kernel description (KernelSpec) as the generated Python executor, from a
 * plan of operations compiled once per kernel by launchpad/launch/executor.py. Per launch it reads
 * torch tensors through the DLPack C exchange API torch exposes on its tensor type, checks and
 * packs every argument into a buffer on the C stack, and calls cuLaunchKernel(Ex) through an
 * address the driver layer looked up (cuGetProcAddress) with the GIL released.
 *
 * It only detects: on anything it does not take, or any check that fails, it hands the very
 * same call to the Python executor, which launches it or raises the error with its message.
 * So both executors give the same bytes to the driver and the same exceptions to the user.
 *
 * Built without CUDA, DLPack or torch headers: the few types it needs are declared here with
 * their ABI (CUDA handles are pointers, CUresult is an int; DLPack as torch's ATen/dlpack.h,
 * version 1.3).
 */
#ifndef LAUNCHPAD_CLAUNCH_H
#define LAUNCHPAD_CLAUNCH_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>

#if PY_VERSION_HEX < 0x030B0000 /* Python 3.10: the float packers were private, with unsigned bytes */
#define PyFloat_Pack2(x, p, le) _PyFloat_Pack2((x), (unsigned char *)(p), (le))
#define PyFloat_Pack4(x, p, le) _PyFloat_Pack4((x), (unsigned char *)(p), (le))
#define PyFloat_Pack8(x, p, le) _PyFloat_Pack8((x), (unsigned char *)(p), (le))
#endif

/* A small function of the launch path, inlined where it is called even where the compiler's own
 * estimate would call it (GCC and Clang). */
#if defined(__GNUC__)
#define LP_ALWAYS_INLINE static inline __attribute__((always_inline))
#else
#define LP_ALWAYS_INLINE static inline
#endif

/* --- CUDA driver ABI -------------------------------------------------------------------------- */

typedef int CUresult;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;

typedef struct {
    int id;
    char pad[4];
    union {
        char bytes[64];
        int value;
        struct { unsigned int x, y, z; } dim;
    } value;
} CUlaunchAttribute;

typedef struct {
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;

typedef CUresult (*LaunchFn)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
                             unsigned int, unsigned int, CUstream, void **, void **);
typedef CUresult (*LaunchExFn)(const CUlaunchConfig *, CUfunction, void **, void **);
typedef CUresult (*CtxGetDeviceFn)(int *);

enum {
    LP_ATTR_COOPERATIVE = 2,
    LP_ATTR_CLUSTER_DIMENSION = 4,
    LP_ATTR_CLUSTER_SCHEDULING = 5,
    LP_ATTR_PROGRAMMATIC_SERIALIZATION = 6,
    LP_ATTR_SHARED_MEMORY_MODE = 18,
    LP_CLUSTER_SPREAD = 1,
    LP_SHARED_MEMORY_OVERSIZED = 3,
    LP_OVERSIZED_LAUNCH_BYTES = 228 * 1024,
};

/* The most bytes of parameters a kernel takes (CUDA 12.1+, Volta and newer), and how much of a
 * launch's parameter buffer and pointer array goes on the C stack: more goes on the heap for that
 * launch (a large parameter block, which the driver copies anyway). */
enum { LP_MAX_PARAM_BYTES = 32764, LP_STACK_PARAM_BYTES = 8192 };
/* The largest grid every CUDA device takes, per dimension (launchpad/launch/checks.py's MAX_GRID). */
enum { LP_MAX_GRID_X = 2147483647, LP_MAX_GRID_YZ = 65535 };

/* --- DLPack exchange API (DLPack 1.3) -------------------------------------------------------- */

enum { kDLCPU = 1, kDLCUDA = 2 };

typedef struct { uint32_t major, minor; } DLPackVersion;
typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} DLTensor;

typedef struct DLPackExchangeAPIHeader {
    DLPackVersion version;
    struct DLPackExchangeAPIHeader *prev_api;
} DLPackExchangeAPIHeader;

typedef struct {
    DLPackExchangeAPIHeader header;
    void *managed_tensor_allocator;
    void *managed_tensor_from_py_object_no_sync;
    void *managed_tensor_to_py_object_no_sync;
    int (*dltensor_from_py_object_no_sync)(void *py_object, DLTensor *out);
    int (*current_work_stream)(int32_t device_type, int32_t device_id, void **out_stream);
} DLPackExchangeAPI;

/* tensors.c: the exchange API of a tensor type, or NULL (no exception) when it has none or an
 * unknown major version. */
const DLPackExchangeAPI *lp_exchange_api(PyObject *tensor_type);
/* The interned names the launcher compares keywords with. */
extern PyObject *lp_str_stream, *lp_str_shared_mem, *lp_str_calls;

/* --- the plan --------------------------------------------------------------------------------- */

/* How one parameter slot is packed (the type word's family and width). */
enum SlotKind {
    SK_POINTER, SK_INT, SK_UINT, SK_BOOL, SK_F16, SK_BF16, SK_F32, SK_F64, SK_BYTES, SK_UNTYPED,
};

typedef struct {
    uint32_t offset;   /* byte offset in the parameter buffer */
    uint32_t size;     /* bytes */
    uint8_t kind;      /* enum SlotKind */
} Slot;

enum OpKind {
    OP_VALUE,        /* one argument into one slot */
    OP_CONST,        /* an argument the kernel was specialized on: checked, not packed */
    OP_SCRATCH,      /* a hidden per-launch allocation */
    OP_NUMBA_ARRAY,  /* Numba's array ABI: 5 + 2 * ndim slots */
    OP_EXPAND,       /* a Python converter gives the values of several slots */
    OP_TILE_ARRAY,   /* cuTile's array ABI: pointer, ndim extents, ndim strides; its promises checked */
    OP_WARP_ARRAY,   /* Warp's array_t: one 56-byte struct (pointer, extents and byte strides, ndim) */
};

/* OP_TILE_ARRAY's "no promise" in its per-dimension words */
#define LP_NONE INT64_MIN

#define LP_MAX_DEPTH 4

typedef struct {
    uint8_t kind;           /* enum OpKind */
    uint8_t depth;          /* indices into nested tuples after the position */
    uint16_t position;      /* argument position */
    uint16_t sub[LP_MAX_DEPTH];
    uint32_t dtype;         /* DLPack code | bits << 8 | lanes << 16 the tensor must have; 0: any */
    int64_t align;          /* pointer alignment to check; scratch alignment */
    int64_t multiple_of;    /* an int's promised divisor; OP_TILE_ARRAY: the index type's largest value */
    int64_t size;           /* scratch bytes per block; Numba itemsize; OP_TILE_ARRAY: the index type's lowest */
    int ndim;               /* Numba or cuTile array rank */
    char layout;            /* Numba layout: 'C', 'F' or 'A' */
    int flags;              /* OP_CONST: 1 = value not recorded; OP_SCRATCH: 1 = zero-fill */
    Slot *slots;            /* nslots slots (owned) */
    Py_ssize_t nslots;
    PyObject *obj;          /* OP_CONST: the value; OP_EXPAND: the converter */
    PyObject *arg;          /* OP_EXPAND: the Arg, passed to the converter */
    /* OP_TILE_ARRAY: 5 words per dimension (extent divisor, extent, stride divisor, stride, lowest
     * stride; LP_NONE: no promise), owned; flags 1: no two indices may reach one element */
    int64_t *dims;
    /* OP_WARP_ARRAY: ndim the array's rank, size its scalar's bytes, flags the element type's own
     * dimensions (0 a scalar, 1 a vector, 2 a matrix), dims their extents (owned) */
} Op;

/* A kernel's launch plan and the Python objects it calls back. What every launch reads comes
 * first, what only a new entry, a fallback or an unusual argument reads after it: a launch starts
 * with the caches cold (the last driver call evicted them), and each line it touches costs. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Op *ops;
    Py_ssize_t nops;
    uint32_t *offsets;          /* parameter offsets, in parameter order */
    Py_ssize_t nparams;
    Py_ssize_t buffer_size;
    Py_ssize_t nargs_min, nargs_max;
    int fixed_block[3];         /* 0: the launch chooses */
    int shared_default;
    int scale[3];               /* grid multiplier per dimension */
    int scaled;                 /* some scale is not 1 (else a launch skips the multiplication) */
    /* the largest grid per dimension: the device's, or the plan's max_grid where lower (cuTile's
     * 2**24 - 1); above it the Python executor refuses the launch */
    unsigned int max_grid[3];
    int cluster[3];             /* 0: none */
    int spread, cooperative, pdl, oversized;
    /* 1 where the entry read says the driver shows this process one device: the current device is
     * then 0 without asking (launcher.c's current_device says why that is what asking gives) */
    int sole_device;
    /* the driver's current-device query, from the first entry that gives it; NULL: get_device */
    CtxGetDeviceFn ctx_get_device;
    /* the last entry read, the device it is for, and what it says (read under the GIL, copied
     * before it is released); kept, not looked up again, while launches stay on that device:
     * the loader's EntryTable calls forget() on every change */
    PyObject *entry;
    int entry_device;
    CUfunction function;
    long max_threads, shared_limit;
    LaunchFn launch;
    LaunchExFn launch_ex;
    PyObject *get_stream;       /* (device) -> int, or NULL: DLPack's current_work_stream */
    const DLPackExchangeAPI *api;
    PyObject *tensor_types;     /* tuple: the tensor classes read through DLPack (torch.Tensor, Parameter) */
    /* launch hooks (NULL: none): the dict of the object holding them, their names, and the
     * ``calls`` lists of the hook chains its class holds (None where the class holds none); a
     * set hook sends the launch to Python */
    PyObject *hooks_dict, *hook_names, *hook_calls;
    /* read only by a new entry, a fallback or an unusual argument */
    PyObject *entries;          /* the loader's EntryTable: device -> entry tuple */
    PyObject *entry_fn;         /* loader.entry(device) */
    PyObject *new_entry;        /* (device) -> None, when the launcher reads an entry it has not read */
    PyObject *python_launch;    /* the Python executor's launch: every fallback goes there */
    PyObject *get_device;       /* () -> int */
    PyObject *scratch_fn;       /* (nbytes, align, device, stream, zero) -> (owner, address) */
    PyObject *same_value;       /* (a, b) -> bool */
    PyObject *coresident;       /* (device, threads, shared) -> int */
    PyObject *ctx;              /* the kernel's checks context, for converters */
    PyObject *name;             /* "kernel 'name'": what LAUNCHPAD_NO_FALLBACK's error names */
    unsigned long long fallbacks;  /* calls handed to the Python executor (Launcher.fallbacks) */
    PyObject *weakreflist;
} Launcher;

extern PyTypeObject Launcher_Type;
extern PyTypeObject Configured_Type;
extern PyTypeObject Bound_Type;
extern PyTypeObject Dispatcher_Type;
extern PyTypeObject Replay_Type;

/* One launch's state: everything read from the entry and the arguments. */
typedef struct {
    Launcher *self;
    int device;
    PyObject *entry;            /* strong: keeps the module loaded until the launch returns */
    CUfunction function;
    long max_threads, shared_limit;
    LaunchFn launch;
    LaunchExFn launch_ex;
    unsigned int grid[3], block[3];
    unsigned int shared_mem;
    void *stream;
    char *buffer;
    PyObject *keep[8];          /* scratch owners, held until the driver has the arguments */
    int nkeep;
} Launch;

/* Outcome of a step: done, or the call goes to the Python executor. */
enum { LP_OK = 0, LP_FALLBACK = 1 };

/* values.c: one operation's argument into the buffer (LP_OK or LP_FALLBACK; never raises). */
int lp_run_op(Launch *L, const Op *op, PyObject *const *args, Py_ssize_t nargs);
/* tensors.c: a torch tensor read from its fields (torch_fields.c) or through the DLPack API (LP_OK and
 * *out filled, or LP_FALLBACK). */
int lp_read_tensor(const DLPackExchangeAPI *api, PyObject *tensor_types, PyObject *obj, DLTensor *out);
/* torch_fields.c: a plain torch tensor read from torch's objects at the offsets set by set_torch_fields:
 * LP_OK and *out filled as the DLPack export fills it (shape and strides too; the offset folded into
 * data), or LP_FALLBACK (no exception set) for anything it does not take, which the caller reads
 * through the exchange API. The pointer form leaves shape and strides NULL and takes any rank. */
int lp_torch_tensor(PyObject *obj, DLTensor *out);
int lp_torch_pointer(PyObject *obj, DLTensor *out);
/* torch_fields.c: its module functions (module.c lists them) */
PyObject *lp_set_torch_fields(PyObject *module, PyObject *arg);
PyObject *lp_torch_tensor_py(PyObject *module, PyObject *args);
PyObject *lp_dlpack_tensor(PyObject *module, PyObject *args);
/* tensors.c: a tensor argument's address, dtype word and device (-1: the CPU): torch_fields.c's read
 * where it takes the tensor, else the exchange API's (types not in tensor_types: LP_FALLBACK). */
int lp_read_pointer(const DLPackExchangeAPI *api, PyObject *tensor_types, PyObject *obj, uint64_t *address,
                    uint32_t *dtype, int *device);
/* tensors.c: whether a tensor is on the device (-1: the CPU, where CPU tests launch). */
int lp_on_device(const DLTensor *t, int device);
/* A tensor's dtype as one word: the DLPack code | bits << 8 | lanes << 16 (what a plan's dtype is). */
static inline uint32_t lp_dtype_word(const DLTensor *t) {
    return (uint32_t)t->dtype.code | (uint32_t)t->dtype.bits << 8 | (uint32_t)t->dtype.lanes << 16;
}

/* Whether ``v`` is a multiple of ``d`` (not 0), as ``v % d == 0`` says. A plan's alignments and
 * divisibilities are nearly always powers of two (Triton's 16, a dtype's size, cuTile's usual
 * divisors), for which a mask says it without a 64-bit division: 10 to 90 cycles each, three in a
 * Triton launch of two pointers and a size. Any other divisor divides. Unsigned arithmetic: u - 1
 * never overflows (d = INT64_MIN is 2**63). */
static inline int lp_multiple_u(uint64_t v, uint64_t d) { return (d & (d - 1)) == 0 ? (v & (d - 1)) == 0 : v % d == 0; }
static inline int lp_multiple_s(int64_t v, int64_t d) {
    uint64_t u = (uint64_t)d;
    return (u & (u - 1)) == 0 ? ((uint64_t)v & (u - 1)) == 0 : v % d == 0;
}
/* OP_TILE_ARRAY (tile.c, called by values.c only): LP_OK, or LP_FALLBACK for the Python executor to
 * decide. */
int lp_run_tile_array(Launch *L, const Op *op, PyObject *value);
/* OP_WARP_ARRAY (tile.c, called by values.c only): LP_OK, or LP_FALLBACK for the Python executor. */
int lp_run_warp_array(Launch *L, const Op *op, PyObject *value);
/* values.c: a scalar into a slot's bytes at ``at`` as a launch packs it (LP_OK or LP_FALLBACK;
 * never raises); pointer and bytes slots are not scalars (LP_FALLBACK). */
int lp_pack_scalar(char *at, const Slot *slot, PyObject *obj, int64_t multiple_of);
/* An int's value where it has one digit (|v| < 2**30, every grid, block, size and count a launch
 * sees), read inline: 1 and *out, else 0 (an int of more digits) for the caller's general read.
 * ``obj`` must be an int. */
static inline int lp_compact_int(PyObject *obj, long long *out) {
#if PY_VERSION_HEX >= 0x030C0000 && !defined(Py_LIMITED_API)
    if (PyUnstable_Long_IsCompact((PyLongObject *)obj)) {
        *out = (long long)PyUnstable_Long_CompactValue((PyLongObject *)obj);
        return 1;
    }
#elif !defined(Py_LIMITED_API)
    /* 3.10 and 3.11 (longintrepr.h, which Python.h includes): the size is the signed digit count;
     * a zero's one allocated digit may be unset, so zero is read from its size alone */
    Py_ssize_t size = Py_SIZE(obj);
    if (size >= -1 && size <= 1) {
        *out = size == 0 ? 0 : (long long)size * (long long)((PyLongObject *)obj)->ob_digit[0];
        return 1;
    }
#else
    (void)obj, (void)out;
#endif
    return 0;
}

/* values.c: a Python int in [lo, hi] (exact int only; bools refused). lp_small_int reads one of one
 * digit inline and calls lp_long_in_range for the rest. */
int lp_long_in_range(PyObject *obj, long lo, long hi, long *out);
static inline int lp_small_int(PyObject *obj, long lo, long hi, long *out) {
    long long v;
    if (!PyLong_CheckExact(obj)) return LP_FALLBACK;
    if (!lp_compact_int(obj, &v)) return lp_long_in_range(obj, lo, hi, out);
    if (v < lo || v > hi) return LP_FALLBACK;
    *out = (long)v;
    return LP_OK;
}

/* launcher.c: torch's current stream on ``device``: ``get_stream(device)`` where given (tests), else
 * the DLPack exchange API's current_work_stream (a CUDA device only). LP_OK and *out, or
 * LP_FALLBACK; never raises. */
int lp_current_stream(PyObject *get_stream, const DLPackExchangeAPI *api, int device, void **out);
/* launcher.c: launch with grid, block and args already split out; a new reference or NULL. */
/* launcher_build.c: building a Launcher from its plan, and its lifetime */
PyObject *lp_launcher_new(PyTypeObject *type, PyObject *args, PyObject *kwargs);
int lp_launcher_traverse(Launcher *self, visitproc visit, void *arg);
int lp_launcher_clear(Launcher *self);
void lp_launcher_dealloc(Launcher *self);
/* launcher.c: the Launcher's vectorcall; configured.c: Launcher.configure */
PyObject *lp_launcher_vectorcall(PyObject *o, PyObject *const *args, size_t nargsf, PyObject *kwnames);
PyObject *lp_configure(Launcher *self, PyObject *args);

PyObject *lp_launch(Launcher *self, PyObject *grid, PyObject *block, PyObject *const *args, Py_ssize_t nargs,
                    PyObject *stream, PyObject *shared_mem);
/* launcher.c: hand a call to the Python executor (kw names and values follow the positional ones);
 * counts it in the Launcher's ``fallbacks`` (the fallback path only: nothing on the fast path). */
PyObject *lp_fallback(Launcher *self, PyObject *grid, PyObject *block, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *stream, PyObject *shared_mem);

/* module.c: a tuple of ``obj``'s attributes named in ``fields`` (NULL-terminated), in that order, which
 * the caller parses as it parsed a positional tuple; NULL and a TypeError naming the layout and the
 * field where one is missing. How the build-time layouts (launchpad/launch/layouts.py, the loader's
 * Entry) are read: by name, never by position. Each list below is what its reader reads, exported as
 * _claunch.LAYOUTS and compared with the Python NamedTuples by tests/test_layouts.py. */
PyObject *lp_named(PyObject *obj, const char *const *fields, const char *layout);
extern const char *const LP_SLOT_FIELDS[], *const LP_OP_FIELDS[], *const LP_HOOK_FIELDS[], *const LP_PLAN_FIELDS[],
    *const LP_LAUNCHER_FIELDS[], *const LP_ENTRY_FIELDS[], *const LP_TORCH_FIELDS_FIELDS[];
extern const char *const LP_REPLAY_USE_FIELDS[], *const LP_REPLAY_INPUT_FIELDS[], *const LP_REPLAY_OUTPUT_FIELDS[],
    *const LP_DEVICE_TARGET_FIELDS[], *const LP_KERNEL_TARGET_FIELDS[], *const LP_COPY_TARGET_FIELDS[],
    *const LP_GRAPH_ENTRY_FIELDS[], *const LP_RING_FIELDS[], *const LP_STAGED_FIELDS[], *const LP_REPLAY_FIELDS[];
/* The fields of LP_ENTRY_FIELDS, in its order (launcher.c reads them; bound.c the address and launch). */
enum { EN_MAX_THREADS, EN_SHARED_LIMIT, EN_ADDRESS, EN_LAUNCH, EN_LAUNCH_EX, EN_CTX_GET_DEVICE, EN_VISIBLE_DEVICES };

/* module.c: what a fallback returns: ``result`` as it is, unless LAUNCHPAD_NO_FALLBACK is set and the
 * Python side completed the call (``result`` not NULL: a silent slow path), where it is dropped and a
 * LaunchpadError naming ``what`` (a str: the kernel or sequence) raised. Called on fallback paths only. */
PyObject *lp_fell_back(PyObject *result, PyObject *what);

/* Compiled with -DLP_PROFILE (LAUNCHPAD_CFLAGS), lp_launch accumulates the nanoseconds of each of
 * its steps, which _claunch._profile() returns and resets: how benchmarks/breakdown.py finds where
 * a launch's time goes. Without it, LP_MARK compiles to nothing. */
#ifdef LP_PROFILE
#define LP_STEPS 10
extern unsigned long long lp_profile_ns[LP_STEPS], lp_profile_calls;
unsigned long long lp_now_ns(void);
#define LP_MARK(step) (lp_profile_ns[step] += lp_now_ns())
#define LP_UNMARK(step) (lp_profile_ns[step] -= lp_now_ns())
#else
#define LP_MARK(step) ((void)0)
#define LP_UNMARK(step) ((void)0)
#endif

#endif
