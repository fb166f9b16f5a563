/*
 * dispatch.c - the registry of backends and the choice AUTO makes.
 *
 * Each backend is one smm_backend_ops table; adding one is its source files
 * plus one line in `registry` below. Each backend's probe runs once per
 * process, the first time that backend is asked about, and its answer
 * (available or not, and why) is kept. The GPU backends' tables come from
 * their plugins (gpu_loader.c), loaded by their probe: a program that only
 * uses host backends never loads a plugin or starts a GPU runtime, and AUTO
 * probes a GPU backend only where its driver's device node exists.
 */
#include "config.h"
#include "gpu_loader.h"
#include "internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* The order AUTO prefers for host data, fastest first. */
static const smm_backend preference[] = {
    SMM_BACKEND_CPU, SMM_BACKEND_REFERENCE,
};

/* The GPU backends AUTO looks for, in order, and the device nodes their
 * drivers create: without any of them no plugin is loaded (and so no GPU
 * runtime started) for AUTO. */
static const struct {
    smm_backend backend;
    const char *nodes[2];
} gpu_runtimes[] = {
    {SMM_BACKEND_CUDA, {"/dev/nvidiactl", "/dev/dxg"}},
    {SMM_BACKEND_ROCM, {"/dev/kfd", NULL}},
};
#define NGPU_RUNTIMES ((int)(sizeof gpu_runtimes / sizeof gpu_runtimes[0]))

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
            probed_reason[b] = "";   /* AUTO's answer: auto_answer() */
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

/* The backend SMM_BACKEND names: 1 and *named (AUTO for "auto"), 0 when
 * unset or empty, -1 when it names no backend. */
static int env_backend(smm_backend *named)
{
    const char *env = getenv("SMM_BACKEND");
    if (!env || !*env)
        return 0;
    return smm_backend_from_name(env, named) == SMM_OK ? 1 : -1;
}

static pthread_once_t device_once = PTHREAD_ONCE_INIT;
static smm_backend device_backend = SMM_BACKEND_AUTO;
static char device_reason[600];

/* Which GPU backend AUTO runs device data on, probed once. */
static void probe_device(void)
{
    const char *why = NULL;
    int found = 0;
    for (int i = 0; i < NGPU_RUNTIMES && device_backend == SMM_BACKEND_AUTO; i++) {
        smm_backend b = gpu_runtimes[i].backend;
        int present = 0;
        for (int j = 0; j < 2; j++)
            present |= gpu_runtimes[i].nodes[j] && access(gpu_runtimes[i].nodes[j], F_OK) == 0;
        if (!present)
            continue;
        found = 1;
        if (smm_backend_available(b, &why)) {
            device_backend = b;
            snprintf(device_reason, sizeof device_reason, "%s", why);
        } else {
            snprintf(device_reason, sizeof device_reason, "%s: %s", smm_backend_name(b), why);
        }
    }
    if (!found)
        snprintf(device_reason, sizeof device_reason, "no GPU runtime found (no /dev/nvidiactl, "
                 "/dev/dxg or /dev/kfd)");
}

SMM_API smm_backend smm_backend_auto_device(const char **reason)
{
    smm_backend named;
    int env = env_backend(&named);
    if (env != 0 && !(env > 0 && named == SMM_BACKEND_AUTO)) {
        if (reason)
            *reason = "SMM_BACKEND names the backend of every AUTO context";
        return env > 0 && (named == SMM_BACKEND_ROCM || named == SMM_BACKEND_CUDA)
                   ? named : SMM_BACKEND_AUTO;
    }
    pthread_once(&device_once, probe_device);
    if (reason)
        *reason = device_reason;
    return device_backend;
}

/* AUTO's whole answer, for smm_backend_available(SMM_BACKEND_AUTO, ...):
 * where host data and device data go, or why a context cannot be made. */
static int auto_answer(const char **reason)
{
    static char answer[SMM_BACKEND_CUDA + 1][1024];   /* one per SMM_BACKEND value */
    static pthread_mutex_t answer_lock = PTHREAD_MUTEX_INITIALIZER;
    smm_backend named;
    int env = env_backend(&named);
    if (env < 0) {
        *reason = "SMM_BACKEND names no backend (expected reference, cpu, rocm, cuda or auto): "
                  "contexts created on AUTO fail";
        return 0;
    }
    const char *why = "";
    if (env > 0 && named != SMM_BACKEND_AUTO) {
        int ok = smm_backend_available(named, &why);
        pthread_mutex_lock(&answer_lock);
        snprintf(answer[named], sizeof answer[named], "SMM_BACKEND=%s: every call -> %s (%s)",
                 smm_backend_name(named), ok ? smm_backend_name(named) : "none", why);
        pthread_mutex_unlock(&answer_lock);
        *reason = answer[named];
        return ok;
    }
    smm_backend host = smm_backend_auto(), dev = smm_backend_auto_device(NULL);
    const char *dev_why = NULL;
    (void)smm_backend_auto_device(&dev_why);
    smm_backend_available(host, &why);
    /* The cpu backend's level, as a context created now gets it. */
    char level[48] = "";
    if (host == SMM_BACKEND_CPU && smm_backend_available(host, NULL))
        snprintf(level, sizeof level, " (%s)", smm_cpu_level_chosen());
    pthread_mutex_lock(&answer_lock);
    snprintf(answer[SMM_BACKEND_AUTO], sizeof answer[0],
             "host data -> %s%s; device data -> %s (%s)", smm_backend_name(host), level,
             dev == SMM_BACKEND_AUTO ? "none" : smm_backend_name(dev), dev_why);
    pthread_mutex_unlock(&answer_lock);
    *reason = answer[SMM_BACKEND_AUTO];
    return 1;
}

SMM_API int smm_backend_available(smm_backend backend, const char **reason)
{
    if ((int)backend < 0 || (int)backend >= NBACKENDS) {
        if (reason)
            *reason = "unknown backend";
        return 0;
    }
    if (backend == SMM_BACKEND_AUTO) {
        const char *why;
        int ok = auto_answer(&why);
        if (reason)
            *reason = why;
        return ok;
    }
    probe_one(backend);
    if (reason)
        *reason = probed_reason[backend];
    return probed_ok[backend];
}

SMM_API smm_backend smm_backend_auto(void)
{
    smm_backend named;
    if (env_backend(&named) > 0 && named != SMM_BACKEND_AUTO)
        return named;
    for (size_t i = 0; i < sizeof preference / sizeof preference[0]; i++)
        if (smm_backend_available(preference[i], NULL))
            return preference[i];
    return SMM_BACKEND_REFERENCE;
}
