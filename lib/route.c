/*
 * route.c - where a call runs, decided from where its data lives.
 *
 * A pure function of the pointers' kinds (smm_ptr_kind, as the GPU
 * runtime reports them through the backend's pointer_kind op), so that the
 * rules are tested on machines without a GPU (tests/check_route.c compiles
 * this file into the test and feeds it every kind):
 *   - a GPU context runs every call on its device: each pointer must be
 *     memory that device reads at that address (its own device memory,
 *     managed memory, or host memory registered with the runtime and mapped
 *     at the same address); plain host memory and another device's memory
 *     are refused;
 *   - an AUTO context with a GPU runs a call on the host when any pointer
 *     is plain host memory (then every pointer must be readable by the host:
 *     no device memory), else on the GPU (device, managed and registered
 *     memory only); another device's memory is refused.
 * Refusals name the pointers.
 */
#include "config.h"
#include "internal.h"

#include <stdio.h>
#include <string.h>

/* Appends the names of the pointers of kind `kind` ("a, c") to buf. */
static void names_of(const smm_ptr_arg *args, const smm_ptr_kind *kinds, int n,
                     smm_ptr_kind kind, char *buf, size_t size)
{
    size_t len = strlen(buf);
    int first = 1;
    for (int i = 0; i < n && len + 1 < size; i++) {
        if (kinds[i] != kind)
            continue;
        snprintf(buf + len, size - len, "%s%s", first ? "" : ", ", args[i].name);
        len = strlen(buf);
        first = 0;
    }
}

static int count(const smm_ptr_kind *kinds, int n, smm_ptr_kind kind)
{
    int c = 0;
    for (int i = 0; i < n; i++)
        c += kinds[i] == kind;
    return c;
}

smm_route smm_route_decide(const smm_ptr_arg *args, const smm_ptr_kind *kinds, int n,
                           int gpu_context, char *msg, size_t size)
{
    msg[0] = '\0';
    int host = count(kinds, n, SMM_PTR_HOST), device = count(kinds, n, SMM_PTR_DEVICE),
        other = count(kinds, n, SMM_PTR_OTHER_DEVICE);
    if (other > 0) {
        names_of(args, kinds, n, SMM_PTR_OTHER_DEVICE, msg, size);
        snprintf(msg + strlen(msg), size - strlen(msg), " %s memory of another device than "
                 "the calling thread's current one", other > 1 ? "are" : "is");
        return SMM_ROUTE_ERROR;
    }
    if (gpu_context) {
        if (host == 0)
            return SMM_ROUTE_DEVICE;
        names_of(args, kinds, n, SMM_PTR_HOST, msg, size);
        snprintf(msg + strlen(msg), size - strlen(msg), " %s host memory the device cannot "
                 "read (pass device memory: smm_malloc and smm_memcpy)", host > 1 ? "are" : "is");
        return SMM_ROUTE_ERROR;
    }
    if (host == 0)
        return n > 0 ? SMM_ROUTE_DEVICE : SMM_ROUTE_HOST;
    if (device == 0)
        return SMM_ROUTE_HOST;
    names_of(args, kinds, n, SMM_PTR_DEVICE, msg, size);
    snprintf(msg + strlen(msg), size - strlen(msg), " %s device memory and ",
             device > 1 ? "are" : "is");
    names_of(args, kinds, n, SMM_PTR_HOST, msg, size);
    snprintf(msg + strlen(msg), size - strlen(msg), " %s host memory: the pointers of one "
             "call must all be in host memory or all in the device's", host > 1 ? "are" : "is");
    return SMM_ROUTE_ERROR;
}

int smm_mm_pointers(const smm_mm_problem *p, int raw, smm_ptr_arg out[SMM_MAX_PTR_ARGS])
{
    int n = 0;
    if (p->b_packed) {   /* decides even an empty problem: its format is checked */
        /* A GPU backend's packed B (it has a release) is device memory this
         * library allocated: its device is known without asking the runtime. */
        const smm_packed_b *pb = p->b_packed;
        out[n++] = (smm_ptr_arg){"b_packed", pb->mem, pb->release ? pb->device + 1 : 0};
    }
    if (p->m <= 0 || p->n <= 0 || p->k < 0)
        return n;
    const smm_ptr_arg all[7] = {
        {"a", p->k > 0 ? p->a : NULL, 0}, {"b", p->k > 0 ? p->b : NULL, 0}, {"c", p->c, 0},
        {"scale_a", raw ? NULL : p->scale_a, 0}, {"scale_b", raw ? NULL : p->scale_b, 0},
        {"bias", raw ? NULL : p->bias, 0}, {"azp", raw ? NULL : p->azp, 0},
    };
    for (int i = 0; i < 7; i++)
        if (all[i].ptr)
            out[n++] = all[i];
    return n;
}

int smm_quantize_pointers(const smm_quantize_args *q, smm_ptr_arg out[SMM_MAX_PTR_ARGS])
{
    int n = 0;
    if (q->m <= 0 || q->k < 0)
        return n;
    const smm_ptr_arg all[4] = {
        {"x", q->k > 0 ? q->x : NULL, 0}, {"q", q->k > 0 ? q->q : NULL, 0},
        {"scale", q->scale, 0}, {"azp", q->azp, 0},
    };
    for (int i = 0; i < 4; i++)
        if (all[i].ptr)
            out[n++] = all[i];
    return n;
}

int smm_linear_pointers(const smm_linear_args *l, smm_ptr_arg out[SMM_MAX_PTR_ARGS])
{
    int n = 0;
    if (l->b_packed) {   /* as smm_mm_pointers: decides even an empty problem */
        const smm_packed_b *pb = l->b_packed;
        out[n++] = (smm_ptr_arg){"b_packed", pb->mem, pb->release ? pb->device + 1 : 0};
    }
    if (l->m <= 0 || l->n < 0 || l->k < 0)
        return n;
    const int mm = l->n > 0, kk = l->k > 0;
    const smm_ptr_arg all[8] = {
        {"x", kk ? l->x : NULL, 0}, {"q", kk ? l->q : NULL, 0},
        {"x_scale", l->x_scale, 0}, {"x_azp", l->x_azp, 0},
        {"b", mm && kk && !l->b_packed ? l->b : NULL, 0}, {"scale_b", mm ? l->scale_b : NULL, 0},
        {"bias", mm ? l->bias : NULL, 0}, {"c", mm ? l->c : NULL, 0},
    };
    for (int i = 0; i < 8 && n < SMM_MAX_PTR_ARGS; i++)
        if (all[i].ptr)
            out[n++] = all[i];
    return n;
}

int smm_epilogue_pointers(const smm_epilogue_args *e, smm_ptr_arg out[SMM_MAX_PTR_ARGS])
{
    int n = 0;
    if (e->m <= 0 || e->n <= 0)
        return n;
    const smm_ptr_arg all[7] = {
        {"acc", e->acc, 0}, {"c", e->c, 0}, {"scale_a", e->scale_a, 0},
        {"scale_b", e->scale_b, 0}, {"bias", e->bias, 0}, {"azp", e->azp, 0},
        {"colsum_b", e->azp ? e->colsum_b : NULL, 0},
    };
    for (int i = 0; i < 7; i++)
        if (all[i].ptr)
            out[n++] = all[i];
    return n;
}
