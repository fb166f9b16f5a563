/*
 * context.c - contexts: backend choice, thread count, allocator, last error.
 *
 * Error messages are kept per thread (include/scaledmm.h, "Threads"): each
 * thread holds the messages of the last ERROR_SLOTS contexts it got an
 * error from, keyed by the context's error_id (unique in the process, never
 * reused), so that concurrent calls on one context never read each other's
 * message, and a destroyed context's stale slot matches no later context.
 */
#include "config.h"
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static void *default_alloc(size_t size, size_t alignment, void *user)
{
    (void)user;
    void *p = NULL;
    if (alignment < sizeof(void *))
        alignment = sizeof(void *);
    if (posix_memalign(&p, alignment, size ? size : 1) != 0)
        return NULL;
    return p;
}

static void default_free(void *p, void *user)
{
    (void)user;
    free(p);
}

static const smm_allocator default_allocator = {default_alloc, default_free, NULL};

void *smm_host_alloc(smm_context *ctx, size_t size, size_t alignment)
{
    return ctx->alloc.alloc(size ? size : 1, alignment ? alignment : 64, ctx->alloc.user);
}

void smm_host_free(smm_context *ctx, void *p)
{
    if (p)
        ctx->alloc.free(p, ctx->alloc.user);
}

int smm_threads(const smm_context *ctx)
{
    if (ctx->num_threads > 0)
        return ctx->num_threads;
#ifdef _OPENMP
    int n = omp_get_max_threads();
    return n > 0 ? n : 1;
#else
    return 1;
#endif
}

#define ERROR_SLOTS 16

typedef struct {
    uint64_t error_id;   /* 0: free */
    char msg[256];
} error_slot;

static __thread error_slot error_slots[ERROR_SLOTS];
static __thread unsigned error_next;   /* the slot to reuse next */
static uint64_t last_error_id;         /* atomic */

/* This thread's slot for the context's messages, or NULL. */
static error_slot *find_slot(const smm_context *ctx)
{
    for (int i = 0; i < ERROR_SLOTS; i++)
        if (error_slots[i].error_id == ctx->error_id)
            return &error_slots[i];
    return NULL;
}

smm_status smm_verror(smm_context *ctx, smm_status status, const char *fmt, va_list ap)
{
    if (!ctx)
        return status;
    error_slot *s = find_slot(ctx);
    if (!s) {
        s = &error_slots[error_next];
        error_next = (error_next + 1) % ERROR_SLOTS;
        s->error_id = ctx->error_id;
    }
    vsnprintf(s->msg, sizeof s->msg, fmt, ap);
    return status;
}

smm_status smm_set_error(smm_context *ctx, smm_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    smm_verror(ctx, status, fmt, ap);
    va_end(ap);
    return status;
}

void smm_clear_error(const smm_context *ctx)
{
    error_slot *s = find_slot(ctx);
    if (s)
        s->msg[0] = '\0';
}

int smm_has_error(const smm_context *ctx)
{
    const error_slot *s = find_slot(ctx);
    return s && s->msg[0] != '\0';
}

/* A context on the concrete backend b (available), through allocator al. */
static smm_status make_context(smm_context **out, smm_backend b, const smm_allocator *al)
{
    const smm_backend_ops *ops = smm_backend_ops_get(b);
    if (!ops)
        return SMM_ERR_NOT_AVAILABLE;
    smm_context *ctx = al->alloc(sizeof *ctx, 64, al->user);
    if (!ctx)
        return SMM_ERR_NO_MEMORY;
    memset(ctx, 0, sizeof *ctx);
    ctx->backend = b;
    ctx->ops = ops;
    ctx->alloc = *al;
    ctx->error_id = __atomic_add_fetch(&last_error_id, 1, __ATOMIC_RELAXED);
    ctx->verror = smm_verror;
    if (ops->init) {
        smm_status st = ops->init(ctx);
        if (st != SMM_OK) {
            al->free(ctx, al->user);
            return st;
        }
    }
    *out = ctx;
    return SMM_OK;
}

SMM_API smm_status smm_context_create_with_allocator(smm_context **out, smm_backend backend,
                                                     const smm_allocator *allocator)
{
    if (!out)
        return SMM_ERR_INVALID_ARG;
    *out = NULL;
    if (allocator && (!allocator->alloc || !allocator->free))
        return SMM_ERR_INVALID_ARG;
    if ((int)backend < SMM_BACKEND_AUTO || (int)backend > SMM_BACKEND_CUDA)
        return SMM_ERR_INVALID_ARG;

    int routed = 0;
    if (backend == SMM_BACKEND_AUTO) {
        const char *env = getenv("SMM_BACKEND");
        if (env && *env) {
            /* An explicit request in the environment is honoured or refused,
             * never silently replaced. */
            if (smm_backend_from_name(env, &backend) != SMM_OK)
                return SMM_ERR_INVALID_ARG;
        }
        if (backend == SMM_BACKEND_AUTO) {  /* unset, or SMM_BACKEND=auto */
            backend = smm_backend_auto();
            routed = 1;
        }
    }
    if (!smm_backend_available(backend, NULL))
        return SMM_ERR_NOT_AVAILABLE;
    const smm_allocator *al = allocator ? allocator : &default_allocator;
    smm_context *ctx = NULL;
    smm_status st = make_context(&ctx, backend, al);
    if (st != SMM_OK)
        return st;
    if (routed) {
        /* AUTO runs each call where its data lives: the host backend is
         * the context itself, the GPU found (if any) a part of it. */
        ctx->routed = 1;
        smm_backend dev = smm_backend_auto_device(NULL);
        if (dev != SMM_BACKEND_AUTO) {
            st = make_context(&ctx->device, dev, al);
            if (st != SMM_OK) {
                smm_context_destroy(ctx);
                return st;
            }
            ctx->device->error_id = ctx->error_id;   /* its messages are ctx's */
        }
    }
    *out = ctx;
    return SMM_OK;
}

SMM_API smm_status smm_context_create(smm_context **ctx, smm_backend backend)
{
    return smm_context_create_with_allocator(ctx, backend, NULL);
}

SMM_API void smm_context_destroy(smm_context *ctx)
{
    if (!ctx)
        return;
    smm_context_destroy(ctx->device);
    if (ctx->ops && ctx->ops->fini)
        ctx->ops->fini(ctx);
    smm_allocator al = ctx->alloc;
    al.free(ctx, al.user);
}

SMM_API smm_backend smm_context_backend(const smm_context *ctx)
{
    return ctx ? ctx->backend : SMM_BACKEND_AUTO;
}

SMM_API smm_backend smm_context_device_backend(const smm_context *ctx)
{
    if (!ctx)
        return SMM_BACKEND_AUTO;
    if (ctx->device)
        return ctx->device->backend;
    return ctx->ops->dev_malloc ? ctx->backend : SMM_BACKEND_AUTO;
}

SMM_API smm_status smm_context_set_num_threads(smm_context *ctx, int num_threads)
{
    if (!ctx)
        return SMM_ERR_INVALID_ARG;
    if (num_threads < 0)
        return smm_set_error(ctx, SMM_ERR_INVALID_ARG,
                             "smm_context_set_num_threads: num_threads (%d) < 0", num_threads);
    ctx->num_threads = num_threads;
    smm_clear_error(ctx);
    return SMM_OK;
}

SMM_API int smm_context_get_num_threads(const smm_context *ctx)
{
    return ctx ? ctx->num_threads : -1;
}

SMM_API const char *smm_context_last_error(const smm_context *ctx)
{
    if (!ctx)
        return "";
    const error_slot *s = find_slot(ctx);
    return s ? s->msg : "";
}
