/*
 * select.hip - smm_gpu_launch_mm (kernels.h): which GEMM kernel runs a
 * problem, as a short table of rules, and the internal force interface
 * (smm_gpu_force_set). The kernels are in gemm_generic.hip (any GPU),
 * gemm_mfma.hip (AMD), gemm_mma.hip (NVIDIA sm_80+), gemm_wgmma.hip
 * (NVIDIA sm_90a, M > 32) and gemm_decode.hip (NVIDIA, M <= 32); every one
 * gives the same bits, so the rules only choose speed. The measurements
 * behind them are summarised in doc/design.md.
 */
#include "launch.h"
#define SMM_TRACE_NO_BUFFER /* smm_gpu_trace_take reads the other files' */
#include "trace.h"

/* ------------------------------------------------------------------ */
/* Force interface                                                     */
/* ------------------------------------------------------------------ */

SMM_GPU_FORCE_API const char *smm_gpu_kernel_name(int kernel)
{
    static const char *const names[SMM_GPU_KERNEL_COUNT] = {
        "auto", "generic", "mfma", "mma", "wgmma", "tma", "decode", "decode_tma", "decode_ring",
        "tma_pp"};
    return kernel >= 0 && kernel < SMM_GPU_KERNEL_COUNT ? names[kernel] : "?";
}

/* The process default, from SMM_GPU_GEMM_KERNEL (read once; threads racing
 * on it store the same values). */
static smm_gpu_force smm_force_env;
static int smm_force_env_read;

/* The calling thread's force, when set. */
static thread_local smm_gpu_force smm_force_thread;
static thread_local bool smm_force_thread_set;

static unsigned long smm_launch_counts[SMM_GPU_KERNEL_COUNT];

static const smm_gpu_force &smm_force_current(void)
{
    if (smm_force_thread_set)
        return smm_force_thread;
    if (!smm_force_env_read) {
        smm_gpu_force f;
        memset(&f, 0, sizeof f);
        const char *v = getenv("SMM_GPU_GEMM_KERNEL");
        if (v != NULL && strcmp(v, "generic") == 0)
            f.kernel = SMM_GPU_KERNEL_GENERIC;
        f.no_wgmma = v != NULL && strcmp(v, "mma") == 0;
        f.no_tma = v != NULL && strcmp(v, "wgmma") == 0;
        smm_force_env = f;
        smm_force_env_read = 1;
    }
    return smm_force_env;
}

SMM_GPU_FORCE_API void smm_gpu_force_set(const smm_gpu_force *f)
{
    if (f != NULL)
        smm_force_thread = *f;
    smm_force_thread_set = f != NULL;
}

SMM_GPU_FORCE_API void smm_gpu_force_get(smm_gpu_force *f)
{
    *f = smm_force_current();
}

SMM_GPU_FORCE_API void smm_gpu_kernel_counts(smm_gpu_counts *out)
{
    int i;
    for (i = 0; i < SMM_GPU_KERNEL_COUNT; i++)
        out->launches[i] = __atomic_load_n(&smm_launch_counts[i], __ATOMIC_RELAXED);
#if defined(SMM_GPU_NVIDIA)
    out->decode_pre = smm_decode_pre_count();
    out->decode_fused = smm_decode_fused_count();
#else
    out->decode_pre = 0;
    out->decode_fused = 0;
#endif
}

SMM_GPU_FORCE_API int smm_gpu_trace_take(unsigned long long *out, int max)
{
#if defined(SMM_GPU_NVIDIA) && defined(SMM_GPU_TRACE)
    const int a = smm_quant_trace_take(out, max);
    if (a < 0)
        return -1;
    const int b = smm_decode_trace_take(out + (size_t)a * SMM_TRACE_WORDS, max - a);
    return b < 0 ? -1 : a + b;
#else
    (void)out;
    (void)max;
    return -1;
#endif
}

/* ------------------------------------------------------------------ */
/* Device queries                                                      */
/* ------------------------------------------------------------------ */

#if defined(SMM_GPU_NVIDIA)

int smm_cache_dev(void)
{
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64)
        dev = 0;
    return dev;
}

void smm_device_info(int *cc, int *sms)
{
    static int cache_cc[64], cache_sms[64];

    const int dev = smm_cache_dev();
    if (cache_cc[dev] == 0) {
        int major = 0, minor = 0, count = 0;
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
        cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev);
        cache_sms[dev] = count;
        cache_cc[dev] = major * 10 + minor;
    }
    *cc = cache_cc[dev];
    *sms = cache_sms[dev];
}

#endif

/* ------------------------------------------------------------------ */
/* The rules                                                           */
/* ------------------------------------------------------------------ */

/* What the rules look at. k is the forced kernel where it can apply to
 * this problem, else AUTO. */
struct smm_sel {
    const smm_mm_dims *d;
    const smm_gpu_force *f;
    int k;
    int cc, sms;
    bool al16;       /* A's and B's rows 16-byte aligned */
    bool decode;     /* M <= 32, al16, sm_80+, and no tiled kernel forced */
    bool b_static;   /* the caller's: B is a packed B */
    bool big;        /* 128 x 256 tiles still fill the SMs */
    bool sm90a_auto; /* neither no_wgmma nor no_tma */
    bool layer;      /* smm_linear's GEMM, queued right behind the quantizer */
};

struct smm_rule {
    int kernel;                      /* enum smm_gpu_kernel */
    int form;                        /* MMA: enum smm_mma_form */
    bool (*when)(const smm_sel &s);
    const char *why;
};

#if defined(SMM_GPU_NVIDIA)

static bool smm_when_generic(const smm_sel &s)
{
    return s.k == SMM_GPU_KERNEL_GENERIC || s.cc < 80;
}
static bool smm_when_ring(const smm_sel &s)
{
    const int64_t wmib = s.d->n * s.d->k >> 20, m = s.d->m;
    return s.decode && s.cc == 90 &&
           (s.k == SMM_GPU_KERNEL_DECODE_RING ||
            (s.k == SMM_GPU_KERNEL_AUTO && s.sm90a_auto &&
             (s.b_static ? m >= 4 || wmib >= 48 || smm_ring_splits_short(*s.d, s.sms) ||
                               (s.layer && wmib >= 24)
                         : (m > 8 && m <= 16 && wmib >= 48) || (m > 24 && wmib >= 24)))) &&
           smm_have_ring();
}
static bool smm_when_dtma(const smm_sel &s)
{
    return s.decode && s.cc == 90 &&
           (s.k == SMM_GPU_KERNEL_DECODE_TMA ||
            (s.k == SMM_GPU_KERNEL_AUTO && s.d->m > 16 && s.sm90a_auto &&
             (s.d->n + SMM_DTMA_BR - 1) / SMM_DTMA_BR >= 3 * (int64_t)s.sms)) &&
           smm_have_dtma();
}
static bool smm_when_decode(const smm_sel &s)
{
    return s.decode;
}
static bool smm_when_unaligned(const smm_sel &s)
{
    return !s.al16;
}
static bool smm_when_tma_pp(const smm_sel &s)
{
    return s.cc == 90 &&
           (s.k == SMM_GPU_KERNEL_TMA_PP ||
            (s.k == SMM_GPU_KERNEL_AUTO && s.d->m > 32 && s.sm90a_auto)) &&
           smm_have_tma_pp();
}
static bool smm_when_tma(const smm_sel &s)
{
    return s.cc == 90 &&
           (s.k == SMM_GPU_KERNEL_TMA || s.k == SMM_GPU_KERNEL_TMA_PP ||
            (s.k == SMM_GPU_KERNEL_AUTO && s.big && s.sm90a_auto)) &&
           smm_have_tma();
}
static bool smm_when_wgmma(const smm_sel &s)
{
    return s.cc == 90 &&
           (s.k == SMM_GPU_KERNEL_TMA || s.k == SMM_GPU_KERNEL_TMA_PP ||
            s.k == SMM_GPU_KERNEL_WGMMA || (s.k == SMM_GPU_KERNEL_AUTO && s.big && !s.f->no_wgmma)) &&
           smm_have_wgmma();
}
static bool smm_when_big(const smm_sel &s)
{
    return s.big;
}
static bool smm_when_always(const smm_sel &)
{
    return true;
}

/* NVIDIA, in order: the first rule that holds and whose kernel takes the
 * problem runs it (the TMA and sm_90a decode launchers decline what their
 * tensor maps or alignment rules cannot hold). */
static const smm_rule smm_nvidia_rules[] = {
    {SMM_GPU_KERNEL_GENERIC, 0, smm_when_generic,
     "before sm_80 (no integer mma.sync), or forced"},
    {SMM_GPU_KERNEL_DECODE_RING, 0, smm_when_ring,
     "M <= 32 on sm_90a: packed B at M >= 4, >= 48 MiB, a three-way split of a short K "
     "or >= 24 MiB behind the quantizer; "
     "raw B at M 9-16 >= 48 MiB, M 25-32 >= 24 MiB"},
    {SMM_GPU_KERNEL_DECODE_TMA, 0, smm_when_dtma,
     "M 17-32 on sm_90a with >= 3 blocks of 64 weight rows per SM: tokens read a quarter as often"},
    {SMM_GPU_KERNEL_DECODE, 0, smm_when_decode,
     "M <= 32, rows 16-byte aligned: every weight byte read once, straight into mma fragments"},
    {SMM_GPU_KERNEL_MMA, SMM_MMA_128X128_GUARDED, smm_when_unaligned,
     "rows not 16-byte aligned: no cp.async or tensor copies, guarded loads"},
    {SMM_GPU_KERNEL_TMA_PP, 0, smm_when_tma_pp,
     "sm_90a, M > 32, no azp: TMA + wgmma ping-pong, one tile's epilogue under the next one's products"},
    {SMM_GPU_KERNEL_TMA, 0, smm_when_tma,
     "sm_90a, 128 x 256 tiles fill the SMs (azp, which the ping-pong form declines): TMA + wgmma"},
    {SMM_GPU_KERNEL_WGMMA, 0, smm_when_wgmma,
     "sm_90a, 128 x 256 tiles fill the SMs, TMA unavailable or off: cp.async + wgmma"},
    {SMM_GPU_KERNEL_MMA, SMM_MMA_128X256, smm_when_big,
     "128 x 256 tiles fill the SMs: the larger tile reads A and B less"},
    {SMM_GPU_KERNEL_MMA, SMM_MMA_128X128, smm_when_always,
     "otherwise: 128 x 128 tiles give the SMs more blocks"},
};

#else

static bool smm_when_generic(const smm_sel &s)
{
    return s.k == SMM_GPU_KERNEL_GENERIC;
}
static bool smm_when_always(const smm_sel &)
{
    return true;
}

/* AMD, in order. */
static const smm_rule smm_amd_rules[] = {
    {SMM_GPU_KERNEL_GENERIC, 0, smm_when_generic, "forced"},
    {SMM_GPU_KERNEL_MFMA, 0, smm_when_always,
     "every shape: MFMA on gfx908 / gfx90a / gfx940-942, sdot4 or plain code elsewhere"},
};

#endif

/* Launches rule r's kernel; *done false: it declined the problem. */
static gpuError_t smm_run_rule(const smm_rule &r, const smm_sel &s, const smm_mm_dims &dplan,
                               int g, int cs, const smm_epi_params &e, gpuStream_t stream,
                               bool *done)
{
    *done = true;
    switch (r.kernel) {
    case SMM_GPU_KERNEL_GENERIC: return smm_launch_generic(*s.d, e, stream);
#if defined(SMM_GPU_AMD)
    case SMM_GPU_KERNEL_MFMA: return smm_launch_mfma(*s.d, e, stream);
#else
    case SMM_GPU_KERNEL_DECODE_RING: {
        smm_mm_dims dr = dplan;
        dr.b_static = s.b_static; /* as the caller gave it */
        return smm_launch_decode_ring(dr, e, s.sms, *s.f, stream, done);
    }
    case SMM_GPU_KERNEL_DECODE_TMA:
        return smm_launch_decode_tma(dplan, e, s.sms, *s.f, stream, done);
    case SMM_GPU_KERNEL_DECODE: return smm_launch_decode_mma(dplan, e, g, cs, stream);
    case SMM_GPU_KERNEL_MMA: return smm_launch_mma(*s.d, e, (smm_mma_form)r.form, stream);
    case SMM_GPU_KERNEL_TMA: return smm_launch_tma(*s.d, e, s.sms, stream, done);
    case SMM_GPU_KERNEL_TMA_PP:
        return smm_launch_tma_pp(*s.d, e, s.sms, s.f->stages, s.f->tile, stream, done);
    case SMM_GPU_KERNEL_WGMMA: return smm_launch_wgmma(*s.d, e, stream);
#endif
    default: *done = false; return gpuSuccess;
    }
}

/* A problem as the rules see it: the kernels' dimensions and epilogue, the
 * selection inputs, and (NVIDIA, decode problems) the decode plan. */
struct smm_choice {
    smm_mm_dims d, dplan;
    smm_epi_params e;
    smm_sel s;
    int g, cs;
    const smm_rule *rules;
    int nrules;
};

static void smm_choose(smm_choice &c, const smm_mm_problem *p, bool b_static, bool layer)
{
    smm_mm_dims &d = c.d;
    smm_epi_params &e = c.e;
    smm_sel &s = c.s;

    d.a = p->a;
    d.b = p->b;
    d.m = p->m;
    d.n = p->n;
    d.k = p->k;
    d.lda = p->lda;
    d.ldb = p->ldb;
    d.pdl = 0;
    d.b_static = b_static;
    d.pre = 0;

    e.c = p->c;
    e.ldc = p->ldc;
    e.c_dtype = (int)p->c_dtype;
    e.scale_a = p->scale_a;
    e.scale_a_per_row = p->scale_a != NULL && p->scale_a_len != 1;
    e.scale_b = p->scale_b;
    e.scale_b_per_col = p->scale_b != NULL && p->scale_b_len != 1;
    e.bias = p->c_dtype == SMM_DTYPE_I32 ? NULL : p->bias;
    e.azp = p->c_dtype == SMM_DTYPE_I32 ? NULL : p->azp;
    e.azp_per_row = p->azp != NULL && p->azp_len != 1;

    const smm_gpu_force &f = smm_force_current();
    memset(&s, 0, sizeof s);
    s.d = &d;
    s.f = &f;
    s.k = f.kernel;
    s.al16 = smm_aligned(d.a, d.lda, d.m, 16) && smm_aligned(d.b, d.ldb, d.n, 16);
    s.b_static = b_static;
    s.layer = layer;
    s.sm90a_auto = !f.no_wgmma && !f.no_tma;

    c.dplan = d;
    c.g = 1;
    c.cs = 1;
#if defined(SMM_GPU_NVIDIA)
    c.rules = smm_nvidia_rules;
    c.nrules = (int)(sizeof smm_nvidia_rules / sizeof smm_nvidia_rules[0]);
    smm_device_info(&s.cc, &s.sms);
    if (s.k == SMM_GPU_KERNEL_MFMA)
        s.k = SMM_GPU_KERNEL_AUTO;
    {
        const bool tiled = s.k == SMM_GPU_KERNEL_MMA || s.k == SMM_GPU_KERNEL_WGMMA ||
                           s.k == SMM_GPU_KERNEL_TMA || s.k == SMM_GPU_KERNEL_TMA_PP;
        s.decode = s.cc >= 80 && s.k != SMM_GPU_KERNEL_GENERIC && s.al16 && d.m <= 32 && !tiled;
        if (!s.decode && (s.k == SMM_GPU_KERNEL_DECODE || s.k == SMM_GPU_KERNEL_DECODE_TMA ||
                          s.k == SMM_GPU_KERNEL_DECODE_RING))
            s.k = SMM_GPU_KERNEL_AUTO; /* not a decode problem */
    }
    s.big = ((d.m + 127) / 128) * ((d.n + 255) / 256) >= (int64_t)s.sms;
    if (s.decode && !smm_when_generic(s))
        smm_decode_plan(&c.dplan, s.cc, s.sms, f, &c.g, &c.cs);
#else
    c.rules = smm_amd_rules;
    c.nrules = (int)(sizeof smm_amd_rules / sizeof smm_amd_rules[0]);
    if (s.k != SMM_GPU_KERNEL_GENERIC && s.k != SMM_GPU_KERNEL_MFMA)
        s.k = SMM_GPU_KERNEL_AUTO;
#endif
}

/* smm_gpu_launch_mm; layer: the GEMM of smm_linear, right behind its
 * quantizer. */
static gpuError_t smm_launch_mm_as(const smm_mm_problem *p, bool b_static, bool layer,
                                   gpuStream_t stream)
{
    smm_choice c;
    smm_choose(c, p, b_static, layer);
    for (int i = 0; i < c.nrules; i++) {
        if (!c.rules[i].when(c.s))
            continue;
        bool done = false;
        gpuError_t err = smm_run_rule(c.rules[i], c.s, c.dplan, c.g, c.cs, c.e, stream, &done);
        if (err == gpuSuccess && done)
            __atomic_fetch_add(&smm_launch_counts[c.rules[i].kernel], 1, __ATOMIC_RELAXED);
        if (done || err != gpuSuccess)
            return err;
    }
    return gpuErrorInvalidValue; /* not reached: the last rule always holds */
}

gpuError_t smm_gpu_launch_mm(const smm_mm_problem *p, bool b_static, gpuStream_t stream)
{
    return smm_launch_mm_as(p, b_static, false, stream);
}

/* smm_linear in one launch (NVIDIA sm_80+): the DECODE kernel quantizing
 * its tokens, only where forced (fuse 1) and that kernel can run the
 * problem (decode rows, one row group, no cluster, M <= SMM_DEC_QX_ROWS,
 * x's rows 16-byte aligned). It is not chosen by itself: on an H100 it
 * was slower than the two launches at every measured point
 * (doc/design.md). Else the quantizer, then the GEMM. */
gpuError_t smm_gpu_launch_linear(const smm_quantize_args *q, const smm_mm_problem *p,
                                 bool b_static, gpuStream_t stream)
{
#if defined(SMM_GPU_NVIDIA)
    const smm_gpu_force &force = smm_force_current();
    if (force.fuse == 1) {
        smm_choice c;
        smm_choose(c, p, b_static, true);
        const int64_t es = q->x_dtype == SMM_DTYPE_F32 ? 4 : 2;
        const bool fuse = c.s.decode && !smm_when_generic(c.s) && c.g == 1 && c.cs == 1 &&
                          p->m <= SMM_DEC_QX_ROWS && p->k > 0 &&
                          smm_aligned(q->x, q->m > 1 ? q->ldx * es : 0, q->m, 16);
        if (fuse) {
            smm_dec_fuse fz;
            fz.x = q->x;
            fz.ldx = q->ldx;
            fz.q = q->q;
            fz.ldq = q->ldq;
            fz.scale = q->scale;
            fz.azp = q->azp;
            fz.dynamic = q->mode == SMM_QUANT_DYNAMIC_PER_TOKEN;
            bool done = false;
            gpuError_t err =
                smm_launch_decode_fused(c.dplan, c.e, fz, (int)q->x_dtype, stream, &done);
            if (err == gpuSuccess && done)
                __atomic_fetch_add(&smm_launch_counts[SMM_GPU_KERNEL_DECODE], 1,
                                   __ATOMIC_RELAXED);
            if (done || err != gpuSuccess)
                return err;
        }
    }
#endif
    gpuError_t err = smm_gpu_launch_quantize(q, stream);
    return err == gpuSuccess ? smm_launch_mm_as(p, b_static, true, stream) : err;
}
