/*
 * api.c - the public entry points: check the arguments, enter the contract's
 * floating-point environment, hand the problem to the context's backend.
 */
#include "config.h"
#include "internal.h"

#include <inttypes.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

SMM_API const char *smm_version(void)
{
#define SMM_STR2(x) #x
#define SMM_STR(x) SMM_STR2(x)
    return SMM_STR(SMM_VERSION_MAJOR) "." SMM_STR(SMM_VERSION_MINOR) "." SMM_STR(SMM_VERSION_PATCH);
}

SMM_API int smm_contract_version(void)
{
    return SMM_CONTRACT_VERSION;
}

SMM_API const char *smm_strerror(smm_status status)
{
    switch (status) {
    case SMM_OK: return "success";
    case SMM_ERR_INVALID_ARG: return "invalid argument";
    case SMM_ERR_UNSUPPORTED: return "unsupported by this backend";
    case SMM_ERR_NO_MEMORY: return "out of memory";
    case SMM_ERR_OVERLAP: return "output overlaps an input";
    case SMM_ERR_DEVICE: return "device error";
    case SMM_ERR_NOT_AVAILABLE: return "backend not available";
    }
    return "unknown status";
}

SMM_API const char *smm_dtype_name(smm_dtype dtype)
{
    switch (dtype) {
    case SMM_DTYPE_I8: return "i8";
    case SMM_DTYPE_I32: return "i32";
    case SMM_DTYPE_F32: return "f32";
    case SMM_DTYPE_F16: return "f16";
    case SMM_DTYPE_BF16: return "bf16";
    }
    return "unknown";
}

static const char *const backend_names[] = {"auto", "reference", "cpu", "rocm", "cuda"};

SMM_API const char *smm_backend_name(smm_backend backend)
{
    if ((int)backend < 0 || (int)backend > SMM_BACKEND_CUDA)
        return "unknown";
    return backend_names[backend];
}

SMM_API smm_status smm_backend_from_name(const char *name, smm_backend *out)
{
    if (!name || !out)
        return SMM_ERR_INVALID_ARG;
    for (int b = SMM_BACKEND_AUTO; b <= SMM_BACKEND_CUDA; b++) {
        if (strcasecmp(name, backend_names[b]) == 0) {
            *out = (smm_backend)b;
            return SMM_OK;
        }
    }
    return SMM_ERR_INVALID_ARG;
}

/* ------------------------------------------------------------------ */
/* Device memory and streams                                           */
/* ------------------------------------------------------------------ */

/* A GPU context: its backend has device memory operations. */
static int is_gpu(const smm_context *ctx)
{
    return ctx->ops->dev_malloc != NULL;
}

/* The context that owns a context's device memory and stream: an AUTO
 * context's GPU part when it has one, else the context itself. */
static smm_context *device_part(smm_context *ctx)
{
    return ctx->device ? ctx->device : ctx;
}

/* Where a call runs, from its pointers' kinds (lib/route.c): on an AUTO
 * context with a GPU, *target becomes the GPU part when the data is there;
 * on a GPU context every pointer must be memory its device reads. Else
 * (host contexts, AUTO without a GPU) nothing is asked. SMM_ERR_INVALID_ARG
 * names the pointers that decide against the call. */
static smm_status place(smm_context *ctx, const char *who, const smm_ptr_arg *args, int n,
                        smm_context **target)
{
    *target = ctx;
    smm_context *gpu = ctx->routed ? ctx->device : (is_gpu(ctx) ? ctx : NULL);
    if (!gpu || n == 0)
        return SMM_OK;
    smm_ptr_kind kinds[SMM_MAX_PTR_ARGS];
    gpu->ops->pointer_kinds(args, n, kinds);
    char msg[224];
    smm_route r = smm_route_decide(args, kinds, n, !ctx->routed, msg, sizeof msg);
    if (r == SMM_ROUTE_ERROR)
        return smm_set_error(ctx, SMM_ERR_INVALID_ARG, "%s: %s", who, msg);
    if (r == SMM_ROUTE_DEVICE)
        *target = gpu;
    return SMM_OK;
}

/* The runtime's error as the backend reported it, or a generic message. */
static smm_status gpu_result(smm_context *ctx, smm_status st, const char *who)
{
    if (st != SMM_OK && !smm_has_error(ctx))
        smm_set_error(ctx, st, "%s: %s backend: %s", who, ctx->ops->name, smm_strerror(st));
    return st;
}

SMM_API smm_status smm_malloc(smm_context *ctx, size_t bytes, void **ptr)
{
    if (ptr)
        *ptr = NULL;
    if (!ctx)
        return SMM_ERR_INVALID_ARG;
    smm_clear_error(ctx);
    if (!ptr)
        return smm_set_error(ctx, SMM_ERR_INVALID_ARG, "smm_malloc: ptr is NULL");
    ctx = device_part(ctx);
    if (is_gpu(ctx)) {
        void *p = NULL;
        smm_status st = ctx->ops->dev_malloc(ctx, bytes, &p);
        if (st == SMM_OK)
            *ptr = p;
        return gpu_result(ctx, st, "smm_malloc");
    }
    void *p = smm_host_alloc(ctx, bytes, 64);
    if (!p)
        return smm_set_error(ctx, SMM_ERR_NO_MEMORY, "smm_malloc: out of memory (%zu bytes)", bytes);
    *ptr = p;
    return SMM_OK;
}

SMM_API smm_status smm_free(smm_context *ctx, void *ptr)
{
    if (!ctx)
        return SMM_ERR_INVALID_ARG;
    smm_clear_error(ctx);
    if (!ptr)
        return SMM_OK;
    ctx = device_part(ctx);
    if (is_gpu(ctx))
        return gpu_result(ctx, ctx->ops->dev_free(ctx, ptr), "smm_free");
    smm_host_free(ctx, ptr);
    return SMM_OK;
}

SMM_API smm_status smm_memcpy(smm_context *ctx, void *dst, const void *src, size_t bytes,
                              smm_memcpy_kind kind)
{
    if (!ctx)
        return SMM_ERR_INVALID_ARG;
    smm_clear_error(ctx);
    if ((int)kind < (int)SMM_MEMCPY_HOST_TO_DEVICE || (int)kind > (int)SMM_MEMCPY_HOST_TO_HOST)
        return smm_set_error(ctx, SMM_ERR_INVALID_ARG, "smm_memcpy: unknown kind (%d)", (int)kind);
    /* An AUTO context without a GPU takes every kind: its device memory
     * is host memory. */
    const int routed = ctx->routed;
    ctx = device_part(ctx);
    if (kind != SMM_MEMCPY_HOST_TO_HOST && !is_gpu(ctx) && !routed)
        return smm_set_error(ctx, SMM_ERR_INVALID_ARG,
                             "smm_memcpy: a device copy (kind %d) on a %s context, which has no "
                             "device", (int)kind, ctx->ops->name);
    if (bytes == 0)
        return SMM_OK;
    if (!dst || !src)
        return smm_set_error(ctx, SMM_ERR_INVALID_ARG, "smm_memcpy: %s is NULL",
                             !dst ? "dst" : "src");
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src, end;
    if (__builtin_add_overflow(d, bytes, &end) || __builtin_add_overflow(s, bytes, &end))
        return smm_set_error(ctx, SMM_ERR_INVALID_ARG,
                             "smm_memcpy: %zu bytes from %p to %p wrap the address space", bytes,
                             src, dst);
    /* Within one memory (host to host, device to device) ranges may not
     * intersect; across memories addresses are not comparable. */
    if ((kind == SMM_MEMCPY_HOST_TO_HOST || kind == SMM_MEMCPY_DEVICE_TO_DEVICE) &&
        d < s + bytes && s < d + bytes)
        return smm_set_error(ctx, SMM_ERR_OVERLAP,
                             "smm_memcpy: source [%p, +%zu) and destination %p overlap", src,
                             bytes, dst);
    if (is_gpu(ctx))
        return gpu_result(ctx, ctx->ops->dev_memcpy(ctx, dst, src, bytes, kind), "smm_memcpy");
    memcpy(dst, src, bytes);
    return SMM_OK;
}

SMM_API smm_status smm_context_set_stream(smm_context *ctx, void *stream)
{
    if (!ctx)
        return SMM_ERR_INVALID_ARG;
    smm_clear_error(ctx);
    ctx = device_part(ctx);
    if (!is_gpu(ctx)) {
        if (stream)
            return smm_set_error(ctx, SMM_ERR_UNSUPPORTED,
                                 "smm_context_set_stream: the %s backend has no streams",
                                 ctx->ops->name);
        return SMM_OK;
    }
    return gpu_result(ctx, ctx->ops->set_stream(ctx, stream), "smm_context_set_stream");
}

SMM_API smm_status smm_synchronize(smm_context *ctx)
{
    if (!ctx)
        return SMM_ERR_INVALID_ARG;
    smm_clear_error(ctx);
    ctx = device_part(ctx);
    if (!is_gpu(ctx))
        return SMM_OK;
    return gpu_result(ctx, ctx->ops->synchronize(ctx), "smm_synchronize");
}

/* ------------------------------------------------------------------ */
/* Matrix multiplication                                               */
/* ------------------------------------------------------------------ */

/* Runs a checked problem on the backend inside the contract's FP environment. */
static smm_status run_mm(smm_context *ctx, const smm_mm_problem *p)
{
    if (!ctx->ops->mm)
        return smm_set_error(ctx, SMM_ERR_UNSUPPORTED, "the %s backend has no matrix multiplication",
                             ctx->ops->name);
    smm_fpenv env;
    smm_fpenv_enter(&env);
    smm_status st = ctx->ops->mm(ctx, p);
    smm_fpenv_leave(&env);
    if (st != SMM_OK && !smm_has_error(ctx))
        smm_set_error(ctx, st, "%s backend: %s", ctx->ops->name, smm_strerror(st));
    return st;
}

/* One matrix multiplication: where it runs (an AUTO context decides from
 * its pointers, before the argument checks, which depend on the context:
 * a packed B's format), the checks, a GPU context's check that its device
 * reads every pointer (after them, before anything is queued), the run. */
static smm_status mm_call(smm_context *ctx, const smm_mm_problem *args, int raw)
{
    smm_context *t = ctx;
    smm_ptr_arg ptrs[SMM_MAX_PTR_ARGS];
    const char *who = smm_mm_who(args, raw);
    smm_status st;
    if (ctx->routed && args) {
        st = place(ctx, who, ptrs, smm_mm_pointers(args, raw, ptrs), &t);
        if (st != SMM_OK)
            return st;
    }
    st = smm_check_mm(t, args, raw, NULL);
    if (st != SMM_OK || args->m == 0 || args->n == 0)
        return st;
    if (!ctx->routed) {
        st = place(ctx, who, ptrs, smm_mm_pointers(args, raw, ptrs), &t);
        if (st != SMM_OK)
            return st;
    }
    smm_mm_problem p = *args;
    if (!p.azp)
        p.azp_len = 0;
    return run_mm(t, &p);
}

SMM_API smm_status smm_scaled_mm(smm_context *ctx, const smm_scaled_mm_args *args)
{
    if (!ctx)
        return SMM_ERR_INVALID_ARG;
    smm_clear_error(ctx);
    return mm_call(ctx, args, 0);
}

SMM_API smm_status smm_gemm_s8s8s32(smm_context *ctx, int64_t m, int64_t n, int64_t k,
                                    const int8_t *a, int64_t lda, const int8_t *b, int64_t ldb,
                                    int32_t *c, int64_t ldc)
{
    if (!ctx)
        return SMM_ERR_INVALID_ARG;
    smm_clear_error(ctx);
    smm_mm_problem p = {
        .m = m, .n = n, .k = k,
        .a = a, .lda = lda,
        .b = b, .ldb = ldb,
        .c = c, .ldc = ldc,
        .c_dtype = SMM_DTYPE_I32,
    };
    return mm_call(ctx, &p, 1);
}

SMM_API smm_status smm_gemm_s8s8s32_packed(smm_context *ctx, int64_t m, int64_t n, int64_t k,
                                           const int8_t *a, int64_t lda, const smm_packed_b *pb,
                                           int32_t *c, int64_t ldc)
{
    if (!ctx)
        return SMM_ERR_INVALID_ARG;
    smm_clear_error(ctx);
    if (!pb)
        return smm_set_error(ctx, SMM_ERR_INVALID_ARG, "smm_gemm_s8s8s32_packed: pb is NULL");
    smm_mm_problem p = {
        .m = m, .n = n, .k = k,
        .a = a, .lda = lda,
        .c = c, .ldc = ldc,
        .c_dtype = SMM_DTYPE_I32,
        .b_packed = pb,
    };
    return mm_call(ctx, &p, 1);
}

/* ------------------------------------------------------------------ */
/* The epilogue alone                                                  */
/* ------------------------------------------------------------------ */

SMM_API smm_status smm_scaled_epilogue(smm_context *ctx, const smm_epilogue_args *args)
{
    static const char who[] = "smm_scaled_epilogue";
    if (!ctx)
        return SMM_ERR_INVALID_ARG;
    smm_clear_error(ctx);
    /* Where it runs: as smm_scaled_mm, an AUTO context decides from the
     * pointers before the checks, a GPU context checks them after. */
    smm_context *t = ctx;
    smm_ptr_arg ptrs[SMM_MAX_PTR_ARGS];
    smm_status st;
    if (ctx->routed && args) {
        st = place(ctx, who, ptrs, smm_epilogue_pointers(args, ptrs), &t);
        if (st != SMM_OK)
            return st;
    }
    st = smm_check_epilogue(t, args);
    if (st != SMM_OK || args->m == 0 || args->n == 0)
        return st;
    if (!ctx->routed) {
        st = place(ctx, who, ptrs, smm_epilogue_pointers(args, ptrs), &t);
        if (st != SMM_OK)
            return st;
    }
    if (!t->ops->epilogue)
        return smm_set_error(t, SMM_ERR_UNSUPPORTED, "%s: the %s backend has no epilogue operation",
                             who, t->ops->name);
    smm_epilogue_args e = *args;
    if (!e.azp) {
        e.azp_len = 0;
        e.colsum_b = NULL;
    }
    smm_fpenv env;
    smm_fpenv_enter(&env);
    st = t->ops->epilogue(t, &e);
    smm_fpenv_leave(&env);
    if (st != SMM_OK && !smm_has_error(t))
        smm_set_error(t, st, "%s: %s backend: %s", who, t->ops->name, smm_strerror(st));
    return st;
}

/* ------------------------------------------------------------------ */
/* Packed B                                                            */
/* ------------------------------------------------------------------ */

SMM_API smm_status smm_pack_b(smm_context *ctx, int64_t n, int64_t k, const int8_t *b,
                              int64_t ldb, smm_packed_b **out)
{
    if (out)
        *out = NULL;
    if (!ctx)
        return SMM_ERR_INVALID_ARG;
    smm_clear_error(ctx);
    if (!out)
        return smm_set_error(ctx, SMM_ERR_INVALID_ARG, "smm_pack_b: out is NULL");
    /* B's memory decides where an AUTO context packs it; a GPU context's
     * device must read it (checked after the arguments, as for mm_call). */
    smm_ptr_arg ptr = {"b", b, 0};
    int nptr = n > 0 && k > 0 && b ? 1 : 0;
    smm_context *t = ctx;
    smm_status st = ctx->routed ? place(ctx, "smm_pack_b", &ptr, nptr, &t) : SMM_OK;
    if (st == SMM_OK)
        st = smm_check_pack_b(t, n, k, b, ldb);
    if (st == SMM_OK && !ctx->routed)
        st = place(ctx, "smm_pack_b", &ptr, nptr, &t);
    if (st != SMM_OK)
        return st;
    ctx = t;
    if (!ctx->ops->pack_b || !ctx->ops->packed_format)
        return smm_set_error(ctx, SMM_ERR_UNSUPPORTED, "smm_pack_b: the %s backend has no packed B",
                             ctx->ops->name);
    smm_packed_b *pb = smm_host_alloc(ctx, sizeof *pb, 64);
    if (!pb)
        return smm_set_error(ctx, SMM_ERR_NO_MEMORY, "smm_pack_b: out of memory");
    memset(pb, 0, sizeof *pb);
    pb->backend = ctx->backend;
    pb->format = ctx->ops->packed_format(ctx);
    pb->n = n;
    pb->k = k;
    pb->alloc = ctx->alloc;
    st = ctx->ops->pack_b(ctx, b, ldb, pb);
    if (st != SMM_OK) {
        smm_host_free(ctx, pb);
        if (!smm_has_error(ctx))
            smm_set_error(ctx, st, "smm_pack_b: %s backend: %s", ctx->ops->name, smm_strerror(st));
        return st;
    }
    *out = pb;
    return SMM_OK;
}

SMM_API void smm_packed_b_destroy(smm_packed_b *pb)
{
    if (!pb)
        return;
    smm_allocator al = pb->alloc;
    if (pb->release)
        pb->release(pb);          /* GPU backends: device memory */
    else if (pb->mem)
        al.free(pb->mem, al.user);
    al.free(pb, al.user);
}

SMM_API int64_t smm_packed_b_n(const smm_packed_b *pb)
{
    return pb ? pb->n : -1;
}

SMM_API int64_t smm_packed_b_k(const smm_packed_b *pb)
{
    return pb ? pb->k : -1;
}

SMM_API const char *smm_packed_b_format(const smm_packed_b *pb)
{
    return pb && pb->format ? pb->format : "";
}

/* Runs a checked quantization on the backend inside the contract's FP environment. */
static smm_status run_quantize(smm_context *ctx, const smm_quantize_args *q)
{
    if (!ctx->ops->quantize)
        return smm_set_error(ctx, SMM_ERR_UNSUPPORTED, "the %s backend has no quantizer",
                             ctx->ops->name);
    smm_fpenv env;
    smm_fpenv_enter(&env);
    smm_status st = ctx->ops->quantize(ctx, q);
    smm_fpenv_leave(&env);
    if (st != SMM_OK && !smm_has_error(ctx))
        smm_set_error(ctx, st, "%s backend: %s", ctx->ops->name, smm_strerror(st));
    return st;
}

SMM_API smm_status smm_quantize_i8(smm_context *ctx, const smm_quantize_args *args)
{
    if (!ctx)
        return SMM_ERR_INVALID_ARG;
    smm_clear_error(ctx);
    smm_context *t = ctx;
    smm_ptr_arg ptrs[SMM_MAX_PTR_ARGS];
    smm_status st = ctx->routed && args
                        ? place(ctx, "smm_quantize_i8", ptrs, smm_quantize_pointers(args, ptrs), &t)
                        : SMM_OK;
    if (st == SMM_OK)
        st = smm_check_quantize(t, args, NULL);
    if (st != SMM_OK || args->m == 0)
        return st;
    if (!ctx->routed) {
        st = place(ctx, "smm_quantize_i8", ptrs, smm_quantize_pointers(args, ptrs), &t);
        if (st != SMM_OK)
            return st;
    }
    return run_quantize(t, args);
}

/* ------------------------------------------------------------------ */
/* The whole linear layer                                              */
/* ------------------------------------------------------------------ */

SMM_API smm_status smm_linear(smm_context *ctx, const smm_linear_args *args)
{
    static const char who[] = "smm_linear";
    if (!ctx)
        return SMM_ERR_INVALID_ARG;
    smm_clear_error(ctx);
    const smm_linear_args *l = args;
    if (!l)
        return smm_set_error(ctx, SMM_ERR_INVALID_ARG, "%s: args is NULL", who);
    if (l->mode != SMM_QUANT_STATIC_PER_TENSOR && l->mode != SMM_QUANT_DYNAMIC_PER_TOKEN)
        return smm_set_error(ctx, SMM_ERR_INVALID_ARG, "%s: unknown mode (%d)", who, (int)l->mode);
    const int dynamic = l->mode == SMM_QUANT_DYNAMIC_PER_TOKEN;
    if (l->asymmetric != 0 && l->asymmetric != 1)
        return smm_set_error(ctx, SMM_ERR_INVALID_ARG, "%s: asymmetric (%d) is neither 0 nor 1",
                             who, l->asymmetric);
    if (dynamic && !l->asymmetric && l->x_azp)
        return smm_set_error(ctx, SMM_ERR_INVALID_ARG,
                             "%s: x_azp is set but asymmetric is 0 (with dynamic mode x_azp "
                             "returns the zero points of an asymmetric quantization)", who);
    if (!dynamic && l->asymmetric && !l->x_azp)
        return smm_set_error(ctx, SMM_ERR_INVALID_ARG,
                             "%s: asymmetric is 1 with static mode but x_azp, the static zero "
                             "point, is NULL", who);
    if (l->m < 0 || l->n < 0 || l->k < 0)
        return smm_set_error(ctx, SMM_ERR_INVALID_ARG,
                             "%s: negative size (m %" PRId64 ", n %" PRId64 ", k %" PRId64 ")",
                             who, l->m, l->n, l->k);
    const int asym = dynamic ? l->asymmetric : l->x_azp != NULL;

    /* Where the call runs: as smm_scaled_mm, an AUTO context decides from
     * the pointers before the checks, a GPU context checks them after. */
    smm_context *t = ctx;
    smm_ptr_arg ptrs[SMM_MAX_PTR_ARGS];
    smm_status st;
    if (ctx->routed) {
        st = place(ctx, who, ptrs, smm_linear_pointers(l, ptrs), &t);
        if (st != SMM_OK)
            return st;
    }
    const int live = l->m > 0;
    if (is_gpu(t) && live) {
        const char *missing = l->k > 0 && !l->q              ? "q"
                              : dynamic && !l->x_scale       ? "x_scale"
                              : dynamic && asym && !l->x_azp ? "x_azp"
                                                             : NULL;
        if (missing)
            return smm_set_error(t, SMM_ERR_INVALID_ARG,
                                 "%s: %s is NULL: where a GPU runs the call, the int8 activations "
                                 "and their scales pass through device memory the caller gives",
                                 who, missing);
    }

    /* Working memory (host contexts) for what the caller does not take:
     * sized here, checked below under the stand-in address SMM_WORKSPACE,
     * allocated once the whole call is known to be valid. */
    int8_t *q = l->q;
    int64_t ldq = l->ldq;
    float *scale = l->x_scale;
    int32_t *azp = l->x_azp;
    size_t qbytes = 0, nscale = 0, nazp = 0, wsbytes = 0;
    if (live && !is_gpu(t)) {
        nscale = dynamic && !scale ? (size_t)l->m : 0;
        nazp = dynamic && asym && !azp ? (size_t)l->m : 0;
        if (l->k > 0 && !q &&
            (__builtin_mul_overflow((size_t)l->m, (size_t)l->k, &qbytes) || qbytes > SIZE_MAX / 2))
            return smm_set_error(t, SMM_ERR_INVALID_ARG,
                                 "%s: q is NULL and the working memory for it (m %" PRId64
                                 " x k %" PRId64 " bytes) overflows", who, l->m, l->k);
        qbytes = (qbytes + 63) & ~(size_t)63;
        if (nscale + nazp > (SIZE_MAX / 2 - qbytes) / 4)
            return smm_set_error(t, SMM_ERR_INVALID_ARG,
                                 "%s: the working memory for the scales and zero points of m %"
                                 PRId64 " rows overflows", who, l->m);
        wsbytes = qbytes + 4 * (nscale + nazp);
        if (qbytes) {
            q = SMM_WORKSPACE;
            ldq = l->k;
        }
        if (nscale)
            scale = SMM_WORKSPACE;
        if (nazp)
            azp = SMM_WORKSPACE;
    }

    /* The two calls' arguments. */
    smm_quantize_args qa = {
        .m = l->m, .k = l->k,
        .x = l->x, .x_dtype = l->x_dtype, .ldx = l->ldx,
        .q = q, .ldq = ldq,
        .scale = scale, .azp = asym ? azp : NULL,
        .mode = l->mode,
    };
    smm_mm_problem pa = {
        .m = l->m, .n = l->n, .k = l->k,
        .a = q, .lda = ldq,
        .b = l->b, .ldb = l->ldb,
        .scale_a = scale, .scale_a_len = dynamic ? l->m : 1,
        .scale_b = l->scale_b, .scale_b_len = l->scale_b_len,
        .bias = l->bias,
        .azp = asym ? azp : NULL, .azp_len = asym ? (dynamic ? l->m : 1) : 0,
        .c = l->c, .ldc = l->ldc, .c_dtype = l->c_dtype,
        .b_packed = l->b_packed,
    };
    st = smm_check_linear(t, l, &qa, &pa);
    if (st == SMM_OK && !ctx->routed && l->m > 0)
        st = place(ctx, who, ptrs, smm_linear_pointers(l, ptrs), &t);
    void *ws = NULL;
    if (st == SMM_OK && wsbytes > 0) {
        ws = smm_host_alloc(t, wsbytes, 64);
        if (!ws)
            return smm_set_error(t, SMM_ERR_NO_MEMORY,
                                 "%s: out of memory (%zu bytes of working memory)", who, wsbytes);
        unsigned char *w = ws;
        if (qbytes)
            pa.a = qa.q = (int8_t *)w;
        if (nscale)
            pa.scale_a = qa.scale = (float *)(w + qbytes);
        if (nazp)
            pa.azp = qa.azp = (int32_t *)(w + qbytes + 4 * nscale);
    }
    if (st == SMM_OK && l->m > 0) {
        if (l->n > 0 && t->ops->linear) {   /* the backend's fused form */
            smm_fpenv env;
            smm_fpenv_enter(&env);
            st = t->ops->linear(t, &qa, &pa);
            smm_fpenv_leave(&env);
            if (st != SMM_OK && !smm_has_error(t))
                smm_set_error(t, st, "%s: %s backend: %s", who, t->ops->name, smm_strerror(st));
        } else {
            st = run_quantize(t, &qa);
            if (st == SMM_OK && l->n > 0)
                st = run_mm(t, &pa);
        }
    }
    if (ws)
        smm_host_free(t, ws);
    return st;
}
