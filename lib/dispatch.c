/*
 * dispatch.c - the registry of backends and the choice AUTO makes.
 *
 * Each backend is one smm_backend_ops table; adding one is its source files
 * plus one line in `registry` below. Each backend's probe runs once per
 * process, the first time that backend is asked about, and its answer
 * (available or not, and why) is kept. The GPU backends' tables come from
 * their plugins (gpu_loader.c), loaded by their probe: a program that only
 * uses host backends never loads a plugin or starts a GPU runtime.
 */
#include "config.h"
#include "gpu_loader.h"
#include "internal.h"

#include <pthread.h>
#include <stdlib.h>

/* Indexed by smm_backend; NULL where the backend is not built in (the GPU
 * backends: see gpu_ops). */
static const smm_backend_ops *const registry[] = {
    [SMM_BACKEND_AUTO] = NULL,
    [SMM_BACKEND_REFERENCE] = &smm_reference_ops,
    [SMM_BACKEND_CPU] = &smm_cpu_ops,
    [SMM_BACKEND_ROCM] = NULL,
    [SMM_BACKEND_CUDA] = NULL,
};
#define NBACKENDS ((int)(sizeof registry / sizeof registry[0]))

/* The order AUTO prefers, fastest first. Host backends only: the calls of
 * a GPU context take device pointers, so a program gets one only by naming
 * it (or through SMM_BACKEND). */
static const smm_backend preference[] = {
    SMM_BACKEND_CPU, SMM_BACKEND_REFERENCE,
};

static const smm_backend_ops *gpu_ops[NBACKENDS];   /* loaded plugins */
static int probed_ok[NBACKENDS];
static const char *probed_reason[NBACKENDS];
static int probed[NBACKENDS];                        /* under probe_lock */
static pthread_mutex_t probe_lock = PTHREAD_MUTEX_INITIALIZER;

/* Probes backend b once per process (b within the enum). */
static void probe_one(int b)
{
    pthread_mutex_lock(&probe_lock);
    if (!probed[b]) {
        const smm_backend_ops *ops = registry[b];
        if (b == SMM_BACKEND_AUTO) {
            probed_reason[b] = "AUTO is not a backend; it picks one";
        } else if (b == SMM_BACKEND_ROCM || b == SMM_BACKEND_CUDA) {
            /* The plugin's entry point counts the devices: it is the probe. */
            gpu_ops[b] = smm_gpu_load((smm_backend)b, &probed_reason[b]);
            probed_ok[b] = gpu_ops[b] != NULL;
        } else if (!ops) {
            probed_reason[b] = "not built in";
        } else {
            const char *why = NULL;
            probed_ok[b] = ops->probe(&why) ? 1 : 0;
            probed_reason[b] = why ? why : (probed_ok[b] ? "available" : "unavailable");
        }
        probed[b] = 1;
    }
    pthread_mutex_unlock(&probe_lock);
}

const smm_backend_ops *smm_backend_ops_get(smm_backend b)
{
    if ((int)b < 0 || (int)b >= NBACKENDS)
        return NULL;
    if (b == SMM_BACKEND_ROCM || b == SMM_BACKEND_CUDA) {
        probe_one(b);
        return gpu_ops[b];
    }
    return registry[b];
}

SMM_API int smm_backend_available(smm_backend backend, const char **reason)
{
    if ((int)backend < 0 || (int)backend >= NBACKENDS) {
        if (reason)
            *reason = "unknown backend";
        return 0;
    }
    probe_one(backend);
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
