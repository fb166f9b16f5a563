/*
 * probe.c - what this CPU can do: CPUID for the instruction sets, XGETBV for
 * whether the operating system saves the matching register state. Runs once
 * per process (pthread_once); the result is read-only afterwards.
 */
#include "config.h"
#include "internal.h"

#include <pthread.h>
#include <string.h>

#if (defined(__x86_64__) || defined(__i386__)) && defined(HAVE_CPUID_H)
#include <cpuid.h>
#define SMM_X86 1
#endif

static smm_cpu_info cpu_info;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

#ifdef SMM_X86
static uint64_t read_xcr0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static void add_feature(char *list, size_t cap, int present, const char *name)
{
    if (!present)
        return;
    size_t len = strlen(list);
    size_t need = strlen(name) + (len ? 1 : 0);
    if (len + need + 1 > cap)
        return;
    if (len)
        list[len++] = ' ';
    memcpy(list + len, name, strlen(name) + 1);
}

static void probe_x86(smm_cpu_info *ci)
{
    unsigned a, b, c, d, max_leaf;
    ci->x86 = 1;
    if (!__get_cpuid(0, &max_leaf, &b, &c, &d))
        return;
    memcpy(ci->vendor, &b, 4);
    memcpy(ci->vendor + 4, &d, 4);
    memcpy(ci->vendor + 8, &c, 4);
    ci->vendor[12] = '\0';

    __cpuid(1, a, b, c, d);
    int osxsave = (c >> 27) & 1;
    ci->sse2 = (d >> 26) & 1;
    ci->ssse3 = (c >> 9) & 1;
    ci->sse41 = (c >> 19) & 1;
    ci->sse42 = (c >> 20) & 1;
    int cpu_avx = (c >> 28) & 1, cpu_fma = (c >> 12) & 1, cpu_f16c = (c >> 29) & 1;

    uint64_t xcr0 = osxsave ? read_xcr0() : 0;
    /* XCR0 bits 1 (SSE) and 2 (AVX): YMM state; bits 5-7: opmask, ZMM0-15
     * upper halves, ZMM16-31. */
    ci->os_ymm = (xcr0 & 0x6) == 0x6;
    ci->os_zmm = ci->os_ymm && (xcr0 & 0xE0) == 0xE0;
    /* Bits 17 and 18: the AMX tile configuration and tile data. */
    ci->os_amx = (xcr0 & 0x60000) == 0x60000;

    ci->avx = cpu_avx && ci->os_ymm;
    ci->fma = cpu_fma && ci->avx;
    ci->f16c = cpu_f16c && ci->avx;

    if (max_leaf >= 7) {
        unsigned eax7, ebx7, ecx7, edx7;
        __cpuid_count(7, 0, eax7, ebx7, ecx7, edx7);
        ci->avx2 = ((ebx7 >> 5) & 1) && ci->avx;
        int zmm = ci->os_zmm;
        ci->avx512f = ((ebx7 >> 16) & 1) && zmm;
        ci->avx512dq = ((ebx7 >> 17) & 1) && ci->avx512f;
        ci->avx512bw = ((ebx7 >> 30) & 1) && ci->avx512f;
        ci->avx512vl = ((ebx7 >> 31) & 1) && ci->avx512f;
        ci->avx512_vnni = ((ecx7 >> 11) & 1) && ci->avx512f;
        ci->amx_tile = ((edx7 >> 24) & 1) && ci->os_amx;
        ci->amx_int8 = ((edx7 >> 25) & 1) && ci->amx_tile;
        if (eax7 >= 1) {
            unsigned eax71, ebx71, ecx71, edx71;
            __cpuid_count(7, 1, eax71, ebx71, ecx71, edx71);
            ci->avx_vnni = ((eax71 >> 4) & 1) && ci->avx2;
            ci->avx512_bf16 = ((eax71 >> 5) & 1) && ci->avx512f;
        }
    }

    unsigned max_ext = __get_cpuid_max(0x80000000u, NULL);
    if (max_ext >= 0x80000004u) {
        unsigned regs[12];
        for (unsigned i = 0; i < 3; i++)
            __cpuid(0x80000002u + i, regs[4 * i], regs[4 * i + 1], regs[4 * i + 2], regs[4 * i + 3]);
        memcpy(ci->brand, regs, 48);
        ci->brand[48] = '\0';
        /* Trim the padding some CPUs put around the brand string. */
        char *s = ci->brand;
        while (*s == ' ')
            s++;
        memmove(ci->brand, s, strlen(s) + 1);
        size_t n = strlen(ci->brand);
        while (n > 0 && ci->brand[n - 1] == ' ')
            ci->brand[--n] = '\0';
    }

    char *f = ci->features;
    size_t cap = sizeof ci->features;
    add_feature(f, cap, ci->sse2, "sse2");
    add_feature(f, cap, ci->ssse3, "ssse3");
    add_feature(f, cap, ci->sse41, "sse4.1");
    add_feature(f, cap, ci->sse42, "sse4.2");
    add_feature(f, cap, ci->avx, "avx");
    add_feature(f, cap, ci->avx2, "avx2");
    add_feature(f, cap, ci->fma, "fma");
    add_feature(f, cap, ci->f16c, "f16c");
    add_feature(f, cap, ci->avx_vnni, "avx_vnni");
    add_feature(f, cap, ci->avx512f, "avx512f");
    add_feature(f, cap, ci->avx512dq, "avx512dq");
    add_feature(f, cap, ci->avx512bw, "avx512bw");
    add_feature(f, cap, ci->avx512vl, "avx512vl");
    add_feature(f, cap, ci->avx512_vnni, "avx512_vnni");
    add_feature(f, cap, ci->avx512_bf16, "avx512_bf16");
    add_feature(f, cap, ci->amx_tile, "amx_tile");
    add_feature(f, cap, ci->amx_int8, "amx_int8");
}
#endif

static void probe_once(void)
{
    memset(&cpu_info, 0, sizeof cpu_info);
#ifdef SMM_X86
    probe_x86(&cpu_info);
#endif
}

const smm_cpu_info *smm_cpu_info_get(void)
{
    pthread_once(&cpu_once, probe_once);
    return &cpu_info;
}

SMM_API const char *smm_cpu_features(void)
{
    return smm_cpu_info_get()->features;
}

SMM_API const char *smm_cpu_name(void)
{
    return smm_cpu_info_get()->brand;
}
