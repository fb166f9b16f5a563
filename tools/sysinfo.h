/*
 * sysinfo.h - facts about the machine the tool runs on.
 */
#ifndef SMM_TOOL_SYSINFO_H
#define SMM_TOOL_SYSINFO_H

#include <stddef.h>

/* Size of the last-level (L3) cache in bytes, from the first source that
 * gives one: /sys/devices/system/cpu/cpu0/cache/indexN (the level-3 entry,
 * as the kernel reports it), sysconf(_SC_LEVEL3_CACHE_SIZE), else 32 MiB.
 * *source (if non-NULL) names where it came from ("sysfs", "sysconf",
 * "default"). */
size_t sysinfo_llc_bytes(const char **source);

/* Threads OpenMP uses by default: omp_get_max_threads() (OMP_NUM_THREADS
 * applies); 1 when built without OpenMP. */
int sysinfo_default_threads(void);

#endif
