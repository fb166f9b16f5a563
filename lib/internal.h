/*
 * internal.h - what the framework (lib/) and the backends share.
 *
 * A backend is a table of operations (smm_backend_ops). The framework checks
 * every argument before a backend sees it, so a backend may assume:
 *   - sizes are >= 0 and m > 0, n > 0 (for mm), m > 0 (for quantize);
 *   - required pointers are non-NULL, lengths are 1 or the full dimension,
 *     leading dimensions are large enough where read, no output overlaps;
 *   - the floating-point environment is already the contract's on the
 *     calling thread (round to nearest even, no FTZ/DAZ); OpenMP worker
 *     threads must enter it themselves (smm_fpenv_enter / smm_fpenv_leave).
 * A backend must not write any output before it knows it will succeed
 * (allocate first, then compute).
 */
#ifndef SMM_INTERNAL_H
#define SMM_INTERNAL_H

#include "scaledmm.h"
#include <fenv.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#define SMM_INTERNAL __attribute__((visibility("hidden")))

/* One matrix multiplication. c_dtype == SMM_DTYPE_I32 means the raw
 * accumulators of smm_gemm_s8s8s32 (scale_a, scale_b, bias, azp all NULL);
 * otherwise the scaled epilogue of smm_scaled_mm. Exactly one of b and
 * b_packed is set; a b_packed reaching a backend was packed by that
 * backend in the format its packed_format op names (lib/check.c). */
typedef smm_scaled_mm_args smm_mm_problem;

/*
 * A packed B (smm_pack_b). The framework fills backend, n, k and alloc; the
 * backend's pack_b op fills the rest, with all of its data in the one
 * allocation `mem` (freed by smm_packed_b_destroy through `alloc`).
 */
struct smm_packed_b {
    smm_backend backend;      /* the backend that packed it */
    const char *format;       /* static; equal strings = same layout */
    int64_t n, k;
    smm_allocator alloc;      /* the creating context's allocator */
    void *mem;                /* the packed data (one allocation) */
    int device;               /* GPU backends: the device mem was allocated on */
    size_t bytes;             /* its size, for the overlap checks */
    const int8_t *rows;       /* B as dense N x K rows (ld K) inside mem, or NULL */
    const void *data;         /* the backend's layout inside mem */
    /* NULL: mem is freed through alloc. Else called instead to free mem
     * (GPU backends, whose mem is device memory). */
    void (*release)(struct smm_packed_b *pb);
};

/* Where memory lives, as a GPU runtime's pointer attributes tell it (the
 * pointer_kinds op of a GPU backend). */
typedef enum {
    SMM_PTR_HOST,          /* host memory the device cannot read at that address
                              (malloc, the stack; unknown to the runtime) */
    SMM_PTR_DEVICE,        /* device memory of the calling thread's current device */
    SMM_PTR_OTHER_DEVICE,  /* device memory of another device */
    SMM_PTR_MANAGED,       /* managed memory: the host and the device read it */
    SMM_PTR_REGISTERED     /* page-locked host memory, mapped for the device at
                              the same address (cudaHostRegister, cudaMallocHost) */
} smm_ptr_kind;

/* One pointer argument of a call, for the routing and its messages. */
typedef struct {
    const char *name;      /* as in the public header: "a", "scale_b", ... */
    const void *ptr;
    /* 0: ask the runtime where ptr lives. d + 1: ptr is device memory this
     * library allocated on device d (a GPU-packed B), known without asking. */
    int lib_device;
} smm_ptr_arg;

typedef enum { SMM_ROUTE_HOST, SMM_ROUTE_DEVICE, SMM_ROUTE_ERROR } smm_route;

/* lib/route.c: where a call whose n pointers have these kinds runs, on a
 * GPU context (gpu_context != 0: DEVICE or ERROR) or on an AUTO context
 * with a GPU (HOST, DEVICE or ERROR). On ERROR, msg (size bytes) says
 * which pointers and why; else msg is "". */
smm_route smm_route_decide(const smm_ptr_arg *args, const smm_ptr_kind *kinds, int n,
                           int gpu_context, char *msg, size_t size) SMM_INTERNAL;
/* The pointers a call reads or writes (non-NULL, of operands with at least
 * one element; a packed B's buffer always), as smm_route_decide takes them.
 * Return how many were written to out. */
#define SMM_MAX_PTR_ARGS 8
int smm_mm_pointers(const smm_mm_problem *p, int raw,
                    smm_ptr_arg out[SMM_MAX_PTR_ARGS]) SMM_INTERNAL;
int smm_quantize_pointers(const smm_quantize_args *q,
                          smm_ptr_arg out[SMM_MAX_PTR_ARGS]) SMM_INTERNAL;
int smm_linear_pointers(const smm_linear_args *l,
                        smm_ptr_arg out[SMM_MAX_PTR_ARGS]) SMM_INTERNAL;
int smm_epilogue_pointers(const smm_epilogue_args *e,
                          smm_ptr_arg out[SMM_MAX_PTR_ARGS]) SMM_INTERNAL;

typedef struct smm_backend_ops {
    smm_backend id;
    const char *name;
    /* Can this backend run on this machine? Called once per process. Sets
     * *reason to a static string either way. */
    int (*probe)(const char **reason);
    /* Optional: per-context setup/teardown (ctx->backend_data). */
    smm_status (*init)(smm_context *ctx);
    void (*fini)(smm_context *ctx);
    smm_status (*mm)(smm_context *ctx, const smm_mm_problem *p);
    smm_status (*quantize)(smm_context *ctx, const smm_quantize_args *q);
    /* Optional: smm_linear's two halves in one (q's outputs are p's a,
     * scale_a and azp; n > 0), fused as the backend can; NULL: the
     * framework calls quantize, then mm. Arguments are validated. */
    smm_status (*linear)(smm_context *ctx, const smm_quantize_args *q, const smm_mm_problem *p);
    /* Optional: smm_scaled_epilogue (m > 0, n > 0; colsum_b set exactly
     * when azp is, azp_len 0 without azp). Arguments are validated. NULL:
     * the call is SMM_ERR_UNSUPPORTED on this backend. */
    smm_status (*epilogue)(smm_context *ctx, const smm_epilogue_args *e);
    /* Optional (NULL: no packed B). The format a context packs into and can
     * compute from (a static string starting with the backend's name). */
    const char *(*packed_format)(const smm_context *ctx);
    /* Optional: packs a validated B (n, k >= 0 in pb; b non-NULL when
     * n * k > 0; ldb >= k when n > 1) into pb, allocating pb->mem through
     * ctx. On error nothing is left allocated. */
    smm_status (*pack_b)(smm_context *ctx, const int8_t *b, int64_t ldb, smm_packed_b *pb);

    /* GPU backends only (NULL on host backends, whose memory the framework
     * handles itself). Each returns SMM_OK or SMM_ERR_DEVICE /
     * SMM_ERR_NO_MEMORY with the message set (ctx->verror). Arguments are validated. */
    smm_status (*dev_malloc)(smm_context *ctx, size_t bytes, void **ptr);
    smm_status (*dev_free)(smm_context *ctx, void *ptr);
    smm_status (*dev_memcpy)(smm_context *ctx, void *dst, const void *src, size_t bytes,
                             smm_memcpy_kind kind);
    smm_status (*set_stream)(smm_context *ctx, void *stream);
    smm_status (*synchronize)(smm_context *ctx);
    /* Where each of the n pointers of one call lives, into kinds[0..n)
     * (any values; never fails: memory the runtime does not know is
     * SMM_PTR_HOST). The current device is asked once per call. Thread-safe. */
    void (*pointer_kinds)(const smm_ptr_arg *args, int n, smm_ptr_kind *kinds);
} smm_backend_ops;

/*
 * GPU backends live in their own shared object (lib/rocm/, built with
 * --with-rocm or --with-cuda) so that libscaledmm links no GPU runtime.
 * lib/gpu_loader.c dlopens "libscaledmm-rocm.so" / "libscaledmm-cuda.so"
 * (from $SMM_GPU_PLUGIN_DIR when set, else the install's pkglibdir) and
 * calls its one exported symbol, SMM_GPU_PLUGIN_ENTRY:
 *
 *   const smm_backend_ops *smm_gpu_plugin_entry(int abi, const char **reason);
 *
 * abi is SMM_GPU_PLUGIN_ABI; a plugin built for another ABI returns NULL.
 * The entry loads the vendor runtime and counts devices; it returns the
 * ops table when at least one device is usable, else NULL with *reason
 * (a static string) saying why. It prints nothing. The plugin cannot call
 * the framework's hidden functions: it records messages through ctx->verror and
 * allocates host memory through ctx->alloc.
 */
#define SMM_GPU_PLUGIN_ABI 4
#define SMM_GPU_PLUGIN_ENTRY "smm_gpu_plugin_entry"
typedef const smm_backend_ops *(*smm_gpu_plugin_entry_fn)(int abi, const char **reason);

struct smm_context {
    smm_backend backend;
    const smm_backend_ops *ops;
    int num_threads;          /* 0: omp_get_max_threads() */
    smm_allocator alloc;
    void *backend_data;
    void *stream;             /* GPU contexts: the stream work is queued on */
    /* An AUTO context (routed != 0) runs each call where its data lives
     * (lib/route.c): on itself (the host backend) or on `device`, a
     * context of the GPU backend found (NULL: none), which shares its
     * error_id. */
    int routed;
    smm_context *device;
    /* Identifies the context's messages (lib/context.c keeps them per
     * thread); verror records one (smm_verror: a plugin cannot call the
     * framework's hidden functions, so it calls this). */
    uint64_t error_id;
    smm_status (*verror)(smm_context *ctx, smm_status status, const char *fmt, va_list ap);
};

/* Backends (each defined in its own file). */
extern const smm_backend_ops smm_reference_ops SMM_INTERNAL;  /* lib/reference.c */
extern const smm_backend_ops smm_cpu_ops SMM_INTERNAL;        /* lib/cpu/cpu_backend.c */

/* Memory through the context's allocator. size 0 returns a valid pointer. */
void *smm_host_alloc(smm_context *ctx, size_t size, size_t alignment) SMM_INTERNAL;
void smm_host_free(smm_context *ctx, void *p) SMM_INTERNAL;

/* Threads a CPU backend should use for this call (>= 1). */
int smm_threads(const smm_context *ctx) SMM_INTERNAL;

/* Records a printf-style message as the calling thread's last error on ctx
 * (smm_context_last_error); returns status. */
smm_status smm_set_error(smm_context *ctx, smm_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4))) SMM_INTERNAL;
smm_status smm_verror(smm_context *ctx, smm_status status, const char *fmt, va_list ap)
    SMM_INTERNAL;
/* Clears the calling thread's message on ctx; whether it holds one. */
void smm_clear_error(const smm_context *ctx) SMM_INTERNAL;
int smm_has_error(const smm_context *ctx) SMM_INTERNAL;

/* Floating-point environment of the contract (round to nearest even, no
 * flush-to-zero, no denormals-are-zero, exceptions masked) for the calling
 * thread; leave restores what enter saved. */
typedef struct {
    unsigned int mxcsr;   /* x86: the caller's MXCSR */
    fenv_t fe;            /* elsewhere: the caller's whole environment */
} smm_fpenv;
void smm_fpenv_enter(smm_fpenv *env) SMM_INTERNAL;
void smm_fpenv_leave(const smm_fpenv *env) SMM_INTERNAL;

/* Argument checks (lib/check.c). Return SMM_OK or the error, with a message
 * set on ctx, which names `who` (NULL: the public function the problem came
 * from). raw != 0 checks an smm_gemm_s8s8s32 problem (c_dtype I32, no
 * scales), raw == 0 an smm_scaled_mm one. */
smm_status smm_check_mm(smm_context *ctx, const smm_mm_problem *p, int raw,
                        const char *who) SMM_INTERNAL;
/* A stand-in address for working memory not yet allocated: the checks
 * take it as a valid, aligned pointer whose bytes overlap nothing. */
extern const unsigned char smm_workspace_mark[64] SMM_INTERNAL;
#define SMM_WORKSPACE ((void *)(uintptr_t)smm_workspace_mark)
/* The public function a problem came from ("smm_scaled_mm", ...), for messages. */
const char *smm_mm_who(const smm_mm_problem *p, int raw) SMM_INTERNAL;
smm_status smm_check_quantize(smm_context *ctx, const smm_quantize_args *q,
                              const char *who) SMM_INTERNAL;
/* smm_linear: both halves (q, p: the arguments of its two calls, with q's
 * outputs pointing at the caller's buffers or at SMM_WORKSPACE, standing
 * for the call's working memory, allocated once the checks pass) and the
 * overlaps between them; l as the caller gave it. */
smm_status smm_check_linear(smm_context *ctx, const smm_linear_args *l,
                            const smm_quantize_args *q, const smm_mm_problem *p) SMM_INTERNAL;
/* smm_scaled_epilogue's arguments. */
smm_status smm_check_epilogue(smm_context *ctx, const smm_epilogue_args *e) SMM_INTERNAL;
/* smm_pack_b's B: sizes, pointer, ldb, footprint. */
smm_status smm_check_pack_b(smm_context *ctx, int64_t n, int64_t k, const int8_t *b,
                            int64_t ldb) SMM_INTERNAL;

/* CPU features (lib/probe.c), probed once. */
typedef struct smm_cpu_info {
    int x86;
    int sse2, ssse3, sse41, sse42, avx, avx2, fma, f16c;
    int avx512f, avx512bw, avx512vl, avx512dq, avx512_vnni, avx512_bf16, avx_vnni;
    int amx_tile, amx_int8;
    int os_ymm, os_zmm;      /* XGETBV: OS saves YMM / opmask+ZMM state */
    int os_amx;              /* XGETBV: OS manages the AMX tile state */
    char vendor[13];
    char brand[49];
    char features[256];      /* space-separated, usable features only */
} smm_cpu_info;
const smm_cpu_info *smm_cpu_info_get(void) SMM_INTERNAL;

/* The registry (lib/dispatch.c): the ops of a concrete backend, or NULL when
 * the backend is not compiled in. */
const smm_backend_ops *smm_backend_ops_get(smm_backend b) SMM_INTERNAL;

#endif
