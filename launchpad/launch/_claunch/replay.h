/* The Replay type's layout, shared by replay.c (a replay) and replay_new.c (its construction). */
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
typedef CUresult (*SyncFn)(void);  /* cuCtxSynchronize */

enum { T_DEVICE, T_KERNEL, T_MEMCPY, T_MEMSET };  /* as launchpad/sequences/updates.py numbers them */
enum { S_LAUNCHES, S_BROKEN };                     /* the words of Sequence._state */

typedef struct {
    uint32_t target, offset;
    Slot slot;
    int64_t delta, align, multiple_of;
} Use;

typedef struct {
    int kind;
    void *handle;       /* the graph node; T_DEVICE: the device node */
    char *blob;         /* host targets: the block or struct the driver is handed (a bytearray in keep) */
    Py_ssize_t size;    /* bytes a use may reach */
    void *ctx;
    NodeParams params;  /* T_KERNEL */
} Target;

typedef struct {
    PyObject *name;
    int is_tensor;
    uint32_t dtype;
    int ndim;
    int64_t *shape, *strides;  /* 2 * ndim, owned */
    Use *uses;
    Py_ssize_t nuses;
} Input;

typedef struct {
    PyObject *allocate;  /* () -> a tensor of new memory */
    Use *uses;
    Py_ssize_t nuses;
} Output;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Input *inputs;
    Py_ssize_t ninputs;
    Target *targets;
    Py_ssize_t ntargets;
    Output *outputs;
    Py_ssize_t noutputs;
    void *exec;
    int device;
    SetParamsFn set_params;
    GraphLaunchFn graph_launch;
    SetCopyFn set_memcpy, set_memset;
    SyncFn sync;
    CtxGetDeviceFn ctx_get_device;
    uint64_t *state;        /* Sequence._state */
    uint64_t *ring;         /* [consumed, 0, (count, capacity entries) x slots], or NULL: no device targets */
    uint64_t slots, capacity;
    PyObject *current;      /* the sequence's list of current values */
    PyObject *fallback;     /* the Python replay: every refusal and everything not taken here */
    PyObject *build;        /* (fresh outputs) -> result; NULL: return the one output (or None) */
    PyObject *get_stream;   /* (device) -> int, or NULL: DLPack's current_work_stream (tests give one) */
    PyObject *lock;         /* the sequence's threading.Lock, shared with the Python replay */
    PyObject *keep;         /* what the targets' blobs live in */
    PyObject *tensor_types;
    const DLPackExchangeAPI *api;
} Replay;

/* replay.c: a replay (the type's vectorcall). */
PyObject *Replay_vectorcall(PyObject *o, PyObject *const *args, size_t nargsf, PyObject *kwnames);

#endif
