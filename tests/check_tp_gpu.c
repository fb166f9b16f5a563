/*
 * check_tp_gpu.c - the row-parallel recipe on one GPU, two contexts
 * standing in for two ranks: each computes its K-shard's int32
 * accumulators and column sums of B on the device (smm_gemm_s8s8s32), the
 * partial sums are added in int32 with wrapping (on the host, as an
 * all-reduce would), and the device's smm_scaled_epilogue on the sums
 * equals the TP = 1 device smm_scaled_mm and the cpu backend's result bit
 * for bit. Also: a GPU context refuses host memory in the epilogue's
 * pointers, and an AUTO context runs it on the GPU for device memory.
 * SKIP (77) where no GPU backend can run.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *dev_copy(smm_context *ctx, const void *h, size_t n)
{
    void *d = NULL;
    ck_assert_int_eq(smm_malloc(ctx, n ? n : 1, &d), SMM_OK);
    if (n)
        ck_assert_int_eq(smm_memcpy(ctx, d, h, n, SMM_MEMCPY_HOST_TO_DEVICE), SMM_OK);
    return d;
}

static void host_copy(smm_context *ctx, void *h, const void *d, size_t n)
{
    ck_assert_int_eq(smm_synchronize(ctx), SMM_OK);
    if (n)
        ck_assert_int_eq(smm_memcpy(ctx, h, d, n, SMM_MEMCPY_DEVICE_TO_HOST), SMM_OK);
}

static smm_backend gpu;

START_TEST(test_tp_two_contexts)
{
    cf_rng r = tu_rng("tp_two_contexts");
    static const int64_t ms[] = {1, 7, 32, 100};
    static const int64_t ns[] = {8, 33, 256};
    static const int64_t ks[] = {2, 130, 1000, 4096};
    static const smm_dtype ts[] = {SMM_DTYPE_F32, SMM_DTYPE_F16, SMM_DTYPE_BF16};
    smm_context *rank[2] = {tu_ctx(gpu, 0), tu_ctx(gpu, 0)};
    smm_context *cpu = tu_ctx(SMM_BACKEND_CPU, 0);
    smm_context *autoc = NULL;
    ck_assert_int_eq(smm_context_create(&autoc, SMM_BACKEND_AUTO), SMM_OK);
    long cases = 0;
    for (int it = 0; it < 40; it++) {
        const int64_t m = ms[cf_rng_next(&r) % 4], n = ns[cf_rng_next(&r) % 3],
                      k = ks[cf_rng_next(&r) % 4];
        const smm_dtype dt = ts[cf_rng_next(&r) % 3];
        const int bias = (int)(cf_rng_next(&r) % 2), azp = (int)(cf_rng_next(&r) % 3);
        const int64_t sa_len = cf_rng_next(&r) % 2 ? m : 1, sb_len = cf_rng_next(&r) % 2 ? n : 1;
        const int64_t k1 = (int64_t)(cf_rng_next(&r) % (uint64_t)(k + 1));   /* uneven */
        const int es = dt == SMM_DTYPE_F32 ? 4 : 2;
        int8_t *a = malloc((size_t)(m * k)), *b = malloc((size_t)(n * k)), *ones = malloc((size_t)k);
        float *sa = malloc((size_t)m * 4), *sb = malloc((size_t)n * 4), *bv = malloc((size_t)n * 4);
        int32_t *z = malloc((size_t)m * 4);
        ck_assert(a && b && ones && sa && sb && bv && z);
        for (int64_t i = 0; i < m * k; i++)
            a[i] = (int8_t)cf_rng_next(&r);
        for (int64_t i = 0; i < n * k; i++)
            b[i] = (int8_t)cf_rng_next(&r);
        memset(ones, 1, (size_t)k);
        for (int64_t i = 0; i < m; i++) {
            sa[i] = (float)(1 + cf_rng_next(&r) % 1000) / 4096.0f;
            z[i] = (int32_t)(cf_rng_next(&r) % 256) - 128;
        }
        for (int64_t j = 0; j < n; j++) {
            sb[j] = (float)(1 + cf_rng_next(&r) % 1000) / 65536.0f;
            bv[j] = (float)((int)(cf_rng_next(&r) % 2001) - 1000) / 64.0f;
        }
        const size_t cbytes = (size_t)(m * n * es), abytes = (size_t)(m * n) * 4;
        smm_scaled_mm_args full = {
            .m = m, .n = n, .k = k, .a = a, .lda = k, .b = b, .ldb = k,
            .scale_a = sa, .scale_a_len = sa_len, .scale_b = sb, .scale_b_len = sb_len,
            .bias = bias ? bv : NULL, .azp = azp ? z : NULL, .azp_len = azp == 2 ? m : 1,
            .ldc = n, .c_dtype = dt,
        };
        /* The cpu backend's TP = 1 result. */
        unsigned char *want_cpu = malloc(cbytes), *want_gpu = malloc(cbytes),
                      *got = malloc(cbytes), *got_auto = malloc(cbytes);
        ck_assert(want_cpu && want_gpu && got && got_auto);
        memset(got, 0xA5, cbytes);
        memset(got_auto, 0x5A, cbytes);
        full.c = want_cpu;
        ck_assert_int_eq(smm_scaled_mm(cpu, &full), SMM_OK);

        /* Inputs on the device (rank 0's allocations; one device). */
        smm_context *d0 = rank[0];
        int8_t *da = dev_copy(d0, a, (size_t)(m * k)), *db = dev_copy(d0, b, (size_t)(n * k)),
               *dones = dev_copy(d0, ones, (size_t)k);
        float *dsa = dev_copy(d0, sa, (size_t)m * 4), *dsb = dev_copy(d0, sb, (size_t)n * 4),
              *dbv = dev_copy(d0, bv, (size_t)n * 4);
        int32_t *dz = dev_copy(d0, z, (size_t)m * 4);
        void *dc = dev_copy(d0, got, cbytes);
        /* The device's TP = 1 smm_scaled_mm. */
        smm_scaled_mm_args dfull = full;
        dfull.a = da;
        dfull.b = db;
        dfull.scale_a = dsa;
        dfull.scale_b = dsb;
        dfull.bias = bias ? dbv : NULL;
        dfull.azp = azp ? dz : NULL;
        dfull.c = dc;
        ck_assert_int_eq(smm_scaled_mm(d0, &dfull), SMM_OK);
        host_copy(d0, want_gpu, dc, cbytes);

        /* Each rank: its K-shard's accumulators and column sums. */
        const int64_t k0[2] = {0, k1}, kn[2] = {k1, k - k1};
        int32_t *dacc[2], *dcs[2];
        uint32_t *sum = calloc((size_t)(m * n), 4), *cs = calloc((size_t)n, 4);
        int32_t *part = malloc(abytes), *pcs = malloc((size_t)n * 4);
        ck_assert(sum && cs && part && pcs);
        for (int s = 0; s < 2; s++) {
            ck_assert_int_eq(smm_malloc(rank[s], abytes, (void **)&dacc[s]), SMM_OK);
            ck_assert_int_eq(smm_malloc(rank[s], (size_t)n * 4, (void **)&dcs[s]), SMM_OK);
            ck_assert_int_eq(smm_gemm_s8s8s32(rank[s], m, n, kn[s], da + k0[s], k, db + k0[s], k,
                                              dacc[s], n), SMM_OK);
            ck_assert_int_eq(smm_gemm_s8s8s32(rank[s], 1, n, kn[s], dones, k, db + k0[s], k,
                                              dcs[s], n), SMM_OK);
        }
        /* The all-reduce (SUM over int32, wrapping), here on the host. */
        for (int s = 0; s < 2; s++) {
            host_copy(rank[s], part, dacc[s], abytes);
            host_copy(rank[s], pcs, dcs[s], (size_t)n * 4);
            for (int64_t i = 0; i < m * n; i++)
                sum[i] += (uint32_t)part[i];
            for (int64_t j = 0; j < n; j++)
                cs[j] += (uint32_t)pcs[j];
        }
        ck_assert_int_eq(smm_memcpy(rank[0], dacc[0], sum, abytes, SMM_MEMCPY_HOST_TO_DEVICE),
                         SMM_OK);
        ck_assert_int_eq(smm_memcpy(rank[0], dcs[0], cs, (size_t)n * 4,
                                    SMM_MEMCPY_HOST_TO_DEVICE), SMM_OK);
        smm_epilogue_args e = {
            .m = m, .n = n, .acc = dacc[0], .ldacc = n,
            .scale_a = dsa, .scale_a_len = sa_len, .scale_b = dsb, .scale_b_len = sb_len,
            .bias = bias ? dbv : NULL, .azp = azp ? dz : NULL, .azp_len = azp == 2 ? m : 1,
            .colsum_b = azp ? dcs[0] : NULL, .c = dc, .ldc = n, .c_dtype = dt,
        };
        ck_assert_int_eq(smm_memcpy(d0, dc, got, cbytes, SMM_MEMCPY_HOST_TO_DEVICE), SMM_OK);
        ck_assert_msg(smm_scaled_epilogue(d0, &e) == SMM_OK, "%s", smm_context_last_error(d0));
        host_copy(d0, got, dc, cbytes);
        /* The same through an AUTO context: device memory runs on the GPU. */
        ck_assert_int_eq(smm_memcpy(d0, dc, got_auto, cbytes, SMM_MEMCPY_HOST_TO_DEVICE), SMM_OK);
        ck_assert_msg(smm_scaled_epilogue(autoc, &e) == SMM_OK, "%s",
                      smm_context_last_error(autoc));
        host_copy(d0, got_auto, dc, cbytes);
        /* Host memory on a GPU context: refused, naming it. */
        smm_epilogue_args eh = e;
        eh.acc = (const int32_t *)sum;
        ck_assert_int_eq(smm_scaled_epilogue(d0, &eh), SMM_ERR_INVALID_ARG);
        ck_assert_ptr_nonnull(strstr(smm_context_last_error(d0), "acc"));

        ck_assert_msg(memcmp(got, want_gpu, cbytes) == 0,
                      "case %d (m %lld n %lld k %lld split %lld %s bias %d azp %d): the device "
                      "epilogue of the summed shards differs from the device's TP=1 "
                      "smm_scaled_mm (replay with SMM_TEST_SEED=0x%016llx)",
                      it, (long long)m, (long long)n, (long long)k, (long long)k1,
                      smm_dtype_name(dt), bias, azp, (unsigned long long)tu_seed);
        ck_assert_msg(memcmp(got, want_cpu, cbytes) == 0, "case %d: differs from the cpu", it);
        ck_assert_msg(memcmp(got_auto, want_cpu, cbytes) == 0, "case %d: AUTO differs", it);
        cases++;

        for (int s = 0; s < 2; s++) {
            smm_free(rank[s], dacc[s]);
            smm_free(rank[s], dcs[s]);
        }
        void *dev[8] = {da, db, dones, dsa, dsb, dbv, dz, dc};
        for (int i = 0; i < 8; i++)
            smm_free(d0, dev[i]);
        free(a); free(b); free(ones); free(sa); free(sb); free(bv); free(z);
        free(want_cpu); free(want_gpu); free(got); free(got_auto);
        free(sum); free(cs); free(part); free(pcs);
    }
    printf("check_tp_gpu: %s: %ld cases, TP=2 (two contexts) == TP=1 device == cpu, bit for "
           "bit\n", smm_backend_name(gpu), cases);
    smm_context_destroy(autoc);
    smm_context_destroy(cpu);
    smm_context_destroy(rank[0]);
    smm_context_destroy(rank[1]);
}
END_TEST

int main(void)
{
    const char *why_rocm = "", *why_cuda = "";
    if (tu_backend_selected(SMM_BACKEND_CUDA) && smm_backend_available(SMM_BACKEND_CUDA, &why_cuda))
        gpu = SMM_BACKEND_CUDA;
    else if (tu_backend_selected(SMM_BACKEND_ROCM) &&
             smm_backend_available(SMM_BACKEND_ROCM, &why_rocm))
        gpu = SMM_BACKEND_ROCM;
    else {
        printf("check_tp_gpu: SKIP: no GPU backend can run here (rocm: %s; cuda: %s)\n",
               why_rocm ? why_rocm : "", why_cuda ? why_cuda : "");
        return 77;
    }
    Suite *s = suite_create("tp_gpu");
    TCase *tc = tu_tcase(s, "tp_gpu", 600);
    tcase_add_test(tc, test_tp_two_contexts);
    return tu_main(s, "check_tp_gpu");
}
