/*
 * gpu_loader.h - finds and loads the GPU backends' plugins (gpu_loader.c).
 */
#ifndef SMM_GPU_LOADER_H
#define SMM_GPU_LOADER_H

#include "internal.h"

/*
 * Loads the plugin of GPU backend b (SMM_BACKEND_ROCM or SMM_BACKEND_CUDA):
 * "libscaledmm-rocm.so" / "libscaledmm-cuda.so" from $SMM_GPU_PLUGIN_DIR
 * when set and non-empty, else from the folder scaledmm/ beside the loaded
 * libscaledmm when the plugin is there, else from the compiled-in pkglibdir.
 * Returns its
 * ops table when the plugin loads and reports at least one usable device;
 * else NULL. Either way *reason is a string that lives as long as the
 * process ("available", "no GPU backend in this build", the plugin's or
 * the dynamic loader's reason). Prints nothing. Not thread-safe: called
 * once per backend from the probe (dispatch.c).
 */
const smm_backend_ops *smm_gpu_load(smm_backend b, const char **reason) SMM_INTERNAL;

#endif
