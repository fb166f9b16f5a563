/*
 * dispatch.c - the registry of backends and the choice AUTO makes.
 *
 * Each backend is one smm_backend_ops table; adding one is its source files
 * plus one line in `registry` below. Each backend's probe runs once per
 * process and its answer (available or not, and why) is kept.
 */
#include "config.h"
#include "internal.h"

#include <pthread.h>
#include <stdlib.h>

/* Indexed by smm_backend; NULL where the backend is not built in. */
static const smm_backend_ops *const registry[] = {
    [SMM_BACKEND_AUTO] = NULL,
    [SMM_BACKEND_REFERENCE] = &smm_reference_ops,
    [SMM_BACKEND_CPU] = &smm_cpu_ops,
    [SMM_BACKEND_ROCM] = NULL,
    [SMM_BACKEND_CUDA] = NULL,
};
#define NBACKENDS ((int)(sizeof registry / sizeof registry[0]))

/* The order AUTO prefers, fastest first. */
static const smm_backend preference[] = {
    SMM_BACKEND_CUDA, SMM_BACKEND_ROCM, SMM_BACKEND_CPU, SMM_BACKEND_REFERENCE,
};

static int probed_ok[NBACKENDS];
static const char *probed_reason[NBACKENDS];
static pthread_once_t probe_once_ctl = PTHREAD_ONCE_INIT;

static void probe_all(void)
{
    for (int b = 0; b < NBACKENDS; b++) {
        const smm_backend_ops *ops = registry[b];
        if (b == SMM_BACKEND_AUTO) {
            probed_reason[b] = "AUTO is not a backend; it picks one";
        } else if (!ops) {
            probed_reason[b] = (b == SMM_BACKEND_ROCM || b == SMM_BACKEND_CUDA)
                                   ? "no GPU backend in this build"
                                   : "not built in";
        } else {
            const char *why = NULL;
            probed_ok[b] = ops->probe(&why) ? 1 : 0;
            probed_reason[b] = why ? why : (probed_ok[b] ? "available" : "unavailable");
        }
    }
}

const smm_backend_ops *smm_backend_ops_get(smm_backend b)
{
    if ((int)b < 0 || (int)b >= NBACKENDS)
        return NULL;
    return registry[b];
}

SMM_API int smm_backend_available(smm_backend backend, const char **reason)
{
    if ((int)backend < 0 || (int)backend >= NBACKENDS) {
        if (reason)
            *reason = "unknown backend";
        return 0;
    }
    pthread_once(&probe_once_ctl, probe_all);
    if (reason)
        *reason = probed_reason[backend];
    return probed_ok[backend];
}

SMM_API smm_backend smm_backend_auto(void)
{
    const char *env = getenv("SMM_BACKEND");
    smm_backend named;
    if (env && *env && smm_backend_from_name(env, &named) == SMM_OK && named != SMM_BACKEND_AUTO)
        return named;
    for (size_t i = 0; i < sizeof preference / sizeof preference[0]; i++)
        if (smm_backend_available(preference[i], NULL))
            return preference[i];
    return SMM_BACKEND_REFERENCE;
}
