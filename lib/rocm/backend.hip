/*
 * backend.hip - the GPU backend's glue: the plugin entry point (device
 * probe), the operations table, device memory, streams and errors. The
 * kernels are in gemm.hip, quantize.hip and epilogue.hip (launchers in
 * kernels.h).
 *
 * Built twice from this one source: for AMD (libscaledmm-rocm.so, HIP) and
 * for NVIDIA (libscaledmm-cuda.so, nvcc -x cu); gpu_compat.h maps the
 * runtime names. The framework (lib/gpu_loader.c) calls
 * smm_gpu_plugin_entry once per process; every other function here is
 * reached through the table it returns, after lib/check.c has validated
 * the arguments. Work is queued on ctx->stream (NULL: the runtime's
 * default stream) of the calling thread's current device. Every runtime
 * error becomes SMM_ERR_DEVICE (SMM_ERR_NO_MEMORY for a failed allocation)
 * with the runtime's message as the context's last error. This plugin
 * cannot call the framework's hidden functions: it records messages through
 * ctx->verror.
 */
#include "gpu_compat.h"
#include "kernels.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#ifndef SMM_GPU_BACKEND_NAME
#error "SMM_GPU_BACKEND_NAME must be defined (\"rocm\" or \"cuda\")"
#endif

#if defined(SMM_GPU_AMD)
#define RT "hip"
#define BACKEND_ID SMM_BACKEND_ROCM
#else
#define RT "cuda"
#define BACKEND_ID SMM_BACKEND_CUDA
#endif

#define SMM_PLUGIN_EXPORT extern "C" __attribute__((visibility("default")))

/* The one format of this backend's packed B: a dense device copy. */
static const char packed_format_name[] = SMM_GPU_BACKEND_NAME " int8 rows (device copy)";

static smm_status set_error(smm_context *ctx, smm_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static smm_status set_error(smm_context *ctx, smm_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ctx->verror(ctx, st, fmt, ap);
    va_end(ap);
    return st;
}

/* A runtime error as SMM_ERR_DEVICE (or SMM_ERR_NO_MEMORY), with the call
 * and the runtime's message; clears the runtime's non-sticky error state. */
static smm_status rt_error(smm_context *ctx, gpuError_t e, const char *call)
{
    (void)gpuGetLastError();
    return set_error(ctx, e == gpuErrorMemoryAllocation ? SMM_ERR_NO_MEMORY : SMM_ERR_DEVICE,
                     SMM_GPU_BACKEND_NAME " backend: %s: %s (error %d)", call,
                     gpuGetErrorString(e), (int)e);
}

static gpuStream_t stream_of(const smm_context *ctx)
{
    return (gpuStream_t)ctx->stream;
}

/* ------------------------------------------------------------------ */
/* Probe                                                               */
/* ------------------------------------------------------------------ */

static int probed_ok;
static char probed_reason[256];

/* Counts the devices; fills probed_ok / probed_reason. Prints nothing. */
static void probe_devices(void)
{
    int n = 0;   /* CUDA without a driver returns an error and leaves it */
    gpuError_t e = gpuGetDeviceCount(&n);
    if (e != gpuSuccess) {
        (void)gpuGetLastError();
        snprintf(probed_reason, sizeof probed_reason, RT "GetDeviceCount: %s",
                 gpuGetErrorString(e));
        return;
    }
    if (n <= 0) {
        snprintf(probed_reason, sizeof probed_reason, "no device");
        return;
    }
    int dev = 0;
    gpuDeviceProp_t prop;
    if (gpuGetDevice(&dev) != gpuSuccess || gpuGetDeviceProperties(&prop, dev) != gpuSuccess) {
        (void)gpuGetLastError();
        snprintf(probed_reason, sizeof probed_reason, "%d device%s", n, n > 1 ? "s" : "");
    } else {
#if defined(SMM_GPU_AMD)
        snprintf(probed_reason, sizeof probed_reason, "%d device%s; device %d: %s (%s)", n,
                 n > 1 ? "s" : "", dev, prop.name, prop.gcnArchName);
#else
        snprintf(probed_reason, sizeof probed_reason, "%d device%s; device %d: %s (sm_%d%d)", n,
                 n > 1 ? "s" : "", dev, prop.name, prop.major, prop.minor);
#endif
    }
    probed_ok = 1;
}

static int gpu_probe(const char **reason)
{
    if (reason)
        *reason = probed_reason;
    return probed_ok;
}

/* ------------------------------------------------------------------ */
/* Contexts and streams                                                */
/* ------------------------------------------------------------------ */

static smm_status gpu_init(smm_context *ctx)
{
    ctx->stream = NULL;   /* the runtime's default stream */
    return SMM_OK;
}

static smm_status gpu_set_stream(smm_context *ctx, void *stream)
{
    ctx->stream = stream;
    return SMM_OK;
}

static smm_status gpu_synchronize(smm_context *ctx)
{
    gpuError_t e = gpuStreamSynchronize(stream_of(ctx));
    return e == gpuSuccess ? SMM_OK : rt_error(ctx, e, RT "StreamSynchronize");
}

/* ------------------------------------------------------------------ */
/* Device memory                                                       */
/* ------------------------------------------------------------------ */

/* Where p's memory lives, from the runtime's pointer attributes (one
 * gpuPointerGetAttributes: about 85 ns per pointer on an H200 with
 * CUDA 13), for a thread whose current device is dev. Memory the runtime
 * does not know (an error, or CUDA's "unregistered") is host memory;
 * registered host memory counts only when the device sees it at the same
 * address. */
static smm_ptr_kind gpu_pointer_kind(const void *p, int dev)
{
    gpuPointerAttributes_t a;
    memset(&a, 0, sizeof a);
    if (gpuPointerGetAttributes(&a, p) != gpuSuccess) {
        (void)gpuGetLastError();
        return SMM_PTR_HOST;
    }
    if (SMM_GPU_PTR_MANAGED(a))
        return SMM_PTR_MANAGED;
    if (SMM_GPU_PTR_TYPE(a) == gpuMemoryTypeDevice)
        return a.device == dev ? SMM_PTR_DEVICE : SMM_PTR_OTHER_DEVICE;
    if (SMM_GPU_PTR_TYPE(a) == gpuMemoryTypeHost && a.devicePointer == p)
        return SMM_PTR_REGISTERED;
    return SMM_PTR_HOST;
}

/* The kinds of one call's pointers: the current device asked once, a
 * packed B this library allocated (lib_device) not asked at all. */
static void gpu_pointer_kinds(const smm_ptr_arg *args, int n, smm_ptr_kind *kinds)
{
    int dev = -1;
    if (gpuGetDevice(&dev) != gpuSuccess) {
        (void)gpuGetLastError();
        dev = -1;
    }
    for (int i = 0; i < n; i++) {
        if (args[i].lib_device > 0)
            kinds[i] = args[i].lib_device - 1 == dev ? SMM_PTR_DEVICE : SMM_PTR_OTHER_DEVICE;
        else
            kinds[i] = gpu_pointer_kind(args[i].ptr, dev);
    }
}

static smm_status gpu_dev_malloc(smm_context *ctx, size_t bytes, void **ptr)
{
    void *p = NULL;
    /* Zero bytes still give a unique pointer. */
    gpuError_t e = gpuMalloc(&p, bytes ? bytes : 1);
    if (e != gpuSuccess) {
        *ptr = NULL;
        (void)gpuGetLastError();
        return set_error(ctx, e == gpuErrorMemoryAllocation ? SMM_ERR_NO_MEMORY : SMM_ERR_DEVICE,
                         SMM_GPU_BACKEND_NAME " backend: " RT "Malloc(%zu bytes): %s", bytes,
                         gpuGetErrorString(e));
    }
    *ptr = p;
    return SMM_OK;
}

static smm_status gpu_dev_free(smm_context *ctx, void *ptr)
{
    gpuError_t e = gpuFree(ptr);
    return e == gpuSuccess ? SMM_OK : rt_error(ctx, e, RT "Free");
}

static smm_status gpu_dev_memcpy(smm_context *ctx, void *dst, const void *src, size_t bytes,
                                 smm_memcpy_kind kind)
{
    gpuMemcpyKind k;
    switch (kind) {
    case SMM_MEMCPY_HOST_TO_DEVICE: k = gpuMemcpyHostToDevice; break;
    case SMM_MEMCPY_DEVICE_TO_HOST: k = gpuMemcpyDeviceToHost; break;
    case SMM_MEMCPY_DEVICE_TO_DEVICE: k = gpuMemcpyDeviceToDevice; break;
    default: k = gpuMemcpyHostToHost; break;
    }
    gpuStream_t s = stream_of(ctx);
    gpuError_t e = gpuMemcpyAsync(dst, src, bytes, k, s);
    if (e != gpuSuccess)
        return rt_error(ctx, e, RT "MemcpyAsync");
    /* A copy touching host memory returns once the host buffer may be
     * reused (to the device) or holds the data (to the host). */
    if (kind != SMM_MEMCPY_DEVICE_TO_DEVICE) {
        e = gpuStreamSynchronize(s);
        if (e != gpuSuccess)
            return rt_error(ctx, e, RT "StreamSynchronize (after " RT "MemcpyAsync)");
    }
    return SMM_OK;
}

/* ------------------------------------------------------------------ */
/* Packed B: a dense device copy of B's rows                            */
/* ------------------------------------------------------------------ */

static const char *gpu_packed_format(const smm_context *ctx)
{
    (void)ctx;
    return packed_format_name;
}

static void gpu_release_packed(smm_packed_b *pb)
{
    if (pb->mem)
        (void)gpuFree(pb->mem);   /* waits for work using it; nothing to report to */
    (void)gpuGetLastError();
    pb->mem = NULL;
}

static smm_status gpu_pack_b(smm_context *ctx, const int8_t *b, int64_t ldb, smm_packed_b *pb)
{
    size_t n = (size_t)pb->n, k = (size_t)pb->k;
    size_t bytes = n * k;   /* B's footprint was checked: no overflow */
    void *mem = NULL;
    smm_status st = gpu_dev_malloc(ctx, bytes, &mem);
    if (st != SMM_OK)
        return st;
    gpuStream_t s = stream_of(ctx);
    gpuError_t e = gpuSuccess;
    const char *call = RT "MemcpyAsync";
    if (bytes > 0) {
        if (n == 1 || (size_t)ldb == k) {
            e = gpuMemcpyAsync(mem, b, bytes, gpuMemcpyDeviceToDevice, s);
        } else {
            call = RT "Memcpy2DAsync";
            e = gpuMemcpy2DAsync(mem, k, b, (size_t)ldb, k, n, gpuMemcpyDeviceToDevice, s);
        }
    }
    /* The caller may free b as soon as this returns. */
    if (e == gpuSuccess) {
        call = RT "StreamSynchronize";
        e = gpuStreamSynchronize(s);
    }
    if (e != gpuSuccess) {
        st = rt_error(ctx, e, call);
        (void)gpuFree(mem);
        (void)gpuGetLastError();
        return st;
    }
    pb->mem = mem;
    pb->bytes = bytes ? bytes : 1;
    pb->rows = (const int8_t *)mem;
    pb->data = mem;
    pb->release = gpu_release_packed;
    /* gpuMalloc allocated on the current device; -1 (unknown) makes the
     * pointer checks ask the runtime instead. */
    int dev = -1;
    if (gpuGetDevice(&dev) != gpuSuccess) {
        (void)gpuGetLastError();
        dev = -1;
    }
    pb->device = dev;
    return SMM_OK;
}

/* ------------------------------------------------------------------ */
/* Computation                                                         */
/* ------------------------------------------------------------------ */

/* *out = *p with a packed B resolved to its rows: this backend's packed B
 * is B itself, dense (ldb = K), copied before gpu_pack_b returned and
 * written by no kernel. Returns whether B was packed (static). */
static bool unpacked(const smm_mm_problem *p, smm_mm_problem *out)
{
    *out = *p;
    if (!p->b_packed)
        return false;
    out->b = p->b_packed->rows;
    out->ldb = p->k;
    out->b_packed = NULL;
    return true;
}

static smm_status gpu_mm(smm_context *ctx, const smm_mm_problem *p)
{
    smm_mm_problem q;
    const bool b_static = unpacked(p, &q);
    gpuError_t e = smm_gpu_launch_mm(&q, b_static, stream_of(ctx));
    return e == gpuSuccess ? SMM_OK : rt_error(ctx, e, "matrix multiplication kernel launch");
}

static smm_status gpu_quantize(smm_context *ctx, const smm_quantize_args *q)
{
    gpuError_t e = smm_gpu_launch_quantize(q, stream_of(ctx));
    return e == gpuSuccess ? SMM_OK : rt_error(ctx, e, "quantization kernel launch");
}

static smm_status gpu_linear(smm_context *ctx, const smm_quantize_args *q,
                             const smm_mm_problem *p)
{
    smm_mm_problem r;
    const bool b_static = unpacked(p, &r);
    gpuError_t e = smm_gpu_launch_linear(q, &r, b_static, stream_of(ctx));
    return e == gpuSuccess ? SMM_OK : rt_error(ctx, e, "linear layer kernel launch");
}

static smm_status gpu_epilogue(smm_context *ctx, const smm_epilogue_args *a)
{
    gpuError_t e = smm_gpu_launch_epilogue(a, stream_of(ctx));
    return e == gpuSuccess ? SMM_OK : rt_error(ctx, e, "epilogue kernel launch");
}

/* ------------------------------------------------------------------ */
/* Entry point                                                         */
/* ------------------------------------------------------------------ */

static smm_backend_ops gpu_ops;

SMM_PLUGIN_EXPORT const smm_backend_ops *smm_gpu_plugin_entry(int abi, const char **reason)
{
    static const char *const wrong_abi =
        "plugin built for another version of libscaledmm (plugin ABI mismatch)";
    if (abi != SMM_GPU_PLUGIN_ABI) {
        if (reason)
            *reason = wrong_abi;
        return NULL;
    }
    static int probed;
    if (!probed) {   /* the loader calls this once, under its once-guard */
        probe_devices();
        probed = 1;
    }
    if (reason)
        *reason = probed_reason;
    if (!probed_ok)
        return NULL;
    memset(&gpu_ops, 0, sizeof gpu_ops);
    gpu_ops.id = BACKEND_ID;
    gpu_ops.name = SMM_GPU_BACKEND_NAME;
    gpu_ops.probe = gpu_probe;
    gpu_ops.init = gpu_init;
    gpu_ops.fini = NULL;
    gpu_ops.mm = gpu_mm;
    gpu_ops.quantize = gpu_quantize;
    gpu_ops.linear = gpu_linear;
    gpu_ops.epilogue = gpu_epilogue;
    gpu_ops.packed_format = gpu_packed_format;
    gpu_ops.pack_b = gpu_pack_b;
    gpu_ops.dev_malloc = gpu_dev_malloc;
    gpu_ops.dev_free = gpu_dev_free;
    gpu_ops.dev_memcpy = gpu_dev_memcpy;
    gpu_ops.set_stream = gpu_set_stream;
    gpu_ops.synchronize = gpu_synchronize;
    gpu_ops.pointer_kinds = gpu_pointer_kinds;
    return &gpu_ops;
}
