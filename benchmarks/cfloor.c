/* The floor of the launch benchmarks: a C loop calling cuLaunchKernel.
 *
 * Built at run time into a shared library and called through ctypes with a launch count, so
 * one call issues a whole batch of launches from C and the ctypes call itself is amortized.
 * The kernel is loaded from the same cubin the Python launchers use (cuModuleLoadData) and the
 * parameters are packed once: nothing is left per launch but the driver call.
 *
 * The driver is reached through dlopen("libcuda.so.1"), the library torch has already loaded,
 * rather than by linking -lcuda: that needs neither cuda.h nor a libcuda.so development link
 * on the machine, and a call through a function pointer costs what a call through the PLT does.
 * The few driver types are declared here with their ABI (handles are pointers, CUresult and
 * CUdevice are ints).
 */
#include <dlfcn.h>
#include <stdio.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;

static CUresult (*p_cuInit)(unsigned int);
static CUresult (*p_cuDeviceGet)(CUdevice *, int);
static CUresult (*p_cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
static CUresult (*p_cuCtxGetCurrent)(CUcontext *);
static CUresult (*p_cuCtxSetCurrent)(CUcontext);
static CUresult (*p_cuModuleLoadData)(CUmodule *, const void *);
static CUresult (*p_cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
static CUresult (*p_cuModuleUnload)(CUmodule);
static CUresult (*p_cuLaunchKernel)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                                    unsigned int, unsigned int, unsigned int, CUstream, void **, void **);

static char error_text[512];

const char *lp_error(void) { return error_text; }

#define LP_SYMBOL(lib, name)                                                                    \
    do {                                                                                        \
        *(void **)(&p_##name) = dlsym(lib, #name);                                              \
        if (!p_##name) {                                                                        \
            snprintf(error_text, sizeof error_text, "dlsym(%s) failed: %s", #name, dlerror()); \
            return -1;                                                                          \
        }                                                                                       \
    } while (0)

/* Find the driver entry points; make the device's primary context current if none is. */
int lp_init(int device) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        snprintf(error_text, sizeof error_text, "dlopen(libcuda.so.1) failed: %s", dlerror());
        return -1;
    }
    LP_SYMBOL(lib, cuInit);
    LP_SYMBOL(lib, cuDeviceGet);
    LP_SYMBOL(lib, cuDevicePrimaryCtxRetain);
    LP_SYMBOL(lib, cuCtxGetCurrent);
    LP_SYMBOL(lib, cuCtxSetCurrent);
    LP_SYMBOL(lib, cuModuleLoadData);
    LP_SYMBOL(lib, cuModuleGetFunction);
    LP_SYMBOL(lib, cuModuleUnload);
    LP_SYMBOL(lib, cuLaunchKernel);
    CUresult r = p_cuInit(0);
    if (r) return r;
    CUcontext ctx = 0;
    r = p_cuCtxGetCurrent(&ctx);
    if (r) return r;
    if (!ctx) {
        CUdevice dev;
        r = p_cuDeviceGet(&dev, device);
        if (r) return r;
        r = p_cuDevicePrimaryCtxRetain(&ctx, dev);
        if (r) return r;
        r = p_cuCtxSetCurrent(ctx);
    }
    return r;
}

int lp_load(const void *image, const char *name, void **module, void **function) {
    CUmodule m = 0;
    CUfunction f = 0;
    CUresult r = p_cuModuleLoadData(&m, image);
    if (r) return r;
    r = p_cuModuleGetFunction(&f, m, name);
    if (r) {
        p_cuModuleUnload(m);
        return r;
    }
    *module = m;
    *function = f;
    return 0;
}

/* `count` launches of one prepacked launch; stops at the first error and returns it. */
int lp_launch(void *function, long long count, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
              unsigned int by, unsigned int bz, unsigned int shared_mem, void *stream, void **params) {
    for (long long i = 0; i < count; ++i) {
        CUresult r = p_cuLaunchKernel((CUfunction)function, gx, gy, gz, bx, by, bz, shared_mem, (CUstream)stream,
                                      params, 0);
        if (r) return r;
    }
    return 0;
}
