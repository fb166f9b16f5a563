/*
 * trace.h - a tuning build's per-block timeline of the decode layer's
 * kernels (NVIDIA only). Built with -DSMM_GPU_TRACE, thread 0 of each
 * block of the quantizer (smm_q_rows), the mma.sync decode kernel and the
 * ring decode kernel records the global timer (ns) at the block's start,
 * after its griddepcontrol.wait, after its products and before it leaves,
 * with the kernel, the SM, the block and a tag that tells launches apart
 * (the quantizer: q; the GEMMs: B). The atomic that takes a record's place
 * comes after the last time and delays the block's exit by its own
 * latency. smm_gpu_trace_take (kernels.h) copies the records out. Off (the
 * default), none of this is compiled and smm_gpu_trace_take returns -1.
 *
 * Each translation unit that includes this header has its own buffer
 * (no relocatable device code): it defines a host function that returns
 * smm_trace_take_tu's result, and select.hip's smm_gpu_trace_take calls
 * those (select.hip defines SMM_TRACE_NO_BUFFER: no buffer of its own).
 */
#ifndef SMM_ROCM_TRACE_H
#define SMM_ROCM_TRACE_H

#include "device_common.h" /* kernels.h: the record's format */

#if defined(SMM_GPU_TRACE) && defined(SMM_GPU_NVIDIA) && !defined(SMM_TRACE_NO_BUFFER)
#define SMM_TRACE_MAX (1 << 16)
static __device__ unsigned long long smm_trace_buf[SMM_TRACE_WORDS * SMM_TRACE_MAX];
static __device__ unsigned smm_trace_n;

SMM_DEV unsigned long long smm_trace_clock()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
    return t;
}

/* Record: id = kind | SM << 8 | block << 32. */
SMM_DEV void smm_trace_put(int kind, const void *tag, const unsigned long long *t)
{
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;\n" : "=r"(smid));
    const unsigned long long t_end = smm_trace_clock();
    const unsigned ix = atomicAdd(&smm_trace_n, 1u);
    if (ix < SMM_TRACE_MAX) {
        unsigned long long *o = smm_trace_buf + (size_t)SMM_TRACE_WORDS * ix;
        o[0] = (unsigned long long)kind | (unsigned long long)(smid & 0xffffff) << 8 |
               (unsigned long long)blockIdx.x << 32;
        o[1] = (unsigned long long)(uintptr_t)tag;
        o[2] = t[0];
        o[3] = t[1];
        o[4] = t[2];
        o[5] = t_end;
    }
}

/* Copies up to max records to out (host memory) and empties the buffer;
 * returns the number copied, or -1 on a runtime error. */
static int smm_trace_take_tu(unsigned long long *out, int max)
{
    unsigned n = 0, zero = 0;
    if (max < 0)
        return -1;
    if (cudaMemcpyFromSymbol(&n, smm_trace_n, sizeof n) != cudaSuccess)
        return -1;
    if (n > SMM_TRACE_MAX)
        n = SMM_TRACE_MAX;
    if (n > (unsigned)max)
        n = (unsigned)max;
    if (n > 0 && cudaMemcpyFromSymbol(out, smm_trace_buf,
                                      (size_t)n * SMM_TRACE_WORDS * 8) != cudaSuccess)
        return -1;
    if (cudaMemcpyToSymbol(smm_trace_n, &zero, sizeof zero) != cudaSuccess)
        return -1;
    return (int)n;
}

#define SMM_TRACE_DECL unsigned long long smm_trace_t[3] = {0, 0, 0}
#define SMM_TRACE_AT(i) (smm_trace_t[i] = smm_trace_clock())
#define SMM_TRACE_END(kind, tag)                                                           \
    do {                                                                                   \
        if (threadIdx.x == 0)                                                              \
            smm_trace_put(kind, tag, smm_trace_t);                                         \
    } while (0)
#define SMM_TRACE_TAKE_TU(out, max) smm_trace_take_tu(out, max)
#else
#define SMM_TRACE_DECL ((void)0)
#define SMM_TRACE_AT(i) ((void)0)
#define SMM_TRACE_END(kind, tag) ((void)0)
#define SMM_TRACE_TAKE_TU(out, max) ((void)(out), (void)(max), -1)
#endif

#endif /* SMM_ROCM_TRACE_H */
