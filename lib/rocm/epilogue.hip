/*
 * epilogue.hip - smm_scaled_epilogue on the GPU: the contract's epilogue
 * (epilogue.h, the one every GEMM kernel ends with) on int32 accumulators
 * and column sums of B that the caller gives, so that its bits are those of
 * smm_scaled_mm on the same data (doc/numerics.md).
 *
 * Work split: one block per row of C (grid-strided over the rows), its
 * threads striding over the columns; each element is read, finished and
 * stored on its own (a memory-bound pass over acc and C).
 */
#include "kernels.h"
#include "epilogue.h"

#define EBLOCK 256
#define EMAX_GRID 65535

namespace {

__global__ void __launch_bounds__(EBLOCK)
smm_epilogue_kernel(smm_epi_params e, const int32_t *acc, int64_t ldacc, const int32_t *colsum,
                    int64_t m, int64_t n)
{
    for (int64_t i = SMM_BID_X; i < m; i += SMM_GDIM_X) {
        const int32_t *row = acc + i * ldacc;
        for (int64_t j = SMM_TID_X; j < n; j += EBLOCK)
            smm_epi_store(e, i, j, row[j], colsum != NULL ? colsum[j] : 0);
    }
}

} /* namespace */

gpuError_t smm_gpu_launch_epilogue(const smm_epilogue_args *a, gpuStream_t stream)
{
    smm_epi_params e;
    e.c = a->c;
    e.ldc = a->ldc;
    e.c_dtype = (int)a->c_dtype;
    e.scale_a = a->scale_a;
    e.scale_a_per_row = a->scale_a_len != 1;
    e.scale_b = a->scale_b;
    e.scale_b_per_col = a->scale_b_len != 1;
    e.bias = a->bias;
    e.azp = a->azp;
    e.azp_per_row = a->azp != NULL && a->azp_len != 1;
    const unsigned grid = (unsigned)(a->m < EMAX_GRID ? a->m : EMAX_GRID);
    smm_epilogue_kernel<<<grid, EBLOCK, 0, stream>>>(e, a->acc, a->ldacc, a->colsum_b, a->m,
                                                     a->n);
    return gpuGetLastError();
}
