/*
 * bench_verify.c - bitwise check of sampled rows of a `scaledmm bench`
 * point against the reference backend (bench.h).
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "buffers.h"

/* The distinct rows among 0, M/2, M-1, in increasing order. */
static int sample_rows(int64_t m, int64_t rows[3])
{
    int n = 0;
    rows[n++] = 0;
    if (m / 2 > 0)
        rows[n++] = m / 2;
    if (m - 1 > rows[n - 1])
        rows[n++] = m - 1;
    return n;
}

static int call_failed(bench_result *res, const char *what, smm_status st,
                       const smm_context *ctx)
{
    snprintf(res->message, sizeof res->message, "reference %s: %s (%s)", what,
             smm_strerror(st), smm_context_last_error(ctx));
    return -1;
}

int bench_verify(const bench_config *cfg, const bench_weights *w, int copy, int64_t m,
                 const uint16_t *x, const int8_t *q, const float *scale_a,
                 const uint16_t *c, bench_result *res)
{
    const int64_t n = w->n, k = w->k;
    int64_t rows[3];
    int nrows = sample_rows(m, rows), i, rc = 0;
    int8_t *qref = buf_alloc((size_t)k);
    uint16_t *cref = buf_alloc((size_t)n * sizeof(uint16_t));
    float sref;

    res->rows_checked = 0;
    res->verified = 0;
    if (!qref || !cref) {
        snprintf(res->message, sizeof res->message, "out of memory for verification");
        rc = -1;
        goto done;
    }
    for (i = 0; i < nrows; i++) {
        const int64_t r = rows[i];
        smm_quantize_args qa = {0};
        smm_scaled_mm_args ma = {0};
        smm_status st;
        int64_t j;

        memset(qref, 0x5A, (size_t)k);
        memset(cref, 0xFF, (size_t)n * sizeof(uint16_t));
        sref = -1.0f;
        qa.m = 1;
        qa.k = k;
        qa.x = x + r * k;
        qa.x_dtype = SMM_DTYPE_BF16;
        qa.ldx = k;
        qa.q = qref;
        qa.ldq = k;
        qa.scale = &sref;
        qa.mode = SMM_QUANT_DYNAMIC_PER_TOKEN;
        st = smm_quantize_i8(cfg->ref, &qa);
        if (st != SMM_OK) {
            rc = call_failed(res, "smm_quantize_i8", st, cfg->ref);
            goto done;
        }
        if (memcmp(&sref, &scale_a[r], sizeof sref) != 0) {
            uint32_t a, b;
            memcpy(&a, &scale_a[r], 4);
            memcpy(&b, &sref, 4);
            snprintf(res->message, sizeof res->message,
                     "scale_a[%lld]: 0x%08x, reference 0x%08x", (long long)r, a, b);
            goto done;
        }
        if (memcmp(qref, q + r * k, (size_t)k) != 0) {
            for (j = 0; j < k && qref[j] == q[r * k + j]; j++)
                ;
            snprintf(res->message, sizeof res->message,
                     "q[%lld][%lld]: %d, reference %d", (long long)r, (long long)j,
                     q[r * k + j], qref[j]);
            goto done;
        }

        ma.m = 1;
        ma.n = n;
        ma.k = k;
        ma.a = qref;
        ma.lda = k;
        ma.b = w->b[copy];
        ma.ldb = k;
        ma.scale_a = &sref;
        ma.scale_a_len = 1;
        ma.scale_b = w->scale_b[copy];
        ma.scale_b_len = n;
        ma.c = cref;
        ma.ldc = n;
        ma.c_dtype = SMM_DTYPE_BF16;
        st = smm_scaled_mm(cfg->ref, &ma);
        if (st != SMM_OK) {
            rc = call_failed(res, "smm_scaled_mm", st, cfg->ref);
            goto done;
        }
        if (memcmp(cref, c + r * n, (size_t)n * sizeof(uint16_t)) != 0) {
            for (j = 0; j < n && cref[j] == c[r * n + j]; j++)
                ;
            snprintf(res->message, sizeof res->message,
                     "C[%lld][%lld] (bf16): 0x%04x, reference 0x%04x", (long long)r,
                     (long long)j, c[r * n + j], cref[j]);
            goto done;
        }
        res->rows_checked = i + 1;
    }
    res->verified = 1;
done:
    free(qref);
    free(cref);
    return rc;
}
