/*
 * gpu_loader.c - loads the GPU backends' plugins (interface in
 * gpu_loader.h and, for the plugin side, internal.h).
 *
 * The GPU backends are separate shared objects so that libscaledmm links
 * no GPU runtime: a machine without one loads the library as before. The
 * plugin is opened with RTLD_LOCAL and never closed (the vendor runtimes
 * register exit handlers); a plugin that loads but reports no device stays
 * mapped too, for the same reason.
 */
#define _GNU_SOURCE 1   /* dladdr */
#include "config.h"
#include "gpu_loader.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef SMM_PKGLIBDIR
#define SMM_PKGLIBDIR "/usr/local/lib/scaledmm"
#endif

/* The reasons given for each GPU backend; written once, by the probe. */
static char reasons[2][512];

const smm_backend_ops *smm_gpu_load(smm_backend b, const char **reason)
{
    const char *file;
    int built, slot;
    if (b == SMM_BACKEND_ROCM) {
        file = "libscaledmm-rocm.so";
        slot = 0;
#ifdef SMM_BUILD_ROCM
        built = 1;
#else
        built = 0;
#endif
    } else if (b == SMM_BACKEND_CUDA) {
        file = "libscaledmm-cuda.so";
        slot = 1;
#ifdef SMM_BUILD_CUDA
        built = 1;
#else
        built = 0;
#endif
    } else {
        *reason = "not a GPU backend";
        return NULL;
    }
    char *why = reasons[slot];
    *reason = why;

    /* Where to look: $SMM_GPU_PLUGIN_DIR, else the folder `scaledmm/` beside
     * the libscaledmm that is running (so a relocated tree, such as the one
     * the Python package bundles, finds its plugins), else the compiled-in
     * pkglibdir (the same folder for a library installed where configured). */
    const char *env = getenv("SMM_GPU_PLUGIN_DIR");
    const char *dir = env && *env ? env : SMM_PKGLIBDIR;
    char path[4096];
    struct stat sb;
    char beside[4096];
    Dl_info self;
    if (!(env && *env) && dladdr((void *)&smm_gpu_load, &self) && self.dli_fname) {
        const char *slash = strrchr(self.dli_fname, '/');
        int len = slash ? (int)(slash - self.dli_fname) : 1;
        const char *base = slash ? self.dli_fname : ".";
        if ((size_t)snprintf(beside, sizeof beside, "%.*s/scaledmm", len, base) < sizeof beside &&
            (size_t)snprintf(path, sizeof path, "%s/%s", beside, file) < sizeof path &&
            stat(path, &sb) == 0)
            dir = beside;
    }
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, file) >= sizeof path) {
        snprintf(why, sizeof reasons[0], "%s: plugin directory name too long", file);
        return NULL;
    }
    if (stat(path, &sb) != 0) {
        if (built)
            snprintf(why, sizeof reasons[0], "%s not found in %s (not installed?)", file, dir);
        else
            snprintf(why, sizeof reasons[0], "no GPU backend in this build (configure %s)",
                     slot == 1 ? "--with-cuda" : "--with-rocm");
        return NULL;
    }

    dlerror();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        /* Typically the vendor runtime library is missing. */
        const char *e = dlerror();
        snprintf(why, sizeof reasons[0], "%s: %s", file, e ? e : "cannot be loaded");
        return NULL;
    }
    smm_gpu_plugin_entry_fn entry;
    void *sym = dlsym(h, SMM_GPU_PLUGIN_ENTRY);
    memcpy(&entry, &sym, sizeof entry);   /* object pointer to function pointer */
    if (!sym) {
        snprintf(why, sizeof reasons[0], "%s: no %s (not a scaledmm GPU plugin)", file,
                 SMM_GPU_PLUGIN_ENTRY);
        dlclose(h);
        return NULL;
    }
    const char *plugin_reason = NULL;
    const smm_backend_ops *ops = entry(SMM_GPU_PLUGIN_ABI, &plugin_reason);
    if (!ops) {
        snprintf(why, sizeof reasons[0], "%s: %s", file,
                 plugin_reason ? plugin_reason : "no usable device");
        return NULL;
    }
    if (ops->id != b || !ops->name || !ops->mm || !ops->quantize || !ops->dev_malloc ||
        !ops->dev_free || !ops->dev_memcpy || !ops->set_stream || !ops->synchronize ||
        !ops->pointer_kinds) {
        snprintf(why, sizeof reasons[0], "%s: incomplete operations table (plugin of another "
                 "version?)", file);
        return NULL;
    }
    snprintf(why, sizeof reasons[0], "%s", plugin_reason ? plugin_reason : "available");
    return ops;
}
