/* The Replay type's layout, shared by replay.c (a replay) and replay_build.c (its construction from its tables). */
#ifndef LAUNCHPAD_REPLAY_H
#define LAUNCHPAD_REPLAY_H

#include "claunch.h"

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
typedef CUresult (*SetCopyFn)(void *exec, void *node, const void *params, void *ctx);
typedef CUresult (*GraphLaunchFn)(void *exec, void *stream);
typedef CUresult (*IsCapturingFn)(void *stream, int *status);  /* cuStreamIsCapturing; 0: not capturing */

enum { T_DEVICE, T_KERNEL, T_MEMCPY, T_MEMSET };  /* as launchpad/sequences/updates.py numbers them */
enum { S_LAUNCHES, S_BROKEN };                     /* the words of SequenceState.counters (state.py) */
enum { R_CONSUMED, R_FAILURE, R_FAILED_LAUNCH, R_HEADER };  /* the ring's header words (updates.py) */

/* Per-call memory on the C stack up to this many bytes (the common small sequence); beyond, one
 * PyMem_Malloc a call. */
enum { REPLAY_STACK_BYTES = 2048 };

typedef struct {
    uint32_t target, offset;
    int32_t entry;      /* its entry in every ring slot (a device target's use), or -1 */
    Slot slot;
    int64_t delta, align, multiple_of;
} Use;

typedef struct {
    void *handle;       /* the graph node; T_DEVICE: the device node */
    char *blob;         /* host targets: the block or struct the driver is handed (a bytearray in keep) */
    Py_ssize_t size;    /* bytes a use may reach */
    void *ctx;
    int kind;
    NodeParams params;  /* T_KERNEL */
} Target;

typedef struct {
    PyObject *name;
    int is_tensor;
    int python_only;    /* returned as a view a new value may misplace: the Python replay checks it */
    uint32_t dtype;
    int ndim;
    int64_t *shape, *strides;  /* 2 * ndim, owned */
    Py_ssize_t first, nuses;   /* its uses: Replay.uses[first, first + nuses) */
} Input;

typedef struct {
    PyObject *allocate;  /* () -> a tensor of new memory */
    PyObject *refill;    /* a batch's () -> tuple of new tensors, taken in turn on one stream; or NULL */
    PyObject *batch;     /* the tuple taken last (or NULL), */
    Py_ssize_t taken;    /* how many of it are taken, */
    void *stream;        /* and the stream it was allocated on */
    Py_ssize_t first, nuses;
} Output;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Input *inputs;
    Py_ssize_t ninputs, npositional;  /* positional argument i is input i for i < npositional */
    Output *outputs;
    Py_ssize_t noutputs;
    Use *uses;              /* every use: the inputs', in order, then the outputs' */
    Py_ssize_t nuses;
    uint32_t *entry_use;    /* per ring slot entry: its use */
    Py_ssize_t nentries;
    Target *targets;
    Py_ssize_t ntargets;
    void *exec;
    int device;
    int snapshot;           /* the result holds inputs: the current values are taken under the lock */
    SetParamsFn set_params;
    GraphLaunchFn graph_launch;
    SetCopyFn set_memcpy, set_memset;
    IsCapturingFn is_capturing;
    CtxGetDeviceFn ctx_get_device;
    uint64_t *state;        /* SequenceState.counters */
    uint64_t *staged;       /* SequenceState.words: the last word staged for each use, shared with Python */
    uint64_t *ring;         /* [consumed, failure, failed launch, (head, capacity entries) x slots], or NULL: none */
    uint64_t slots, capacity;
    size_t block_size;      /* one call's memory (see replay.c's Call) */
    PyObject *current;      /* the sequence's list of current values */
    PyObject *fallback;     /* the Python replay: every refusal and everything not taken here */
    PyObject *build;        /* (fresh outputs, current values or None) -> result; NULL: the one output (or None) */
    PyObject *launch;       /* () -> None launching the graph instead of cuGraphLaunch (torch's replay), or NULL */
    PyObject *get_stream;   /* (device) -> int, or NULL: DLPack's current_work_stream (tests give one) */
    PyObject *lock;         /* the sequence's threading.Lock, shared with the Python replay */
    PyObject *acquire, *release;  /* its methods, looked up once */
    PyObject *keep;         /* what the targets' blobs, the ring and the staged words live in */
    PyObject *tensor_types;
    const DLPackExchangeAPI *api;
    PyObject *name;         /* what LAUNCHPAD_NO_FALLBACK's error names */
    unsigned long long fallbacks;  /* calls the Python replay made instead (Replay.fallbacks) */
} Replay;

/* replay.c: a replay (the type's vectorcall). */
PyObject *Replay_vectorcall(PyObject *o, PyObject *const *args, size_t nargsf, PyObject *kwnames);
/* replay.c: the bytes one call's memory takes (set at construction). */
size_t lp_replay_block_size(const Replay *self);

#endif
