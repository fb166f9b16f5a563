/*
 * bench_onednn.h - oneDNN's int8 matmul as a baseline of `scaledmm bench`.
 *
 * What is timed, per point, in the same process and on the same threads as
 * our backend: oneDNN's matmul primitive (the oneDNN 1.x/2.x C API)
 *   src      s8 M x K, row-major (the int8 activations our quantizer wrote)
 *   weights  s8 K x N, created with format_tag_any so that oneDNN picks its
 *            preferred layout; each weight copy is reordered into it once,
 *            before any timing (the reorder also stores the s8 x s8
 *            compensation oneDNN wants beside the weights). When the
 *            layout picked is a plain one (gemm-based implementations pick
 *            K x N row-major), the other plain one, N x K (ours), is tried
 *            too, once, outside the timed runs, and the faster is kept
 *            (which one wins depends on the implementation and on M)
 *   scales   output scales, mask 1 << 1: one float per N (the weights'
 *            per-channel scales of the copy in use), given at execution
 *            (DNNL_RUNTIME_F32_VAL) when the implementation takes that,
 *            else fixed when the primitive is created
 *   dst      f32 M x N, row-major
 * oneDNN 2.x cannot express a per-token (per-M) scale together with the
 * per-N one in its output scales, so it applies only the per-channel scale
 * and writes float32: less epilogue work than our smm_scaled_mm
 * (per-token x per-channel, bf16 rounding). Its result is not checked.
 * Timed: dnnl_primitive_execute + dnnl_stream_wait, one warm-up, then up to
 * cfg->repeats runs (stopping once cfg->max_time is spent), weight copies
 * rotating as ours do; median.
 * Built without oneDNN (configure --with-onednn=no, or not found), the
 * functions below say so and time nothing.
 */
#ifndef SMM_TOOL_BENCH_ONEDNN_H
#define SMM_TOOL_BENCH_ONEDNN_H

#include <stddef.h>
#include "bench.h"

typedef struct bench_onednn bench_onednn;

/* 1 when the tool was built with oneDNN, else 0. */
int bench_onednn_built(void);

/* One line about the library: version, CPU runtime and the ISA it uses, or
 * why there is none. */
void bench_onednn_describe(char *buf, size_t size);

/* A layer's oneDNN state (engine, stream, reordered weight copies: as many
 * copies as w->copies, so that they defeat the cache as ours do). Created
 * empty; the reorders happen on the first bench_onednn_time. Returns NULL
 * with the reason in err. */
bench_onednn *bench_onednn_new(const bench_weights *w, char *err, size_t errsize);
void bench_onednn_free(bench_onednn *o);

/*
 * Times the matmul of q (M x K int8, dense) by w's weights into dst (M x N
 * floats, dense) on cfg->threads OpenMP threads. Creates the primitive for
 * this M first, and reorders the weight copies again only when the layout
 * it prefers differs from the one they have. Sets res->onednn_runs,
 * res->onednn_s and res->onednn_impl. Returns 0, or -1 with the reason in
 * res->message (res->onednn_runs then 0).
 */
int bench_onednn_time(bench_onednn *o, const bench_config *cfg, const bench_weights *w,
                      int64_t m, const int8_t *q, float *dst, bench_result *res);

#endif
