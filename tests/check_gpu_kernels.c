/*
 * check_gpu_kernels.c - every GPU GEMM kernel family, forced in turn
 * through the plugin's internal force interface (lib/rocm/kernels.h), on
 * the edge shapes of its tiles, compared bit for bit with the reference
 * backend (lib/reference.c, through the public API on a REFERENCE
 * context); and the GPU quantizer against the reference on random cases.
 *
 * Shapes: M, N and K below, at and across the tile sizes (8, 16, 32, 64,
 * 128, 256), odd K, K = 0, a K whose int32 sums wrap; random row strides
 * and 0..15-byte base offsets (unaligned rows take the guarded paths);
 * every output type; per-tensor / per-token scale_a, per-tensor /
 * per-channel scale_b, optional bias, optional per-tensor / per-token
 * azp, special scale and bias values (NaN, Inf, subnormals, -0, values
 * that overflow float16 / bfloat16), azp values that wrap; a raw or a
 * packed B (the decode kernels read a packed B early); the decode
 * kernels' row groups, clusters, stages and shared-memory form forced at
 * random. C is poisoned around and inside its strided view: the bytes
 * outside the view must be unchanged, as the reference leaves them.
 *
 * Then what a caller's pipeline does around the kernels, through the
 * public API: (graph) a quantizer call and a mm, or a mm alone, captured
 * into a CUDA graph in the strictest capture mode (the first launches of
 * the process, so each launch path's per-device set-up happens inside a
 * capture) and replayed twice, the outputs poisoned again in between (some
 * as one smm_linear call, against the reference's two calls);
 * (late_inputs) A, scale_a and azp written by the quantizer just before
 * the mm on the same stream, which a decode kernel launched early (reading
 * a packed B before its wait) must not read before they land; (chain) two
 * decode mms chained without a synchronisation, the first's int32 output
 * the second's A; (convert_all) every binary32 pattern through the
 * kernels' bfloat16 and float16 output conversion (as per-channel scales
 * of a mm whose sums are 1), against lib/convert.c's.
 *
 * A forced kernel that cannot run a problem gives way to the automatic
 * choice (kernels.h); the suite prints, per family, how many cases ran it.
 * Families a device lacks (sm_90a kernels on other GPUs) may run no case;
 * with SMM_TEST_GPU_ALL_KERNELS=1 every family of the vendor must run.
 *
 * Without a GPU backend that can run here (no device, or a build without
 * one), the suite exits 77 (SKIP) and says why.
 */
#include "config.h"
#include "testutil.h"

#define SMM_GPU_FORCE_ONLY
#include "../lib/rocm/kernels.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static smm_backend gpu_backend;
static smm_gpu_force_set_fn force_set;
static smm_gpu_kernel_counts_fn kernel_counts;
static smm_gpu_kernel_name_fn kernel_name;

/* Per family: cases forced, cases in which the forced kernel ran. */
static long fam_cases[SMM_GPU_KERNEL_COUNT], fam_ran[SMM_GPU_KERNEL_COUNT];
/* AUTO: which kernel the rules chose, per kernel. */
static long auto_chose[SMM_GPU_KERNEL_COUNT];

static const int nvidia_families[] = {
    SMM_GPU_KERNEL_AUTO, SMM_GPU_KERNEL_GENERIC, SMM_GPU_KERNEL_MMA,
    SMM_GPU_KERNEL_WGMMA, SMM_GPU_KERNEL_TMA, SMM_GPU_KERNEL_TMA_PP,
    SMM_GPU_KERNEL_DECODE, SMM_GPU_KERNEL_DECODE_TMA, SMM_GPU_KERNEL_DECODE_RING};
static const int amd_families[] = {SMM_GPU_KERNEL_AUTO, SMM_GPU_KERNEL_GENERIC,
                                   SMM_GPU_KERNEL_MFMA};

static int is_decode(int kernel)
{
    return kernel == SMM_GPU_KERNEL_DECODE || kernel == SMM_GPU_KERNEL_DECODE_TMA ||
           kernel == SMM_GPU_KERNEL_DECODE_RING;
}

/* Finds the force interface in the plugin the library loaded for the
 * GPU context (the same path: dlopen returns the loaded copy). */
static void find_force_interface(void)
{
    const char *dir = getenv("SMM_GPU_PLUGIN_DIR");
    const char *file =
        gpu_backend == SMM_BACKEND_CUDA ? "libscaledmm-cuda.so" : "libscaledmm-rocm.so";
    char path[4096];
    void *h;

    ck_assert_msg(dir != NULL && *dir, "SMM_GPU_PLUGIN_DIR is not set (make check sets it)");
    snprintf(path, sizeof path, "%s/%s", dir, file);
    h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    ck_assert_msg(h != NULL, "the GPU plugin %s is not loaded: %s", path, dlerror());
    force_set = (smm_gpu_force_set_fn)dlsym(h, "smm_gpu_force_set");
    kernel_counts = (smm_gpu_kernel_counts_fn)dlsym(h, "smm_gpu_kernel_counts");
    kernel_name = (smm_gpu_kernel_name_fn)dlsym(h, "smm_gpu_kernel_name");
    ck_assert_msg(force_set && kernel_counts && kernel_name,
                  "%s does not export the force interface (plugin.map)", path);
}

/* ---- random inputs ---- */

static float f32_of_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A scale or bias: mostly moderate, special_pct percent special values. */
static float rnd_float(cf_rng *r, int special_pct, float mag)
{
    if (cf_rng_range(r, 0, 99) < special_pct) {
        switch (cf_rng_range(r, 0, 7)) {
        case 0: return f32_of_bits(0x7FC00000u);              /* NaN */
        case 1: return f32_of_bits(0x7F800000u);              /* +Inf */
        case 2: return f32_of_bits(0xFF800000u);              /* -Inf */
        case 3: return f32_of_bits(0x80000000u);              /* -0 */
        case 4: return f32_of_bits((uint32_t)cf_rng_range(r, 1, 0x7FFFFF)); /* subnormal */
        case 5: return 1e30f;                                 /* overflows f16 / bf16 */
        case 6: return -3.0e38f;
        default: return 65504.0f;
        }
    }
    return (float)((double)cf_rng_range(r, -1000000, 1000000) / 1000000.0) * mag;
}

static const int64_t edge_mn[] = {1,  2,  3,  4,  7,   8,   9,   15,  16,  17,  24,  25,
                                  31, 32, 33, 63, 64,  65,  127, 128, 129, 255, 256, 257};
static const int64_t edge_k[] = {0,  1,  3,  4,  15,  16,  17,  31,  32,  33,  63,
                                 64, 65, 127, 128, 129, 255, 256, 257, 1000, 4096};

static int64_t pick(cf_rng *r, const int64_t *v, int n)
{
    return v[cf_rng_range(r, 0, n - 1)];
}

/* A row stride for rows of `len` bytes / elements: often a multiple of
 * 16 (the aligned paths), else anything from len up. */
static int64_t rnd_ld(cf_rng *r, int64_t len, int64_t rows)
{
    if (rows <= 1 && cf_rng_range(r, 0, 1))
        return len > 0 ? len : 1;
    if (cf_rng_range(r, 0, 9) < 6)
        return (len + 15) / 16 * 16 + 16 * cf_rng_range(r, 0, 2);
    return (len > 0 ? len : 1) + cf_rng_range(r, 0, 17);
}

static size_t dtype_size(smm_dtype t)
{
    return t == SMM_DTYPE_I32 || t == SMM_DTYPE_F32 ? 4 : t == SMM_DTYPE_I8 ? 1 : 2;
}

/* ---- one case ---- */

typedef struct gemm_case {
    int64_t m, n, k, lda, ldb, ldc;
    int off_a, off_b, off_c; /* base offsets in bytes (C: in elements) */
    smm_dtype c_dtype;
    int scale_a_per_row, scale_b_per_col, bias, azp; /* azp: 0 none, 1 tensor, 2 row */
    int packed, wrap;
    smm_gpu_force force;
} gemm_case;

/* Device copy of `bytes` bytes of host memory at an offset `off` into a
 * fresh allocation (returned in *base for smm_free). */
static void *to_dev(smm_context *g, const void *src, size_t bytes, size_t off, void **base)
{
    void *p = NULL;
    ck_assert_int_eq(smm_malloc(g, bytes + off + 16, &p), SMM_OK);
    *base = p;
    if (bytes > 0)
        ck_assert_int_eq(smm_memcpy(g, (char *)p + off, src, bytes, SMM_MEMCPY_HOST_TO_DEVICE),
                         SMM_OK);
    return (char *)p + off;
}

/* Runs c on the reference and on the GPU, compares; returns 1 when the
 * forced kernel ran (AUTO: always). */
static int run_case(smm_context *ref, smm_context *g, const gemm_case *c, cf_rng *r)
{
    const int64_t m = c->m, n = c->n, k = c->k;
    const size_t a_bytes = m > 0 ? (size_t)((m - 1) * c->lda + k) : 0;
    const size_t b_bytes = n > 0 ? (size_t)((n - 1) * c->ldb + k) : 0;
    const size_t es = dtype_size(c->c_dtype);
    const size_t c_elems = (size_t)((m - 1) * c->ldc + n);
    const size_t c_bytes = c_elems * es;
    int8_t *a = malloc(a_bytes + 1), *b = malloc(b_bytes + 1);
    unsigned char *c_ref = malloc(c_bytes), *c_gpu = malloc(c_bytes);
    float *sa = malloc(sizeof(float) * (size_t)m), *sb = malloc(sizeof(float) * (size_t)n);
    float *bias = malloc(sizeof(float) * (size_t)n);
    int32_t *azp = malloc(sizeof(int32_t) * (size_t)m);
    size_t i;

    ck_assert(a && b && c_ref && c_gpu && sa && sb && bias && azp);
    for (i = 0; i < a_bytes; i++)
        a[i] = c->wrap ? -128 : (int8_t)cf_rng_range(r, -128, 127);
    for (i = 0; i < b_bytes; i++)
        b[i] = c->wrap ? -128 : (int8_t)cf_rng_range(r, -128, 127);
    for (i = 0; i < c_bytes; i++)
        c_ref[i] = (unsigned char)(0xA5 ^ (i * 7));
    for (int64_t j = 0; j < m; j++) {
        sa[j] = rnd_float(r, 5, 0.05f);
        azp[j] = cf_rng_range(r, 0, 9) == 0 ? (int32_t)(uint32_t)cf_rng_next(r)
                                            : (int32_t)cf_rng_range(r, -128, 127);
    }
    for (int64_t j = 0; j < n; j++) {
        sb[j] = rnd_float(r, 5, 0.05f);
        bias[j] = rnd_float(r, 5, 10.0f);
    }

    /* Device copies. */
    void *ba, *bb, *bc, *bsa, *bsb, *bbias, *bazp;
    const int8_t *da = to_dev(g, a, a_bytes, (size_t)c->off_a, &ba);
    const int8_t *db = to_dev(g, b, b_bytes, (size_t)c->off_b, &bb);
    void *dc = to_dev(g, c_ref, c_bytes, (size_t)c->off_c * es, &bc);
    const float *dsa = to_dev(g, sa, sizeof(float) * (size_t)m, 0, &bsa);
    const float *dsb = to_dev(g, sb, sizeof(float) * (size_t)n, 0, &bsb);
    const float *dbias = to_dev(g, bias, sizeof(float) * (size_t)n, 0, &bbias);
    const int32_t *dazp = to_dev(g, azp, sizeof(int32_t) * (size_t)m, 0, &bazp);
    smm_packed_b *pb = NULL;
    if (c->packed)
        ck_assert_int_eq(smm_pack_b(g, n, k, db, c->ldb, &pb), SMM_OK);

    smm_gpu_counts before, after;
    smm_status st_ref, st_gpu;
    kernel_counts(&before);
    force_set(&c->force);
    if (c->c_dtype == SMM_DTYPE_I32) {
        st_ref = smm_gemm_s8s8s32(ref, m, n, k, a, c->lda, b, c->ldb, (int32_t *)c_ref, c->ldc);
        st_gpu = c->packed ? smm_gemm_s8s8s32_packed(g, m, n, k, da, c->lda, pb, dc, c->ldc)
                           : smm_gemm_s8s8s32(g, m, n, k, da, c->lda, db, c->ldb, dc, c->ldc);
    } else {
        smm_scaled_mm_args x;
        memset(&x, 0, sizeof x);
        x.m = m, x.n = n, x.k = k;
        x.a = a, x.lda = c->lda, x.b = b, x.ldb = c->ldb;
        x.scale_a = sa, x.scale_a_len = c->scale_a_per_row ? m : 1;
        x.scale_b = sb, x.scale_b_len = c->scale_b_per_col ? n : 1;
        x.bias = c->bias ? bias : NULL;
        x.azp = c->azp ? azp : NULL, x.azp_len = c->azp == 2 ? m : 1;
        x.c = c_ref, x.ldc = c->ldc, x.c_dtype = c->c_dtype;
        st_ref = smm_scaled_mm(ref, &x);
        x.a = da, x.b = c->packed ? NULL : db, x.b_packed = pb;
        x.scale_a = dsa, x.scale_b = dsb;
        x.bias = c->bias ? dbias : NULL, x.azp = c->azp ? dazp : NULL;
        x.c = dc;
        st_gpu = smm_scaled_mm(g, &x);
    }
    force_set(NULL);
    ck_assert_int_eq(smm_synchronize(g), SMM_OK);
    kernel_counts(&after);
    ck_assert_msg(st_ref == st_gpu, "status: reference %s, GPU %s (%s)", smm_strerror(st_ref),
                  smm_strerror(st_gpu), smm_context_last_error(g));
    ck_assert_int_eq(smm_memcpy(g, c_gpu, dc, c_bytes, SMM_MEMCPY_DEVICE_TO_HOST), SMM_OK);

    int ran = -1;
    for (int kk = 1; kk < SMM_GPU_KERNEL_COUNT; kk++)
        if (after.launches[kk] != before.launches[kk])
            ran = kk;
    if (memcmp(c_ref, c_gpu, c_bytes) != 0) {
        size_t at = 0;
        while (c_ref[at] == c_gpu[at])
            at++;
        ck_abort_msg("forced %s (ran %s): M %" PRId64 " N %" PRId64 " K %" PRId64
                     " lda %" PRId64 " ldb %" PRId64 " ldc %" PRId64
                     " offsets %d %d %d, %s, scale_a %s, scale_b %s, bias %d, azp %d, "
                     "packed %d, groups %d cluster %d stages %d tile %d pre %d: C differs at "
                     "byte %zu (element %zu)",
                     kernel_name(c->force.kernel), ran > 0 ? kernel_name(ran) : "none", m, n,
                     k, c->lda, c->ldb, c->ldc, c->off_a, c->off_b, c->off_c,
                     smm_dtype_name(c->c_dtype), c->scale_a_per_row ? "row" : "tensor",
                     c->scale_b_per_col ? "col" : "tensor", c->bias, c->azp, c->packed,
                     c->force.groups, c->force.cluster, c->force.stages, c->force.tile,
                     c->force.pre, at, at / es);
    }

    smm_packed_b_destroy(pb);
    smm_free(g, ba), smm_free(g, bb), smm_free(g, bc), smm_free(g, bsa), smm_free(g, bsb);
    smm_free(g, bbias), smm_free(g, bazp);
    free(a), free(b), free(c_ref), free(c_gpu), free(sa), free(sb), free(bias), free(azp);
    if (st_gpu != SMM_OK || m == 0 || n == 0)
        return 0;
    if (c->force.kernel == SMM_GPU_KERNEL_AUTO) {
        if (ran > 0)
            auto_chose[ran]++;
        return 1;
    }
    return ran == c->force.kernel;
}

static void random_case(cf_rng *r, gemm_case *c, int kernel, int big)
{
    static const smm_dtype types[] = {SMM_DTYPE_I32, SMM_DTYPE_F32, SMM_DTYPE_F16,
                                      SMM_DTYPE_BF16};
    memset(c, 0, sizeof *c);
    c->m = pick(r, edge_mn, (int)(sizeof edge_mn / sizeof edge_mn[0]));
    if (is_decode(kernel) || cf_rng_range(r, 0, 3) == 0)
        c->m = cf_rng_range(r, 1, 33);
    c->n = pick(r, edge_mn, (int)(sizeof edge_mn / sizeof edge_mn[0]));
    c->k = pick(r, edge_k, (int)(sizeof edge_k / sizeof edge_k[0]));
    if (big && kernel == SMM_GPU_KERNEL_TMA_PP && cf_rng_range(r, 0, 1)) {
        /* more k-tiles than stages, and more than two 64 x 256 (or 128
         * x 128) tiles per SM: each warpgroup's second tile */
        c->m = cf_rng_range(r, 1500, 2100);
        c->n = cf_rng_range(r, 2048, 2300);
        c->k = cf_rng_range(r, 600, 1100);
    } else if (big) {
        c->m = cf_rng_range(r, 0, 1) ? 2048 : cf_rng_range(r, 1, 32);
        c->n = 4096 + cf_rng_range(r, 0, 1) * cf_rng_range(r, 1, 255);
        c->k = 128 * cf_rng_range(r, 1, 3) + cf_rng_range(r, 0, 1) * 64;
    }
    c->lda = rnd_ld(r, c->k, c->m);
    c->ldb = rnd_ld(r, c->k, c->n);
    c->ldc = rnd_ld(r, c->n, c->m);
    if (cf_rng_range(r, 0, 9) < 2) {
        c->off_a = (int)cf_rng_range(r, 0, 15);
        c->off_b = (int)cf_rng_range(r, 0, 15);
    }
    c->c_dtype = types[cf_rng_range(r, 0, 3)];
    c->off_c = cf_rng_range(r, 0, 9) < 2 ? (int)cf_rng_range(r, 1, 3) : 0;
    if (c->c_dtype == SMM_DTYPE_I32 || c->c_dtype == SMM_DTYPE_F32)
        c->off_c = 0; /* 4-byte elements stay 4-byte aligned */
    c->scale_a_per_row = (int)cf_rng_range(r, 0, 1);
    c->scale_b_per_col = (int)cf_rng_range(r, 0, 1);
    c->bias = (int)cf_rng_range(r, 0, 1);
    c->azp = (int)cf_rng_range(r, 0, 2);
    c->packed = (int)cf_rng_range(r, 0, 1);
    c->force.kernel = kernel;
    if (is_decode(kernel) && cf_rng_range(r, 0, 1)) {
        static const int g[] = {1, 2, 4};
        c->force.groups = g[cf_rng_range(r, 0, 2)];
        /* the ring runs 3; the others take it as 2 */
        c->force.cluster = (int)cf_rng_range(r, 1, 4);
        c->force.pre = (int)cf_rng_range(r, -1, 1);
        if (kernel == SMM_GPU_KERNEL_DECODE_TMA)
            c->force.stages = (int)cf_rng_range(r, 2, 16);
        if (kernel == SMM_GPU_KERNEL_DECODE_RING)
            c->force.stages = (int)cf_rng_range(r, 3, 8);
    }
    if (kernel == SMM_GPU_KERNEL_TMA_PP) {
        /* It declines azp and unaligned rows: mostly cases it takes. */
        static const int st[] = {0, 4, 5, 6};
        c->force.stages = st[cf_rng_range(r, 0, 3)];
        c->force.tile = (int)cf_rng_range(r, 0, 2);
        if (cf_rng_range(r, 0, 3) > 0)
            c->azp = 0;
        if (cf_rng_range(r, 0, 1)) {
            c->off_a = c->off_b = 0;
            c->lda = (c->lda + 15) / 16 * 16;
            c->ldb = (c->ldb + 15) / 16 * 16;
        }
    }
}

static void run_family(int kernel, int cases)
{
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 1);
    smm_context *g = tu_ctx(gpu_backend, 0);
    char name[64];
    snprintf(name, sizeof name, "family-%d", kernel);
    cf_rng r = tu_rng(name);
    gemm_case c;

    find_force_interface();
    for (int i = 0; i < cases; i++) {
        /* Large cases: many tiles a block (the persistent kernels). */
        random_case(&r, &c, kernel, i < (kernel == SMM_GPU_KERNEL_TMA_PP ? 6 : 2));
        if (i == 2) { /* int32 sums that wrap */
            c.m = 2, c.n = 3, c.k = 140000, c.lda = c.ldb = 140000, c.ldc = 3;
            c.off_a = c.off_b = c.off_c = 0, c.wrap = 1;
        }
        fam_cases[kernel]++;
        fam_ran[kernel] += run_case(ref, g, &c, &r);
    }
    printf("check_gpu_kernels: family %s: %ld cases, the forced kernel ran in %ld\n",
           kernel_name(kernel), fam_cases[kernel], fam_ran[kernel]);
    if (kernel == SMM_GPU_KERNEL_AUTO)
        for (int kk = 1; kk < SMM_GPU_KERNEL_COUNT; kk++)
            if (auto_chose[kk])
                printf("check_gpu_kernels: family auto: %s chosen in %ld\n", kernel_name(kk),
                       auto_chose[kk]);
    fflush(stdout);
    /* The kernels every GPU of the vendor has must have run. */
    const char *all = getenv("SMM_TEST_GPU_ALL_KERNELS");
    const int must = (all && strcmp(all, "1") == 0) || kernel == SMM_GPU_KERNEL_AUTO ||
                     kernel == SMM_GPU_KERNEL_GENERIC || kernel == SMM_GPU_KERNEL_MFMA;
    ck_assert_msg(!must || fam_ran[kernel] > 0, "the forced kernel %s never ran",
                  kernel_name(kernel));
    smm_context_destroy(g);
    smm_context_destroy(ref);
}

START_TEST(test_family)
{
    const int *fams = gpu_backend == SMM_BACKEND_CUDA ? nvidia_families : amd_families;
    const int nf = gpu_backend == SMM_BACKEND_CUDA
                       ? (int)(sizeof nvidia_families / sizeof nvidia_families[0])
                       : (int)(sizeof amd_families / sizeof amd_families[0]);
    if (_i < nf)
        run_family(fams[_i], 120);
}
END_TEST

/* ---- the quantizer ---- */

START_TEST(test_quantize)
{
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 1);
    smm_context *g = tu_ctx(gpu_backend, 0);
    cf_rng r = tu_rng("quantize");
    static const smm_dtype xt[] = {SMM_DTYPE_F32, SMM_DTYPE_F16, SMM_DTYPE_BF16};
    int on_rows = 0;

    for (int i = 0; i < 600; i++) {
        const smm_dtype t = xt[cf_rng_range(&r, 0, 2)];
        const size_t es = dtype_size(t);
        /* Half the cases in whole 16-byte chunks (v elements), which the
         * register form takes when x is aligned: up to 8192 chunks; a few
         * past that (the element-strided form). */
        const int64_t v = (int64_t)(16 / es);
        int64_t chunked = cf_rng_range(&r, 0, 1);
        const int64_t big = cf_rng_range(&r, 0, 19) == 0 ? 9 * 1024 * v : 0;
        int64_t m = cf_rng_range(&r, 1, 40), k;
        if (big) {
            m = cf_rng_range(&r, 1, 3);
            k = cf_rng_range(&r, 0, 1) ? cf_rng_range(&r, 1, 8192) * v
                                       : cf_rng_range(&r, 8185, 9 * 1024) * v;
        } else if (chunked) {
            k = (cf_rng_range(&r, 0, 9) == 0 ? cf_rng_range(&r, 100, 1200)
                                             : cf_rng_range(&r, 1, 40)) * v;
        } else {
            k = cf_rng_range(&r, 0, 9) == 0 ? cf_rng_range(&r, 1000, 9000)
                                            : cf_rng_range(&r, 0, 300);
        }
        if (i == 599) { /* more rows than blocks: blocks take a second row */
            m = 65535 + cf_rng_range(&r, 1, 1000);
            k = v * cf_rng_range(&r, 1, 4);
            chunked = 1;
        }
        const int64_t ldx = k + (chunked || big ? v * cf_rng_range(&r, 0, 2)
                                                : cf_rng_range(&r, 0, 1) * cf_rng_range(&r, 0, 9));
        const int64_t ldq = k + cf_rng_range(&r, 0, 1) * cf_rng_range(&r, 0, 9);
        /* x at an offset of 0 (aligned) or of a few elements; q at 0 or
         * 1..7 bytes. */
        const size_t off_x = cf_rng_range(&r, 0, 3) == 0 ? es * (size_t)cf_rng_range(&r, 1, 7) : 0;
        const size_t off_q = cf_rng_range(&r, 0, 3) == 0 ? (size_t)cf_rng_range(&r, 1, 7) : 0;
        const int dynamic = (int)cf_rng_range(&r, 0, 1), with_azp = (int)cf_rng_range(&r, 0, 1);
        /* Rows of one kind: 0 random, 1 all zeros, 2 one value, 3 random
         * with NaN / Inf / -0 / subnormals at 5%. */
        const int rows = cf_rng_range(&r, 0, 4) == 0 ? (int)cf_rng_range(&r, 1, 3) : 0;
        const size_t xb = (size_t)((m - 1) * ldx + k) * es, qb = (size_t)((m - 1) * ldq + k);
        const size_t sn = dynamic ? (size_t)m : 1;
        unsigned char *x = malloc(xb + 1);
        int8_t *q_ref = malloc(qb + 1), *q_gpu = malloc(qb + 1);
        float *s_ref = malloc(sn * 4), *s_gpu = malloc(sn * 4);
        int32_t *z_ref = malloc(sn * 4), *z_gpu = malloc(sn * 4);
        const float one = rnd_float(&r, 0, 50.0f);
        size_t j;

        on_rows += k > 0 && k % v == 0 && (m == 1 || ldx % v == 0) && off_x % 16 == 0 &&
                   k / v <= 8192;
        for (j = 0; j < xb / es; j++) {
            float f = rows == 1   ? 0.0f
                      : rows == 2 ? one
                                  : rnd_float(&r, rows == 3 ? 5 : 2,
                                              cf_rng_range(&r, 0, 3) == 0 ? 1e4f : 3.0f);
            if (es == 4)
                memcpy(x + 4 * j, &f, 4);
            else {
                uint16_t h = t == SMM_DTYPE_F16 ? smm_f32_to_f16(f) : smm_f32_to_bf16(f);
                memcpy(x + 2 * j, &h, 2);
            }
        }
        memset(q_ref, 0x5A, qb), memset(q_gpu, 0x5A, qb);
        for (j = 0; j < sn; j++) {
            s_ref[j] = dynamic ? -1.0f : rnd_float(&r, 3, 0.1f);
            z_ref[j] = dynamic ? -7 : (int32_t)cf_rng_range(&r, -200, 200);
        }
        memcpy(s_gpu, s_ref, sn * 4), memcpy(z_gpu, z_ref, sn * 4);

        void *bx, *bq, *bs, *bz;
        const void *dx = to_dev(g, x, xb, off_x, &bx);
        int8_t *dq = to_dev(g, q_gpu, qb, off_q, &bq);
        float *ds = to_dev(g, s_gpu, sn * 4, 0, &bs);
        int32_t *dz = to_dev(g, z_gpu, sn * 4, 0, &bz);

        smm_quantize_args a;
        memset(&a, 0, sizeof a);
        a.m = m, a.k = k, a.x = x, a.x_dtype = t, a.ldx = ldx, a.q = q_ref, a.ldq = ldq;
        a.scale = s_ref, a.azp = with_azp ? z_ref : NULL;
        a.mode = dynamic ? SMM_QUANT_DYNAMIC_PER_TOKEN : SMM_QUANT_STATIC_PER_TENSOR;
        smm_status st_ref = smm_quantize_i8(ref, &a);
        a.x = dx, a.q = dq, a.scale = ds, a.azp = with_azp ? dz : NULL;
        smm_status st_gpu = smm_quantize_i8(g, &a);
        ck_assert_int_eq(smm_synchronize(g), SMM_OK);
        ck_assert_msg(st_ref == st_gpu, "quantize status: reference %s, GPU %s",
                      smm_strerror(st_ref), smm_strerror(st_gpu));
        ck_assert_int_eq(smm_memcpy(g, q_gpu, dq, qb, SMM_MEMCPY_DEVICE_TO_HOST), SMM_OK);
        ck_assert_int_eq(smm_memcpy(g, s_gpu, ds, sn * 4, SMM_MEMCPY_DEVICE_TO_HOST), SMM_OK);
        ck_assert_int_eq(smm_memcpy(g, z_gpu, dz, sn * 4, SMM_MEMCPY_DEVICE_TO_HOST), SMM_OK);
        ck_assert_msg(memcmp(q_ref, q_gpu, qb) == 0 && memcmp(s_ref, s_gpu, sn * 4) == 0 &&
                          memcmp(z_ref, z_gpu, sn * 4) == 0,
                      "quantize case %d differs: M %" PRId64 " K %" PRId64 " %s ldx %" PRId64
                      " ldq %" PRId64 " off x %zu q %zu %s azp %d rows %d",
                      i, m, k, smm_dtype_name(t), ldx, ldq, off_x, off_q,
                      dynamic ? "dynamic" : "static", with_azp, rows);
        smm_free(g, bx), smm_free(g, bq), smm_free(g, bs), smm_free(g, bz);
        free(x), free(q_ref), free(q_gpu), free(s_ref), free(s_gpu), free(z_ref), free(z_gpu);
    }
    printf("check_gpu_kernels: quantize: 600 cases, %d of them in whole aligned chunks\n",
           on_rows);
    smm_context_destroy(g);
    smm_context_destroy(ref);
}
END_TEST

/* ---- pipelines: late-written inputs, CUDA graphs ---- */

/* The decode-path GEMMs of a pipeline case (M <= 32 unless stated, rows
 * 16-byte aligned) and what is forced: the launch paths the automatic
 * choice takes on an H100 / H200 for these shapes (the decode kernel's
 * forms, the tensor-copy and ring decode kernels, the TMA and 128 x 128
 * tile kernels) and the decode kernels forced. */
typedef struct pipe_case {
    int64_t m, n, k;
    int packed;   /* B packed (the decode kernels may read it early) */
    int quant;    /* A and scale_a written by smm_quantize_i8 just before;
                     2: both calls as one smm_linear on the GPU */
    int unaligned; /* lda = ldb = K (odd K): the guarded paths */
    smm_gpu_force force;
} pipe_case;

static const pipe_case graph_cases[] = {
    {1, 4096, 1024, 1, 0, 0, {SMM_GPU_KERNEL_DECODE, 1, 1, 0, 1, 0, 0, 0, 0}},
    {16, 6144, 1024, 1, 1, 0, {SMM_GPU_KERNEL_DECODE, 2, 1, 0, 1, 0, 0, 0, 0}},
    {1, 8000, 3000, 1, 0, 0, {0}},
    {9, 3000, 700, 0, 1, 0, {SMM_GPU_KERNEL_DECODE, 0, 0, 0, 0, 0, 0, 0, 0}},
    {24, 26000, 256, 0, 0, 0, {0}},
    {32, 4096, 1024, 1, 1, 0, {0}},
    {28, 6144, 4096, 0, 2, 0, {0}},
    {32, 4096, 4096, 1, 0, 0, {SMM_GPU_KERNEL_DECODE_RING, 0, 0, 0, 0, 0, 0, 0, 0}},
    {20, 4096, 4096, 1, 2, 0, {SMM_GPU_KERNEL_DECODE_RING, 0, 0, 0, 0, 0, 0, 0, 0}},
    {12, 3000, 2048, 0, 1, 0, {SMM_GPU_KERNEL_DECODE_TMA, 0, 0, 0, 0, 0, 0, 0, 0}},
    {1024, 4352, 128, 0, 2, 0, {0}},
    {300, 1000, 200, 0, 0, 0, {0}},
    {40, 300, 77, 0, 0, 1, {0}},
    {1, 4096, 4096, 1, 2, 0, {0}},
    {3, 6144, 1000, 0, 2, 0, {0, 0, 0, 0, 0, 0, 0, 1, 0}},
};

/* CUDA's driver API (libcuda.so.1, loaded by the runtime the plugin
 * uses): streams and graphs, for the capture cases. */
static struct {
    int ok;
    int (*ctx_get)(void **);
    int (*dev_get)(int *, int);
    int (*primary_retain)(void **, int);
    int (*ctx_set)(void *);
    int (*stream_create)(void **, unsigned);
    int (*stream_destroy)(void *);
    int (*stream_sync)(void *);
    int (*begin)(void *, int);
    int (*end)(void *, void **);
    int (*instantiate)(void **, void *, unsigned long long);
    int (*launch)(void *, void *);
    int (*exec_destroy)(void *);
    int (*graph_destroy)(void *);
} cu;

static const char *load_cuda_driver(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h)
        return "libcuda.so.1 cannot be loaded";
#define CU_SYM(field, name)                                                                \
    do {                                                                                   \
        void *s_ = dlsym(h, name);                                                         \
        if (!s_)                                                                           \
            return "libcuda.so.1 lacks " name;                                             \
        memcpy(&cu.field, &s_, sizeof s_);                                                 \
    } while (0)
    CU_SYM(ctx_get, "cuCtxGetCurrent");
    CU_SYM(dev_get, "cuDeviceGet");
    CU_SYM(primary_retain, "cuDevicePrimaryCtxRetain");
    CU_SYM(ctx_set, "cuCtxSetCurrent");
    CU_SYM(stream_create, "cuStreamCreate");
    CU_SYM(stream_destroy, "cuStreamDestroy_v2");
    CU_SYM(stream_sync, "cuStreamSynchronize");
    CU_SYM(begin, "cuStreamBeginCapture_v2");
    CU_SYM(end, "cuStreamEndCapture");
    CU_SYM(instantiate, "cuGraphInstantiateWithFlags");
    CU_SYM(launch, "cuGraphLaunch");
    CU_SYM(exec_destroy, "cuGraphExecDestroy");
    CU_SYM(graph_destroy, "cuGraphDestroy");
#undef CU_SYM
    cu.ok = 1;
    return NULL;
}

#define CU_CK(call) ck_assert_msg((call) == 0, "%s failed", #call)

/* A non-blocking stream on the device the GPU context uses (device 0: the
 * library's contexts use the current device, 0 in this process). */
static void *cu_stream(void)
{
    void *ctx = NULL, *s = NULL;
    int dev;
    CU_CK(cu.ctx_get(&ctx));
    if (!ctx) {
        CU_CK(cu.dev_get(&dev, 0));
        CU_CK(cu.primary_retain(&ctx, dev));
        CU_CK(cu.ctx_set(ctx));
    }
    CU_CK(cu.stream_create(&s, 1 /* CU_STREAM_NON_BLOCKING */));
    return s;
}

/* Random x (f32) for the quantizer: values of a few units. */
static void fill_x(cf_rng *r, float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)cf_rng_range(r, -3000000, 3000000) / 1000000.0f;
}

/* Runs one pipeline case on the reference and on the GPU: [smm_quantize_i8
 * of x into A and per-token scale_a (and azp)], then the scaled mm, on one
 * stream; with graph, both captured into a CUDA graph (the strictest
 * capture mode) and the graph replayed twice, C (and A, scale_a, azp)
 * poisoned again before the second replay. C is compared with its guards after
 * each run. Returns the kernel that ran the mm. */
static int run_pipe(smm_context *ref, smm_context *g, const pipe_case *pc, smm_dtype c_dtype,
                    int graph, cf_rng *r)
{
    const int64_t m = pc->m, n = pc->n, k = pc->k;
    const int64_t ld = pc->unaligned ? k : (k + 15) / 16 * 16;
    const size_t a_bytes = (size_t)(m * ld), b_bytes = (size_t)(n * ld);
    const size_t es = dtype_size(c_dtype), guard = 64;
    const size_t c_bytes = (size_t)(m * n) * es + 2 * guard;
    float *x = calloc((size_t)(m * ld), sizeof(float));
    int8_t *a = malloc(a_bytes), *b = malloc(b_bytes);
    float *sa = malloc(sizeof(float) * (size_t)m), *sb = malloc(sizeof(float) * (size_t)n);
    float *bias = malloc(sizeof(float) * (size_t)n);
    int32_t *azp = malloc(sizeof(int32_t) * (size_t)m);
    unsigned char *c_ref = malloc(c_bytes), *c_gpu = malloc(c_bytes);
    const int with_azp = pc->quant && (int)cf_rng_range(r, 0, 1);
    ck_assert(x && a && b && sa && sb && bias && azp && c_ref && c_gpu);

    fill_x(r, x, (size_t)(m * ld));
    for (size_t i = 0; i < a_bytes; i++)
        a[i] = (int8_t)cf_rng_range(r, -128, 127);
    for (size_t i = 0; i < b_bytes; i++)
        b[i] = (int8_t)cf_rng_range(r, -128, 127);
    for (int64_t j = 0; j < m; j++)
        sa[j] = rnd_float(r, 0, 0.05f), azp[j] = 0;
    for (int64_t j = 0; j < n; j++)
        sb[j] = rnd_float(r, 2, 0.05f), bias[j] = rnd_float(r, 2, 10.0f);
    for (size_t i = 0; i < c_bytes; i++)
        c_ref[i] = (unsigned char)(0xA5 ^ (i * 7));

    smm_quantize_args q;
    smm_scaled_mm_args mm;
    memset(&q, 0, sizeof q);
    q.m = m, q.k = k, q.x = x, q.x_dtype = SMM_DTYPE_F32, q.ldx = ld, q.q = a, q.ldq = ld;
    q.scale = sa, q.azp = with_azp ? azp : NULL, q.mode = SMM_QUANT_DYNAMIC_PER_TOKEN;
    memset(&mm, 0, sizeof mm);
    mm.m = m, mm.n = n, mm.k = k, mm.a = a, mm.lda = ld, mm.b = b, mm.ldb = ld;
    mm.scale_a = sa, mm.scale_a_len = m, mm.scale_b = sb, mm.scale_b_len = n;
    mm.bias = cf_rng_range(r, 0, 1) ? bias : NULL;
    mm.azp = with_azp ? azp : NULL, mm.azp_len = m;
    mm.c = c_ref + guard, mm.ldc = n, mm.c_dtype = c_dtype;
    if (pc->quant)
        ck_assert_int_eq(smm_quantize_i8(ref, &q), SMM_OK);
    ck_assert_int_eq(smm_scaled_mm(ref, &mm), SMM_OK);

    /* The GPU's inputs: A, scale_a and azp poisoned when the quantizer
     * writes them. */
    void *bx, *ba, *bb, *bsa, *bsb, *bbias, *bazp, *bc;
    size_t p_bytes = c_bytes > a_bytes ? c_bytes : a_bytes;
    if (p_bytes < 4 * (size_t)m)
        p_bytes = 4 * (size_t)m;
    unsigned char *poison = malloc(p_bytes);
    ck_assert(poison != NULL);
    for (size_t i = 0; i < p_bytes; i++)
        poison[i] = (unsigned char)(0xA5 ^ (i * 7));
    const float *dx = to_dev(g, x, sizeof(float) * (size_t)(m * ld), 0, &bx);
    int8_t *da = to_dev(g, pc->quant ? (const void *)poison : a, a_bytes, 0, &ba);
    const int8_t *db = to_dev(g, b, b_bytes, 0, &bb);
    float *dsa = to_dev(g, pc->quant ? (const void *)poison : sa, sizeof(float) * (size_t)m, 0,
                        &bsa);
    const float *dsb = to_dev(g, sb, sizeof(float) * (size_t)n, 0, &bsb);
    const float *dbias = to_dev(g, bias, sizeof(float) * (size_t)n, 0, &bbias);
    int32_t *dazp = to_dev(g, pc->quant ? (const void *)poison : azp,
                           sizeof(int32_t) * (size_t)m, 0, &bazp);
    unsigned char *dc = to_dev(g, poison, c_bytes, 0, &bc);
    smm_packed_b *pb = NULL;
    if (pc->packed)
        ck_assert_int_eq(smm_pack_b(g, n, k, db, ld, &pb), SMM_OK);
    q.x = dx, q.q = da, q.scale = dsa, q.azp = with_azp ? dazp : NULL;
    mm.a = da, mm.b = pc->packed ? NULL : db, mm.b_packed = pb, mm.scale_a = dsa;
    mm.scale_b = dsb, mm.bias = mm.bias ? dbias : NULL, mm.azp = with_azp ? dazp : NULL;
    mm.c = dc + guard;

    void *st = NULL, *graph_h = NULL, *exec = NULL;
    ck_assert_int_eq(smm_synchronize(g), SMM_OK); /* the copies above have landed */
    if (graph) {
        st = cu_stream();
        ck_assert_int_eq(smm_context_set_stream(g, st), SMM_OK);
    }
    smm_gpu_counts before, after;
    kernel_counts(&before);
    force_set(&pc->force);
    if (graph)
        CU_CK(cu.begin(st, 0 /* CU_STREAM_CAPTURE_MODE_GLOBAL */));
    smm_status st_q = pc->quant == 1 ? smm_quantize_i8(g, &q) : SMM_OK, st_mm;
    if (pc->quant == 2) {
        smm_linear_args l;
        memset(&l, 0, sizeof l);
        l.m = m, l.n = n, l.k = k, l.x = dx, l.x_dtype = SMM_DTYPE_F32, l.ldx = ld;
        l.mode = SMM_QUANT_DYNAMIC_PER_TOKEN, l.asymmetric = with_azp;
        l.x_scale = dsa, l.x_azp = with_azp ? dazp : NULL, l.q = da, l.ldq = ld;
        l.b = mm.b, l.ldb = ld, l.b_packed = pb, l.scale_b = dsb, l.scale_b_len = n;
        l.bias = mm.bias, l.c = mm.c, l.ldc = n, l.c_dtype = c_dtype;
        st_mm = smm_linear(g, &l);
    } else
        st_mm = smm_scaled_mm(g, &mm);
    force_set(NULL);
    if (graph) {
        ck_assert_msg(st_q == SMM_OK && st_mm == SMM_OK, "captured calls: %s, %s (%s)",
                      smm_strerror(st_q), smm_strerror(st_mm), smm_context_last_error(g));
        CU_CK(cu.end(st, &graph_h));
        CU_CK(cu.instantiate(&exec, graph_h, 0));
    }
    for (int run = 0; run < (graph ? 2 : 1); run++) {
        if (graph && run == 1) { /* poisoned again, then the second replay */
            ck_assert_int_eq(smm_memcpy(g, dc, poison, c_bytes, SMM_MEMCPY_HOST_TO_DEVICE),
                             SMM_OK);
            if (pc->quant) {
                ck_assert_int_eq(smm_memcpy(g, da, poison, a_bytes, SMM_MEMCPY_HOST_TO_DEVICE),
                                 SMM_OK);
                ck_assert_int_eq(smm_memcpy(g, dsa, poison, 4 * (size_t)m,
                                            SMM_MEMCPY_HOST_TO_DEVICE),
                                 SMM_OK);
                ck_assert_int_eq(smm_memcpy(g, dazp, poison, 4 * (size_t)m,
                                            SMM_MEMCPY_HOST_TO_DEVICE),
                                 SMM_OK);
            }
        }
        if (graph)
            CU_CK(cu.launch(exec, st));
        ck_assert_int_eq(smm_synchronize(g), SMM_OK);
        ck_assert_msg(st_q == SMM_OK && st_mm == SMM_OK, "calls: %s, %s (%s)",
                      smm_strerror(st_q), smm_strerror(st_mm), smm_context_last_error(g));
        ck_assert_int_eq(smm_memcpy(g, c_gpu, dc, c_bytes, SMM_MEMCPY_DEVICE_TO_HOST), SMM_OK);
        if (memcmp(c_ref, c_gpu, c_bytes) != 0) {
            size_t at = 0;
            while (c_ref[at] == c_gpu[at])
                at++;
            ck_abort_msg("%s%s: forced %s, M %" PRId64 " N %" PRId64 " K %" PRId64
                         " %s, packed %d, quantized A %d (azp %d), unaligned %d, groups %d "
                         "cluster %d stages %d pre %d: C differs at byte %zu (guard %zu)",
                         graph ? "graph replay " : "stream", graph ? (run ? "2" : "1") : "",
                         kernel_name(pc->force.kernel), m, n, k, smm_dtype_name(c_dtype),
                         pc->packed, pc->quant, with_azp, pc->unaligned, pc->force.groups,
                         pc->force.cluster, pc->force.stages, pc->force.pre, at, guard);
        }
    }
    kernel_counts(&after);
    int ran = 0;
    for (int kk = 1; kk < SMM_GPU_KERNEL_COUNT; kk++)
        if (after.launches[kk] != before.launches[kk])
            ran = kk;
    if (graph) {
        CU_CK(cu.exec_destroy(exec));
        CU_CK(cu.graph_destroy(graph_h));
        ck_assert_int_eq(smm_context_set_stream(g, NULL), SMM_OK);
        CU_CK(cu.stream_destroy(st));
    }
    smm_packed_b_destroy(pb);
    smm_free(g, bx), smm_free(g, ba), smm_free(g, bb), smm_free(g, bsa), smm_free(g, bsb);
    smm_free(g, bbias), smm_free(g, bazp), smm_free(g, bc);
    free(x), free(a), free(b), free(sa), free(sb), free(bias), free(azp), free(c_ref);
    free(c_gpu), free(poison);
    return ran;
}

/* First in the suite, so that each launch path is first used inside a
 * capture (the launchers' per-device set-up: queries, kernel attributes,
 * tensor maps), as an application capturing its first decode step would. */
START_TEST(test_graph)
{
    if (gpu_backend != SMM_BACKEND_CUDA) {
        printf("check_gpu_kernels: graphs: not checked on %s (CUDA graphs only)\n",
               smm_backend_name(gpu_backend));
        return;
    }
    const char *why = load_cuda_driver();
    ck_assert_msg(why == NULL, "%s", why ? why : "");
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 0);
    smm_context *g = tu_ctx(gpu_backend, 0);
    static const smm_dtype types[] = {SMM_DTYPE_BF16, SMM_DTYPE_F16, SMM_DTYPE_F32};
    cf_rng r = tu_rng("graph");
    const int nc = (int)(sizeof graph_cases / sizeof graph_cases[0]);

    find_force_interface();
    for (int i = 0; i < nc; i++) {
        const int ran = run_pipe(ref, g, &graph_cases[i], types[i % 3], 1, &r);
        printf("check_gpu_kernels: graph: M %" PRId64 " N %" PRId64 " K %" PRId64
               " forced %s: %s ran\n",
               graph_cases[i].m, graph_cases[i].n, graph_cases[i].k,
               kernel_name(graph_cases[i].force.kernel), ran ? kernel_name(ran) : "nothing");
    }
    fflush(stdout);
    smm_context_destroy(g);
    smm_context_destroy(ref);
}
END_TEST

/* A (and scale_a, azp) written by the quantizer just before the mm on the
 * same stream: a decode kernel launched early (programmatic dependent
 * launch, reading a packed B before its wait) must still read the new A. */
START_TEST(test_late_inputs)
{
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 0);
    smm_context *g = tu_ctx(gpu_backend, 0);
    cf_rng r = tu_rng("late-inputs");
    static const int decode[] = {SMM_GPU_KERNEL_AUTO, SMM_GPU_KERNEL_DECODE,
                                 SMM_GPU_KERNEL_DECODE_TMA, SMM_GPU_KERNEL_DECODE_RING};
    static const smm_dtype types[] = {SMM_DTYPE_BF16, SMM_DTYPE_F16, SMM_DTYPE_F32};
    static const int gs[] = {0, 1, 2, 4};

    find_force_interface();
    for (int i = 0; i < 80; i++) {
        pipe_case pc;
        memset(&pc, 0, sizeof pc);
        pc.m = i < 74 ? cf_rng_range(&r, 1, 32) : cf_rng_range(&r, 64, 300);
        pc.n = cf_rng_range(&r, 0, 2) == 0 ? cf_rng_range(&r, 1, 300)
                                           : cf_rng_range(&r, 300, 3000);
        pc.k = cf_rng_range(&r, 0, 4) == 0 ? cf_rng_range(&r, 2000, 9000)
                                           : cf_rng_range(&r, 1, 2200);
        pc.packed = i % 2 == 0 || cf_rng_range(&r, 0, 1);
        pc.quant = 1 + (int)cf_rng_range(&r, 0, 1); /* 2: smm_linear */
        pc.force.kernel = decode[cf_rng_range(&r, 0, 3)];
        if (gpu_backend != SMM_BACKEND_CUDA)
            pc.force.kernel = SMM_GPU_KERNEL_AUTO;
        pc.force.groups = gs[cf_rng_range(&r, 0, 3)];
        /* 0: chosen; the ring runs 3, the others take it as 2 */
        pc.force.cluster = (int)cf_rng_range(&r, 0, 4);
        pc.force.pre = (int)cf_rng_range(&r, -1, 1);
        if (pc.force.kernel == SMM_GPU_KERNEL_DECODE_TMA)
            pc.force.stages = (int)cf_rng_range(&r, 0, 1) * (int)cf_rng_range(&r, 2, 16);
        if (pc.force.kernel == SMM_GPU_KERNEL_DECODE_RING)
            pc.force.stages = (int)cf_rng_range(&r, 0, 1) * (int)cf_rng_range(&r, 3, 8);
        run_pipe(ref, g, &pc, types[cf_rng_range(&r, 0, 2)], 0, &r);
    }
    printf("check_gpu_kernels: late inputs: 80 cases\n");
    smm_context_destroy(g);
    smm_context_destroy(ref);
}
END_TEST

/* Two decode mms chained on one stream without a synchronisation, both
 * with a packed B, int32 out: the second's A is the first's output (its
 * int32 rows read as int8 rows of 4 N1 bytes). The first is slow (four
 * row groups per block, no cluster: few blocks, each long) or in the
 * decode kernel's shared-memory form (one row group at M <= 8, two at
 * 9..32), which lets its successor launch at once; the second loads its
 * B before its wait and must still read all of the first's output. */
START_TEST(test_chain)
{
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 0);
    smm_context *g = tu_ctx(gpu_backend, 0);
    cf_rng r = tu_rng("chain");

    find_force_interface();
    for (int it = 0; it < 18; it++) {
        const int form = it % 3; /* 0: slow first; 1, 2: shared-memory form, row groups */
        const int64_t m = form == 1 ? cf_rng_range(&r, 1, 8)
                          : form == 2 ? cf_rng_range(&r, 9, 32) : cf_rng_range(&r, 1, 32);
        const int64_t n1 = 4 * cf_rng_range(&r, 1, 512), n2 = cf_rng_range(&r, 1, 1500);
        const int64_t k1 = form ? cf_rng_range(&r, 64, 8192) : cf_rng_range(&r, 1, 8192);
        const int64_t ld1 = (k1 + 15) / 16 * 16, k2 = 4 * n1;
        int8_t *a1 = malloc((size_t)(m * ld1)), *b1 = malloc((size_t)(n1 * ld1));
        int8_t *b2 = malloc((size_t)(n2 * k2));
        int32_t *c1 = malloc(sizeof(int32_t) * (size_t)(m * n1));
        int32_t *c2 = malloc(sizeof(int32_t) * (size_t)(m * n2));
        int32_t *g1 = malloc(sizeof(int32_t) * (size_t)(m * n1));
        int32_t *g2 = malloc(sizeof(int32_t) * (size_t)(m * n2));
        ck_assert(a1 && b1 && b2 && c1 && c2 && g1 && g2);
        for (int64_t i = 0; i < m * ld1; i++)
            a1[i] = (int8_t)cf_rng_range(&r, -128, 127);
        for (int64_t i = 0; i < n1 * ld1; i++)
            b1[i] = (int8_t)cf_rng_range(&r, -128, 127);
        for (int64_t i = 0; i < n2 * k2; i++)
            b2[i] = (int8_t)cf_rng_range(&r, -128, 127);
        ck_assert_int_eq(smm_gemm_s8s8s32(ref, m, n1, k1, a1, ld1, b1, ld1, c1, n1), SMM_OK);
        ck_assert_int_eq(smm_gemm_s8s8s32(ref, m, n2, k2, (const int8_t *)c1, k2, b2, k2, c2,
                                          n2),
                         SMM_OK);

        void *ba1, *bb1, *bb2, *bc1, *bc2;
        memset(g1, 0xA5, sizeof(int32_t) * (size_t)(m * n1));
        memset(g2, 0xA5, sizeof(int32_t) * (size_t)(m * n2));
        const int8_t *da1 = to_dev(g, a1, (size_t)(m * ld1), 0, &ba1);
        const int8_t *db1 = to_dev(g, b1, (size_t)(n1 * ld1), 0, &bb1);
        const int8_t *db2 = to_dev(g, b2, (size_t)(n2 * k2), 0, &bb2);
        int32_t *dc1 = to_dev(g, g1, sizeof(int32_t) * (size_t)(m * n1), 0, &bc1);
        int32_t *dc2 = to_dev(g, g2, sizeof(int32_t) * (size_t)(m * n2), 0, &bc2);
        smm_packed_b *p1 = NULL, *p2 = NULL;
        ck_assert_int_eq(smm_pack_b(g, n1, k1, db1, ld1, &p1), SMM_OK);
        ck_assert_int_eq(smm_pack_b(g, n2, k2, db2, k2, &p2), SMM_OK);
        ck_assert_int_eq(smm_synchronize(g), SMM_OK);

        smm_gpu_force f;
        memset(&f, 0, sizeof f);
        f.kernel = gpu_backend == SMM_BACKEND_CUDA ? SMM_GPU_KERNEL_DECODE : 0;
        f.groups = form ? form : 4, f.cluster = 1, f.pre = form ? 1 : 0;
        force_set(&f);
        ck_assert_int_eq(smm_gemm_s8s8s32_packed(g, m, n1, k1, da1, ld1, p1, dc1, n1), SMM_OK);
        force_set(NULL);
        ck_assert_int_eq(smm_gemm_s8s8s32_packed(g, m, n2, k2, (const int8_t *)dc1, k2, p2,
                                                 dc2, n2),
                         SMM_OK);
        ck_assert_int_eq(smm_synchronize(g), SMM_OK);
        ck_assert_int_eq(smm_memcpy(g, g1, dc1, sizeof(int32_t) * (size_t)(m * n1),
                                    SMM_MEMCPY_DEVICE_TO_HOST),
                         SMM_OK);
        ck_assert_int_eq(smm_memcpy(g, g2, dc2, sizeof(int32_t) * (size_t)(m * n2),
                                    SMM_MEMCPY_DEVICE_TO_HOST),
                         SMM_OK);
        ck_assert_msg(memcmp(g1, c1, sizeof(int32_t) * (size_t)(m * n1)) == 0 &&
                          memcmp(g2, c2, sizeof(int32_t) * (size_t)(m * n2)) == 0,
                      "chain %d: M %" PRId64 " N1 %" PRId64 " K1 %" PRId64 " N2 %" PRId64
                      " K2 %" PRId64 ", first %s: %s differs",
                      it, m, n1, k1, n2, k2, form ? "in its shared-memory form" : "slow",
                      memcmp(g1, c1, sizeof(int32_t) * (size_t)(m * n1)) ? "the first's output"
                                                                         : "the second's");
        smm_packed_b_destroy(p1), smm_packed_b_destroy(p2);
        smm_free(g, ba1), smm_free(g, bb1), smm_free(g, bb2), smm_free(g, bc1);
        smm_free(g, bc2);
        free(a1), free(b1), free(b2), free(c1), free(c2), free(g1), free(g2);
    }
    printf("check_gpu_kernels: chains: 18 cases\n");
    smm_context_destroy(g);
    smm_context_destroy(ref);
}
END_TEST

/* ---- smm_linear in one launch ---- */

/* An activation for the fused cases: special values now and then, and
 * whole rows of zeros or of one value (the quantizer's degenerate rows). */
static float x_value(cf_rng *r, int row_kind, float mag)
{
    if (row_kind == 1)
        return 0.0f;
    if (row_kind == 2)
        return mag;
    if (cf_rng_range(r, 0, 199) == 0)
        return f32_of_bits(0x7FA00001u); /* a signaling NaN */
    return rnd_float(r, 1, mag);
}

/* smm_linear on the GPU against the reference (quantize, then scaled mm) at
 * M <= 6: the DECODE kernel quantizing its own tokens (forced, chosen by
 * the rules, or off), every mode, x type and output type, K with and
 * without a tail, x rows aligned or not (not: two launches). C, q (with
 * the bytes between rows and around the buffers), scales and zero points
 * compared bitwise, outputs poisoned first. In half of the cases x is the
 * output of a slow scaled mm queued just before on the same stream (as a
 * layer's input is the previous layer's output): a fused kernel that read
 * x before its wait would read the poison. */
START_TEST(test_linear_fused)
{
    if (gpu_backend != SMM_BACKEND_CUDA) {
        printf("check_gpu_kernels: fused linear: not on %s (NVIDIA only)\n",
               smm_backend_name(gpu_backend));
        return;
    }
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 0);
    smm_context *g = tu_ctx(gpu_backend, 0);
    cf_rng r = tu_rng("linear-fused");
    static const smm_dtype xt[] = {SMM_DTYPE_F32, SMM_DTYPE_F16, SMM_DTYPE_BF16};
    static const smm_dtype ct[] = {SMM_DTYPE_F32, SMM_DTYPE_F16, SMM_DTYPE_BF16};
    static const int64_t ks[] = {16, 17, 31, 64, 65, 100, 127, 256, 1000, 4096, 4100, 8192, 14336};
    static const int64_t ns[] = {1, 16, 17, 48, 100, 512, 2000, 4096, 6144};
    const int cases = 400;
    long fused_runs = 0, fused_expected = 0;

    find_force_interface();
    for (int i = 0; i < cases; i++) {
        const int64_t m = cf_rng_range(&r, 0, 5) == 0 ? cf_rng_range(&r, 5, 6)
                                                       : cf_rng_range(&r, 1, 4);
        const int64_t n = pick(&r, ns, (int)(sizeof ns / sizeof ns[0]));
        const int64_t k = pick(&r, ks, (int)(sizeof ks / sizeof ks[0]));
        const smm_dtype xd = xt[cf_rng_range(&r, 0, 2)], cd = ct[cf_rng_range(&r, 0, 2)];
        const size_t es = dtype_size(xd), cs = dtype_size(cd);
        const int64_t per = 16 / (int64_t)es; /* elements per 16 bytes */
        const int x_aligned = cf_rng_range(&r, 0, 7) != 0;
        const int64_t ldx = x_aligned ? (k + per - 1) / per * per + per * cf_rng_range(&r, 0, 1)
                                      : k + 1 + cf_rng_range(&r, 0, 2);
        const int64_t ldq = (k + 15) / 16 * 16 + 16 * cf_rng_range(&r, 0, 1);
        const int dynamic = cf_rng_range(&r, 0, 3) != 0, asym = (int)cf_rng_range(&r, 0, 1);
        const int packed = (int)cf_rng_range(&r, 0, 2) != 0, bias = (int)cf_rng_range(&r, 0, 1);
        const int fuse = (int)cf_rng_range(&r, -1, 1);
        /* a raw B's rows padded to 16 bytes (a packed B is dense, ldb K) */
        const int64_t ldb = packed ? k : (k + 15) / 16 * 16;
        /* x produced by a slow mm just before (its C, ldc = ldx) */
        const int late = (int)cf_rng_range(&r, 0, 1);
        const size_t xb = (size_t)((m - 1) * ldx + k) * es, qb = (size_t)((m - 1) * ldq + k);
        const size_t cb = (size_t)(m * n) * cs, guard = 64;
        const size_t xbuf = (size_t)(m * ldx) * es; /* whole rows (the late mm writes them) */

        unsigned char *x = calloc(xbuf, 1), *c_ref = malloc(cb + 2 * guard),
                      *c_gpu = malloc(cb + 2 * guard);
        int8_t *q_ref = malloc(qb + 2 * guard), *q_gpu = malloc(qb + 2 * guard);
        int8_t *b = malloc((size_t)(n * ldb));
        float *sb = malloc(4 * (size_t)n), *bv = malloc(4 * (size_t)n);
        float s_ref[8], s_gpu[8];
        int32_t z_ref[8], z_gpu[8];
        ck_assert(x && c_ref && c_gpu && q_ref && q_gpu && b && sb && bv);
        for (int64_t row = 0; row < m; row++) {
            const int kind = cf_rng_range(&r, 0, 9) == 0 ? (int)cf_rng_range(&r, 1, 2) : 0;
            const float mag = cf_rng_range(&r, 0, 5) == 0 ? 3e4f : 4.0f;
            for (int64_t j = 0; j < (row == m - 1 ? k : ldx); j++) {
                const float v = x_value(&r, kind, mag);
                const size_t off = (size_t)(row * ldx + j) * es;
                if (es == 4) {
                    memcpy(x + off, &v, 4);
                } else {
                    const uint16_t h =
                        xd == SMM_DTYPE_F16 ? smm_f32_to_f16(v) : smm_f32_to_bf16(v);
                    memcpy(x + off, &h, 2);
                }
            }
        }
        for (int64_t j = 0; j < n * ldb; j++)
            b[j] = (int8_t)cf_rng_range(&r, -128, 127);
        for (int64_t j = 0; j < n; j++)
            sb[j] = rnd_float(&r, 0, 0.01f), bv[j] = rnd_float(&r, 0, 3.0f);
        for (int j = 0; j < 8; j++) {
            s_ref[j] = dynamic ? -1.0f : (float)cf_rng_range(&r, 1, 1000) / 256.0f;
            z_ref[j] = dynamic ? -7 : (int32_t)cf_rng_range(&r, -100, 100);
        }
        memcpy(s_gpu, s_ref, sizeof s_ref), memcpy(z_gpu, z_ref, sizeof z_ref);
        for (size_t j = 0; j < cb + 2 * guard; j++)
            c_ref[j] = (unsigned char)(0xA5 ^ (j * 7));
        for (size_t j = 0; j < qb + 2 * guard; j++)
            q_ref[j] = (int8_t)(0x5A ^ (j * 3));
        memcpy(c_gpu, c_ref, cb + 2 * guard), memcpy(q_gpu, q_ref, qb + 2 * guard);

        smm_linear_args l;
        memset(&l, 0, sizeof l);
        l.m = m, l.n = n, l.k = k, l.x = x, l.x_dtype = xd, l.ldx = ldx;
        l.mode = dynamic ? SMM_QUANT_DYNAMIC_PER_TOKEN : SMM_QUANT_STATIC_PER_TENSOR;
        l.asymmetric = asym, l.x_scale = s_ref, l.x_azp = asym ? z_ref : NULL;
        l.q = q_ref + guard, l.ldq = ldq, l.b = b, l.ldb = ldb, l.scale_b = sb;
        l.scale_b_len = n, l.bias = bias ? bv : NULL, l.c = c_ref + guard, l.ldc = n;
        l.c_dtype = cd;

        void *bx, *bq, *bb, *bsb, *bbv, *bc, *bs, *bz, *late_bufs[4] = {NULL, NULL, NULL, NULL};
        smm_packed_b *late_mm = NULL;
        unsigned char *dx = to_dev(g, x, xbuf, 0, &bx);
        int8_t *dq = to_dev(g, q_gpu, qb + 2 * guard, 0, &bq);
        const int8_t *db = to_dev(g, b, (size_t)(n * ldb), 0, &bb);
        const float *dsb = to_dev(g, sb, 4 * (size_t)n, 0, &bsb);
        const float *dbv = to_dev(g, bv, 4 * (size_t)n, 0, &bbv);
        unsigned char *dc = to_dev(g, c_gpu, cb + 2 * guard, 0, &bc);
        float *ds = to_dev(g, s_gpu, sizeof s_gpu, 0, &bs);
        int32_t *dz = to_dev(g, z_gpu, sizeof z_gpu, 0, &bz);
        smm_packed_b *pb = NULL;
        if (packed)
            ck_assert_int_eq(smm_pack_b(g, n, k, db, ldb, &pb), SMM_OK);
        if (late) {
            /* x = the output of mm1 (M x ldx, ldc = ldx, x's type) from
             * random int8 A1 (M x 64) and a packed B1, forced onto the
             * decode kernel's slowest form (four row groups per block) and
             * queued just before the call without a synchronisation; the
             * reference computes the same chain. x's device copy holds
             * poison until mm1 writes it. */
            const int64_t k1 = 64;
            int8_t *a1 = malloc((size_t)(m * k1)), *b1 = malloc((size_t)(ldx * k1));
            float *sa1 = malloc(4 * (size_t)m), *sb1 = malloc(4 * (size_t)ldx);
            unsigned char *poison = malloc(xb);
            ck_assert(a1 && b1 && sa1 && sb1 && poison);
            for (int64_t j = 0; j < m * k1; j++)
                a1[j] = (int8_t)cf_rng_range(&r, -128, 127);
            for (int64_t j = 0; j < ldx * k1; j++)
                b1[j] = (int8_t)cf_rng_range(&r, -128, 127);
            for (int64_t j = 0; j < m; j++)
                sa1[j] = (float)cf_rng_range(&r, 1, 100) / 64.0f;
            for (int64_t j = 0; j < ldx; j++)
                sb1[j] = (float)cf_rng_range(&r, 1, 100) / 8192.0f;
            for (size_t j = 0; j < xb; j++)
                poison[j] = (unsigned char)(0xC3 ^ j);
            smm_scaled_mm_args a;
            memset(&a, 0, sizeof a);
            a.m = m, a.n = ldx, a.k = k1, a.a = a1, a.lda = k1, a.b = b1, a.ldb = k1;
            a.scale_a = sa1, a.scale_a_len = m, a.scale_b = sb1, a.scale_b_len = ldx;
            a.c = x, a.ldc = ldx, a.c_dtype = xd;
            ck_assert_int_eq(smm_scaled_mm(ref, &a), SMM_OK);
            void *ba1, *bb1, *bsa1, *bsb1;
            const int8_t *da1 = to_dev(g, a1, (size_t)(m * k1), 0, &ba1);
            const int8_t *db1 = to_dev(g, b1, (size_t)(ldx * k1), 0, &bb1);
            const float *dsa1 = to_dev(g, sa1, 4 * (size_t)m, 0, &bsa1);
            const float *dsb1 = to_dev(g, sb1, 4 * (size_t)ldx, 0, &bsb1);
            smm_packed_b *p1 = NULL;
            ck_assert_int_eq(smm_pack_b(g, ldx, k1, db1, k1, &p1), SMM_OK);
            ck_assert_int_eq(smm_memcpy(g, dx, poison, xb, SMM_MEMCPY_HOST_TO_DEVICE), SMM_OK);
            ck_assert_int_eq(smm_synchronize(g), SMM_OK);
            smm_gpu_force slow;
            memset(&slow, 0, sizeof slow);
            slow.kernel = SMM_GPU_KERNEL_DECODE, slow.groups = 4, slow.cluster = 1;
            force_set(&slow);
            a.a = da1, a.b = NULL, a.b_packed = p1, a.scale_a = dsa1, a.scale_b = dsb1;
            a.c = dx;
            ck_assert_int_eq(smm_scaled_mm(g, &a), SMM_OK);
            force_set(NULL);
            late_mm = p1;
            late_bufs[0] = ba1, late_bufs[1] = bb1, late_bufs[2] = bsa1, late_bufs[3] = bsb1;
            free(a1), free(b1), free(sa1), free(sb1), free(poison);
        }
        ck_assert_int_eq(smm_linear(ref, &l), SMM_OK);
        smm_gpu_force f;
        memset(&f, 0, sizeof f);
        f.fuse = fuse;
        smm_gpu_counts before, after;
        kernel_counts(&before);
        force_set(&f);
        l.x = dx, l.x_scale = ds, l.x_azp = asym ? dz : NULL, l.q = dq + guard;
        l.b = packed ? NULL : db, l.b_packed = pb, l.scale_b = dsb, l.bias = bias ? dbv : NULL;
        l.c = dc + guard;
        const smm_status st = smm_linear(g, &l);
        force_set(NULL);
        ck_assert_int_eq(smm_synchronize(g), SMM_OK);
        kernel_counts(&after);
        ck_assert_msg(st == SMM_OK, "smm_linear: %s", smm_context_last_error(g));
        ck_assert_int_eq(smm_memcpy(g, c_gpu, dc, cb + 2 * guard, SMM_MEMCPY_DEVICE_TO_HOST),
                         SMM_OK);
        ck_assert_int_eq(smm_memcpy(g, q_gpu, dq, qb + 2 * guard, SMM_MEMCPY_DEVICE_TO_HOST),
                         SMM_OK);
        ck_assert_int_eq(smm_memcpy(g, s_gpu, ds, sizeof s_gpu, SMM_MEMCPY_DEVICE_TO_HOST),
                         SMM_OK);
        ck_assert_int_eq(smm_memcpy(g, z_gpu, dz, sizeof z_gpu, SMM_MEMCPY_DEVICE_TO_HOST),
                         SMM_OK);
        const int ran_fused = after.decode_fused != before.decode_fused;
        /* where the fused kernel can run (lib/rocm/select.hip) */
        const int can = m <= 4 && (m == 1 || (ldx * (int64_t)es) % 16 == 0) &&
                        (n == 1 || ldb % 16 == 0) && m * ((k + 127) / 128 * 128 + 64) <= 32768;
        fused_runs += ran_fused;
        if (fuse == 1 && can)
            fused_expected++;
        const char *bad = memcmp(c_ref, c_gpu, cb + 2 * guard) != 0   ? "C"
                          : memcmp(q_ref, q_gpu, qb + 2 * guard) != 0 ? "q"
                          : memcmp(s_ref, s_gpu, sizeof s_ref) != 0   ? "x_scale"
                          : memcmp(z_ref, z_gpu, sizeof z_ref) != 0   ? "x_azp"
                          : fuse == 1 && can && !ran_fused            ? "(the fused kernel did not run)"
                          : fuse == -1 && ran_fused                   ? "(the fused kernel ran)"
                                                                      : NULL;
        ck_assert_msg(bad == NULL,
                      "fused linear case %d: %s differs: M %" PRId64 " N %" PRId64 " K %" PRId64
                      " x %s ldx %" PRId64 " ldq %" PRId64 " C %s %s %s packed %d bias %d "
                      "fuse %d late %d, fused ran %d",
                      i, bad, m, n, k, smm_dtype_name(xd), ldx, ldq, smm_dtype_name(cd),
                      dynamic ? "dynamic" : "static", asym ? "asymmetric" : "symmetric", packed,
                      bias, fuse, late, ran_fused);
        smm_packed_b_destroy(pb);
        smm_free(g, bx), smm_free(g, bq), smm_free(g, bb), smm_free(g, bsb), smm_free(g, bbv);
        smm_free(g, bc), smm_free(g, bs), smm_free(g, bz);
        smm_packed_b_destroy(late_mm);
        for (int j = 0; j < 4; j++)
            if (late_bufs[j])
                smm_free(g, late_bufs[j]);
        free(x), free(c_ref), free(c_gpu), free(q_ref), free(q_gpu), free(b), free(sb), free(bv);
    }
    printf("check_gpu_kernels: fused linear: %d cases, %ld ran fused (%ld forced where it can "
           "run)\n",
           cases, fused_runs, fused_expected);
    ck_assert_msg(fused_runs >= fused_expected && fused_expected > 0,
                  "the fused kernel ran in %ld cases, expected at least %ld", fused_runs,
                  fused_expected);
    smm_context_destroy(g);
    smm_context_destroy(ref);
}
END_TEST

/* ---- the output conversion, every binary32 pattern ---- */

/* With A = e0, B's rows e0 (K = 16, rows 16-byte aligned), scale_a = 1
 * and no bias, C[0][j] is the conversion of scale_b[j] (acc = 1: t =
 * 1.0f * sb = sb, y = 1.0f * t = sb), so 2^32 per-channel scales in
 * chunks of 2^24 run every binary32 pattern through a kernel's bfloat16
 * and float16 epilogue (on sm_90 the bfloat16 one is an instruction, not
 * epilogue.h's integer form that tests/check_gpu_convert.c checks).
 * Compared with smm_f32_to_bf16 / smm_f32_to_f16 (lib/convert.c, the
 * reference's), after checking on one chunk that the reference backend
 * gives the same bits. The chunks rotate over the vendor's kernels. */
START_TEST(test_convert_all)
{
    const int64_t n = (int64_t)1 << 24, k = 16;
    const smm_dtype dt = _i == 0 ? SMM_DTYPE_BF16 : SMM_DTYPE_F16;
    const int *fams = gpu_backend == SMM_BACKEND_CUDA ? nvidia_families : amd_families;
    const int nf = gpu_backend == SMM_BACKEND_CUDA
                       ? (int)(sizeof nvidia_families / sizeof nvidia_families[0])
                       : (int)(sizeof amd_families / sizeof amd_families[0]);
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 0);
    smm_context *g = tu_ctx(gpu_backend, 0);
    int8_t *b = calloc((size_t)(n * k), 1), a[16] = {1};
    uint32_t *sb = malloc(sizeof(uint32_t) * (size_t)n);
    uint16_t *got = malloc(2 * (size_t)n);
    const float one = 1.0f;
    long ran[SMM_GPU_KERNEL_COUNT] = {0};
    ck_assert(b && sb && got);
    for (int64_t j = 0; j < n; j++)
        b[j * k] = 1;

    find_force_interface();
    void *ba, *bb, *bsa, *bsb, *bc;
    const int8_t *da = to_dev(g, a, 16, 0, &ba), *db = to_dev(g, b, (size_t)(n * k), 0, &bb);
    const float *dsa = to_dev(g, &one, 4, 0, &bsa);
    float *dsb = to_dev(g, sb, 4 * (size_t)n, 0, &bsb);
    void *dc = to_dev(g, got, 2 * (size_t)n, 0, &bc);
    smm_scaled_mm_args x;
    memset(&x, 0, sizeof x);
    x.m = 1, x.n = n, x.k = k, x.a = a, x.lda = k, x.b = b, x.ldb = k;
    x.scale_a = &one, x.scale_a_len = 1, x.scale_b = (const float *)sb, x.scale_b_len = n;
    x.c = got, x.ldc = n, x.c_dtype = dt;

    for (uint64_t chunk = 0; chunk < 256; chunk++) {
        for (int64_t j = 0; j < n; j++)
            sb[j] = (uint32_t)(chunk << 24 | (uint64_t)j);
        if (chunk == 0x3F || chunk == 0x7F) {
            /* The reference agrees: 2^16 patterns from 0x3F000000 (the
             * exponents below 1.0) and up to 0x7FFFFFFF (NaNs). */
            const int64_t off = chunk == 0x3F ? 0 : n - (1 << 16);
            smm_scaled_mm_args y = x;
            y.n = 1 << 16, y.ldc = y.n, y.scale_b = (const float *)(sb + off);
            y.scale_b_len = y.n;
            ck_assert_int_eq(smm_scaled_mm(ref, &y), SMM_OK);
            for (int64_t j = 0; j < y.n; j++) {
                float f;
                memcpy(&f, &sb[off + j], 4);
                ck_assert_uint_eq(got[j], dt == SMM_DTYPE_BF16 ? smm_f32_to_bf16(f)
                                                               : smm_f32_to_f16(f));
            }
        }
        ck_assert_int_eq(smm_memcpy(g, dsb, sb, 4 * (size_t)n, SMM_MEMCPY_HOST_TO_DEVICE),
                         SMM_OK);
        smm_scaled_mm_args y = x;
        y.a = da, y.b = db, y.scale_a = dsa, y.scale_b = dsb, y.c = dc;
        smm_gpu_force f;
        smm_gpu_counts before, after;
        memset(&f, 0, sizeof f);
        f.kernel = fams[chunk % (uint64_t)nf];
        kernel_counts(&before);
        force_set(&f);
        const smm_status st = smm_scaled_mm(g, &y);
        force_set(NULL);
        ck_assert_int_eq(st, SMM_OK);
        ck_assert_int_eq(smm_synchronize(g), SMM_OK);
        kernel_counts(&after);
        for (int kk = 1; kk < SMM_GPU_KERNEL_COUNT; kk++)
            if (after.launches[kk] != before.launches[kk])
                ran[kk]++;
        ck_assert_int_eq(smm_memcpy(g, got, dc, 2 * (size_t)n, SMM_MEMCPY_DEVICE_TO_HOST),
                         SMM_OK);
        for (int64_t j = 0; j < n; j++) {
            float v;
            memcpy(&v, &sb[j], 4);
            const uint16_t want = dt == SMM_DTYPE_BF16 ? smm_f32_to_bf16(v) : smm_f32_to_f16(v);
            if (got[j] != want)
                ck_abort_msg("%s of binary32 0x%08" PRIX32 ": GPU 0x%04X, reference 0x%04X "
                             "(forced %s)",
                             smm_dtype_name(dt), sb[j], got[j], want, kernel_name(f.kernel));
        }
    }
    printf("check_gpu_kernels: %s output of every binary32 pattern:", smm_dtype_name(dt));
    for (int kk = 1; kk < SMM_GPU_KERNEL_COUNT; kk++)
        if (ran[kk])
            printf(" %s %ld chunks", kernel_name(kk), ran[kk]);
    printf("\n");
    smm_free(g, ba), smm_free(g, bb), smm_free(g, bsa), smm_free(g, bsb), smm_free(g, bc);
    free(b), free(sb), free(got);
    smm_context_destroy(g);
    smm_context_destroy(ref);
}
END_TEST

static Suite *gpu_kernels_suite(void)
{
    Suite *s = suite_create("gpu_kernels");
    /* First: each launch path's first use is inside a capture. */
    TCase *tc = tu_tcase(s, "graph", 300);
    tcase_add_test(tc, test_graph);
    tc = tu_tcase(s, "family", 600);
    tcase_add_loop_test(tc, test_family, 0, 8);
    tc = tu_tcase(s, "quantize", 300);
    tcase_add_test(tc, test_quantize);
    tc = tu_tcase(s, "late_inputs", 300);
    tcase_add_test(tc, test_late_inputs);
    tc = tu_tcase(s, "chain", 300);
    tcase_add_test(tc, test_chain);
    tc = tu_tcase(s, "linear_fused", 600);
    tcase_add_test(tc, test_linear_fused);
    tc = tu_tcase(s, "convert_all", 900);
    tcase_add_loop_test(tc, test_convert_all, 0, 2);
    return s;
}

int main(void)
{
    uint64_t seed;
    const char *why_rocm = "", *why_cuda = "";

    if (cf_seed(&seed) != 0) /* tu_main reports it, running nothing */
        return tu_main(gpu_kernels_suite(), "check_gpu_kernels");
    if (tu_backend_selected(SMM_BACKEND_ROCM) &&
        smm_backend_available(SMM_BACKEND_ROCM, &why_rocm))
        gpu_backend = SMM_BACKEND_ROCM;
    else if (tu_backend_selected(SMM_BACKEND_CUDA) &&
             smm_backend_available(SMM_BACKEND_CUDA, &why_cuda))
        gpu_backend = SMM_BACKEND_CUDA;
    else {
        printf("check_gpu_kernels: SKIP: no GPU backend can run here (rocm: %s; cuda: %s)\n",
               why_rocm && *why_rocm ? why_rocm : "not selected",
               why_cuda && *why_cuda ? why_cuda : "not selected");
        return 77;
    }
    printf("check_gpu_kernels: testing the %s backend's kernels\n",
           smm_backend_name(gpu_backend));
    return tu_main(gpu_kernels_suite(), "check_gpu_kernels");
}
