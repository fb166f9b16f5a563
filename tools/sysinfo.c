/*
 * sysinfo.c - last-level cache size, CPU time samples and default thread
 * count (sysinfo.h).
 */
#define _GNU_SOURCE 1   /* sched_getaffinity, cpu_set_t */
#include "sysinfo.h"

#ifdef __linux__
#include <dirent.h>
#include <sched.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define LLC_FALLBACK ((size_t)32 << 20)

/* Reads one line of a small sysfs file into buf; 0 on success. */
static int read_line(const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "r");
    int ok;
    if (!f)
        return -1;
    ok = fgets(buf, (int)size, f) != NULL;
    fclose(f);
    if (!ok)
        return -1;
    buf[strcspn(buf, "\n")] = '\0';
    return 0;
}

/* "32768K", "1M" or plain bytes -> bytes; 0 when unparsable. */
static size_t parse_size(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s)
        return 0;
    switch (*end) {
    case 'K': v <<= 10; break;
    case 'M': v <<= 20; break;
    case 'G': v <<= 30; break;
    case '\0': break;
    default: return 0;
    }
    return (size_t)v;
}

static size_t llc_from_sysfs(void)
{
    char path[128], buf[64];
    int i;
    for (i = 0; i < 16; i++) {
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        if (read_line(path, buf, sizeof buf) != 0)
            break;
        if (strcmp(buf, "3") != 0)
            continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (read_line(path, buf, sizeof buf) == 0)
            return parse_size(buf);
    }
    return 0;
}

size_t sysinfo_llc_bytes(const char **source)
{
    size_t v = llc_from_sysfs();
    const char *src = "sysfs";
    if (v == 0) {
#ifdef _SC_LEVEL3_CACHE_SIZE
        long s = sysconf(_SC_LEVEL3_CACHE_SIZE);
        v = s > 0 ? (size_t)s : 0;
        src = "sysconf";
#endif
    }
    if (v == 0) {
        v = LLC_FALLBACK;
        src = "default";
    }
    if (source)
        *source = src;
    return v;
}

/* CPUs in a list such as "0-7,64-71"; 0 when unparsable. */
static int count_cpu_list(const char *s)
{
    int n = 0;
    while (*s) {
        char *end;
        long a = strtol(s, &end, 10), b;
        if (end == s || a < 0)
            return 0;
        b = a;
        if (*end == '-') {
            s = end + 1;
            b = strtol(s, &end, 10);
            if (end == s || b < a)
                return 0;
        }
        n += (int)(b - a + 1);
        s = end;
        if (*s == ',')
            s++;
        else if (*s != '\0')
            return 0;
    }
    return n;
}

int sysinfo_l3_instances(void)
{
    char path[128], buf[256];
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int i;
    for (i = 0; i < 16; i++) {
        int sharing;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        if (read_line(path, buf, sizeof buf) != 0)
            break;
        if (strcmp(buf, "3") != 0)
            continue;
        snprintf(path, sizeof path,
                 "/sys/devices/system/cpu/cpu0/cache/index%d/shared_cpu_list", i);
        if (read_line(path, buf, sizeof buf) != 0)
            return 1;
        sharing = count_cpu_list(buf);
        if (sharing < 1 || online < 1)
            return 1;
        return (int)((online + sharing - 1) / sharing);
    }
    return 1;
}

int sysinfo_online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 0;
}

#ifdef __linux__
/* Sum of run_delay (ns) over /proc/self/task/T/schedstat; -1 on failure. */
static double task_wait_s(void)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    double sum = 0.0;
    int any = 0;
    if (!d)
        return -1.0;
    while ((e = readdir(d)) != NULL) {
        char path[300];
        unsigned long long run, delay;
        FILE *f;
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/schedstat", e->d_name);
        f = fopen(path, "r");
        if (!f)
            continue;   /* the thread ended meanwhile */
        if (fscanf(f, "%llu %llu", &run, &delay) == 2) {
            sum += (double)delay * 1e-9;
            any = 1;
        }
        fclose(f);
    }
    closedir(d);
    return any ? sum : -1.0;
}

void sysinfo_cpu_sample_take(sysinfo_cpu_sample *s)
{
    cpu_set_t mask;
    struct rusage ru;
    struct timespec ts;
    char line[512];
    long tck = sysconf(_SC_CLK_TCK);
    unsigned long long busy = 0, steal = 0;
    int ncpus = 0;
    FILE *f;

    memset(s, 0, sizeof *s);
    if (tck <= 0 || sched_getaffinity(0, sizeof mask, &mask) != 0)
        return;
    f = fopen("/proc/stat", "r");
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        unsigned long long user, nice, sys, idle, iowait, irq, softirq, st;
        int cpu;
        if (strncmp(line, "cpu", 3) != 0)
            break;   /* the cpu lines come first */
        if (sscanf(line, "cpu%d %llu %llu %llu %llu %llu %llu %llu %llu", &cpu, &user, &nice,
                   &sys, &idle, &iowait, &irq, &softirq, &st) != 9)
            continue;   /* the aggregate "cpu " line */
        if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &mask))
            continue;
        busy += user + nice + sys + irq + softirq;
        steal += st;
        ncpus++;
    }
    fclose(f);
    if (ncpus == 0 || getrusage(RUSAGE_SELF, &ru) != 0 ||
        clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        return;
    s->ncpus = ncpus;
    s->busy_s = (double)busy / (double)tck;
    s->steal_s = (double)steal / (double)tck;
    s->self_s = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
                (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
    s->wall_s = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
    s->wait_s = task_wait_s();
}
#else
void sysinfo_cpu_sample_take(sysinfo_cpu_sample *s)
{
    memset(s, 0, sizeof *s);
}
#endif

int sysinfo_default_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}
