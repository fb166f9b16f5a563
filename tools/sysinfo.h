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

/* How many L3 caches the machine has, as many as llc_bytes each: the
 * online CPUs over the CPUs that share cpu0's L3 (its shared_cpu_list in
 * sysfs), rounded up; 1 when sysfs does not say. */
int sysinfo_l3_instances(void);

/* Online CPUs (sysconf(_SC_NPROCESSORS_ONLN)); 0 when unknown. */
int sysinfo_online_cpus(void);

/* CPU time so far, to take the difference of two samples, over the CPUs
 * this process may run on (its affinity mask; ncpus of them):
 * busy_s, the seconds those CPUs together spent running anything (user,
 * nice, system, irq and softirq time of their cpuN lines in /proc/stat;
 * guest time is part of user); steal_s, the seconds the hypervisor ran
 * other guests while they wanted to run (steal time); self_s, this
 * process's own user and system seconds, all its threads (getrusage);
 * wall_s, a monotonic clock. ncpus is 0 where /proc/stat or the mask
 * cannot be read (then nothing else is set). wait_s: the seconds this
 * process's threads have spent runnable but waiting for a CPU (run_delay
 * of each /proc/self/task/T/schedstat, summed over the threads alive now);
 * < 0 where schedstat cannot be read. */
typedef struct sysinfo_cpu_sample {
    int ncpus;
    double busy_s, steal_s, self_s, wall_s, wait_s;
} sysinfo_cpu_sample;
void sysinfo_cpu_sample_take(sysinfo_cpu_sample *s);

/* Threads OpenMP uses by default: omp_get_max_threads() (OMP_NUM_THREADS
 * applies); 1 when built without OpenMP. */
int sysinfo_default_threads(void);

#endif
