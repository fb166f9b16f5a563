/*
 * scaledmm.h - int8 (w8a8) scaled matrix multiplication.
 *
 * One API over several backends (bit-exact scalar reference, multi-threaded
 * CPU, GPU). Every number produced is defined by the numerics contract in
 * doc/numerics.md; every backend, at every shape, stride, thread count and
 * tile choice, returns results bit-for-bit equal to it.
 *
 * Conventions used throughout this header:
 *   - Matrices are row-major. Sizes (m, n, k) and leading dimensions
 *     (lda, ldb, ldc, ldx, ldq) are counted in ELEMENTS, never bytes.
 *   - A matrix's footprint is the byte range from its first element to its
 *     last: ((rows - 1) * ld + cols) * element_size bytes. The leading
 *     dimension of a matrix with a single row is neither read nor validated.
 *   - Pointers to operands with zero elements may be NULL.
 *   - Pointers to elements wider than a byte (float, int32, float16,
 *     bfloat16; c and x included) must be aligned to their element size,
 *     else SMM_ERR_INVALID_ARG; int8 operands may start at any address.
 *   - On any error nothing is written to any output.
 *   - Argument structs must be zero-initialised before the fields are set
 *     (`smm_scaled_mm_args a = {0};` or designated initialisers), so that
 *     fields added by later versions default to "off".
 */
#ifndef SCALEDMM_H
#define SCALEDMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && !defined(SMM_STATIC_BUILD)
#define SMM_API __attribute__((visibility("default")))
#else
#define SMM_API
#endif

/* Library version (semantic versioning) and numerics-contract version. */
#define SMM_VERSION_MAJOR 0
#define SMM_VERSION_MINOR 1
#define SMM_VERSION_PATCH 0
#define SMM_CONTRACT_VERSION 1

/* Status codes. Every function that can fail returns one of these. */
typedef enum {
    SMM_OK = 0,              /* success */
    SMM_ERR_INVALID_ARG,     /* a NULL required pointer, negative size,
                                leading dimension too small, bad length,
                                unknown enum, or a byte count that overflows */
    SMM_ERR_UNSUPPORTED,     /* valid request the chosen backend cannot run */
    SMM_ERR_NO_MEMORY,       /* an allocation failed; nothing leaked */
    SMM_ERR_OVERLAP,         /* an output's footprint intersects an input's
                                (or another output's) */
    SMM_ERR_DEVICE,          /* the GPU runtime reported an error */
    SMM_ERR_NOT_AVAILABLE    /* the requested backend cannot run here */
} smm_status;

/* Element types. */
typedef enum {
    SMM_DTYPE_I8,   /* int8_t */
    SMM_DTYPE_I32,  /* int32_t */
    SMM_DTYPE_F32,  /* IEEE-754 binary32 */
    SMM_DTYPE_F16,  /* IEEE-754 binary16, stored as uint16_t bits */
    SMM_DTYPE_BF16  /* bfloat16 (top half of a binary32), uint16_t bits */
} smm_dtype;

/* Backends. AUTO probes the platform (and honours SMM_BACKEND) and runs
 * each call where its data lives (smm_context_create). */
typedef enum {
    SMM_BACKEND_AUTO,
    SMM_BACKEND_REFERENCE,  /* scalar C, the executable contract */
    SMM_BACKEND_CPU,        /* blocked, OpenMP across all cores */
    SMM_BACKEND_ROCM,       /* AMD GPUs through HIP */
    SMM_BACKEND_CUDA        /* NVIDIA GPUs (the HIP sources through nvcc) */
} smm_backend;

/* Activation quantization modes (doc/numerics.md, "Quantization"). */
typedef enum {
    SMM_QUANT_STATIC_PER_TENSOR,  /* scale (and optional azp) are inputs */
    SMM_QUANT_DYNAMIC_PER_TOKEN   /* scale (and azp if non-NULL) are outputs,
                                     one per row */
} smm_quant_mode;

typedef struct smm_context smm_context;
typedef struct smm_packed_b smm_packed_b;

/*
 * Optional allocator for everything a context allocates (the context itself
 * included). alloc returns memory aligned to at least `alignment` bytes (a
 * power of two, at most 4096) or NULL; free accepts NULL.
 */
typedef struct smm_allocator {
    void *(*alloc)(size_t size, size_t alignment, void *user);
    void (*free)(void *ptr, void *user);
    void *user;
} smm_allocator;

/* ------------------------------------------------------------------ */
/* Versions and messages                                               */
/* ------------------------------------------------------------------ */

/* "MAJOR.MINOR.PATCH" of the library actually loaded. Never NULL. */
SMM_API const char *smm_version(void);

/* Numerics contract implemented by the loaded library (SMM_CONTRACT_VERSION
 * of the headers it was built from). */
SMM_API int smm_contract_version(void);

/* A static, human-readable name for a status; "unknown status" for values
 * outside the enum. Never NULL. */
SMM_API const char *smm_strerror(smm_status status);

/* Static names: "i8", "i32", "f32", "f16", "bf16" / "auto", "reference",
 * "cpu", "rocm", "cuda"; "unknown" for values outside the enums. */
SMM_API const char *smm_dtype_name(smm_dtype dtype);
SMM_API const char *smm_backend_name(smm_backend backend);

/* Parses a backend name as printed by smm_backend_name (case-insensitive).
 * Errors: SMM_ERR_INVALID_ARG if name or out is NULL or the name is unknown
 * (*out untouched). */
SMM_API smm_status smm_backend_from_name(const char *name, smm_backend *out);

/* ------------------------------------------------------------------ */
/* Platform probe                                                      */
/* ------------------------------------------------------------------ */

/*
 * Whether `backend` can run on this machine. Returns 1 if it can, 0 if not
 * (values outside the enum: 0). If reason is non-NULL, *reason is set to a
 * static string saying why (e.g. "no GPU backend in this build").
 * For SMM_BACKEND_AUTO: 1 when a context can be created on AUTO, with
 * AUTO's whole answer as the reason, e.g. "host data -> cpu (avx512_vnni);
 * device data -> cuda (1 device; device 0: NVIDIA H200 (sm_90))" or
 * "...; device data -> none (no GPU runtime found (...))"; with SMM_BACKEND
 * set, what it names and that backend's reason; 0 with why not when
 * SMM_BACKEND names no backend or one that cannot run here.
 * The probe (CPUID, XGETBV, GPU runtimes) runs once per process;
 * thread-safe.
 */
SMM_API int smm_backend_available(smm_backend backend, const char **reason);

/* The backend a context created on AUTO runs host-memory calls on (its
 * smm_context_backend): the one the environment variable SMM_BACKEND
 * names, when it holds a valid name other than "auto" (creating a context
 * then fails with SMM_ERR_NOT_AVAILABLE if that backend cannot run here),
 * else the fastest available host backend (cpu, then reference). When
 * SMM_BACKEND holds an unknown name this still returns that host backend,
 * but creating a context on AUTO fails (SMM_ERR_INVALID_ARG,
 * smm_context_create). */
SMM_API smm_backend smm_backend_auto(void);

/* The GPU backend a context created on AUTO runs device-memory calls on:
 * the first of cuda, rocm whose driver's device node exists (/dev/nvidiactl
 * or /dev/dxg; /dev/kfd) and whose plugin and runtime report a device;
 * SMM_BACKEND_AUTO when there is none. Where no device node exists no
 * plugin is loaded, so no GPU runtime is started. With SMM_BACKEND set to
 * a name other than "auto", the backend it names when that is a GPU
 * backend, else SMM_BACKEND_AUTO. If reason is non-NULL, *reason is set
 * to a static string: the device found, or why there is none (e.g. "no GPU
 * runtime found (...)", or the plugin's or runtime's reason). Probed once
 * per process; thread-safe. */
SMM_API smm_backend smm_backend_auto_device(const char **reason);

/* Space-separated CPU features found by CPUID and confirmed usable by the OS
 * through XGETBV (e.g. "sse2 ssse3 sse4.1 avx avx2 fma f16c avx512f ...");
 * "" on non-x86 hosts. Static string, never NULL. */
SMM_API const char *smm_cpu_features(void);

/* The CPU brand string from CPUID ("" when unknown). Never NULL. */
SMM_API const char *smm_cpu_name(void);

/*
 * The CPU backend's kernel levels, by name: "scalar" (portable C), then
 * the vector levels in the order the backend prefers them, lowest first
 * (e.g. "avx2", "avx_vnni", "avx512_vnni", "amx_int8"). A context on the
 * cpu backend runs the highest level this CPU, OS and build run, capped
 * by the environment variable SMM_CPU_ISA when it names a level (any
 * case); every level computes the same bits. The emulations (e.g.
 * "avx512_vnni_emulated") are portable C with a vector level's blocking
 * and packed format, a testing aid: they run on any CPU and are chosen
 * only when SMM_CPU_ISA names them.
 */
typedef enum {
    SMM_CPU_LEVELS_RUNNABLE = 0,  /* the levels this CPU, OS and build run
                                     (whatever SMM_CPU_ISA says) */
    SMM_CPU_LEVELS_ALL = 1,       /* every level this library knows */
    SMM_CPU_LEVELS_EMULATED = 2,  /* the emulations */
} smm_cpu_level_set;

/* The names of the levels in `set`, lowest first: names[i] for i < max
 * and i < *count receive static strings (the rest of names untouched);
 * *count receives the number of levels in the set, which may exceed max
 * (max = 0 with names NULL asks for the count only). The RUNNABLE set
 * always holds "scalar". Thread-safe.
 * Errors (nothing written): SMM_ERR_INVALID_ARG (set outside the enum,
 * max < 0, names NULL with max > 0, or count NULL). */
SMM_API smm_status smm_cpu_levels(smm_cpu_level_set set, const char **names, int max,
                                  int *count);

/* The level a context created now on the cpu backend runs (the one that
 * smm_backend_available(SMM_BACKEND_CPU, ...)'s reason names): the
 * highest of SMM_CPU_LEVELS_RUNNABLE at or below the cap SMM_CPU_ISA
 * names, or the emulation it names; SMM_CPU_ISA is read at each call.
 * An SMM_CPU_ISA that names no level caps nothing. On Linux, choosing
 * "amx_int8" asks the OS for the process's tile-state permission, as
 * creating such a context does. Static string, never NULL. Thread-safe. */
SMM_API const char *smm_cpu_level_chosen(void);

/* A level's kernels in a few words (e.g. for "avx2": "AVX2 kernels (int16
 * vpmaddwd)"), for any name smm_cpu_levels lists (any case; "c" is a
 * synonym of "scalar"). Static string; NULL when name is NULL or names no
 * level. */
SMM_API const char *smm_cpu_level_description(const char *name);

/* ------------------------------------------------------------------ */
/* Contexts                                                            */
/* ------------------------------------------------------------------ */

/*
 * Creates a context on `backend`. The environment variable
 * SMM_BACKEND=reference|cpu|rocm|cuda overrides AUTO (and only AUTO): the
 * context is then one of that backend. A backend named in SMM_BACKEND that
 * cannot run here is an error, never silently replaced.
 * Otherwise (SMM_BACKEND unset, empty or "auto") a context on AUTO runs
 * each call where its data lives. The platform is probed once per process
 * (smm_backend_auto, smm_backend_auto_device). Each call of
 * smm_scaled_mm, smm_gemm_s8s8s32, smm_gemm_s8s8s32_packed, smm_pack_b,
 * smm_quantize_i8 and smm_scaled_epilogue, before its other argument checks, asks the GPU runtime
 * where each of its pointers lives (as a GPU context does, see "Device
 * memory and streams") and runs:
 *   - on the GPU backend found, when every pointer is device memory of the
 *     calling thread's current device, managed memory, or host memory
 *     registered with the runtime and mapped at the same address, and at
 *     least one is not plain host memory;
 *   - on the host backend (smm_backend_auto()) when any pointer is plain
 *     host memory and none is device memory (managed and registered memory
 *     is read there too), and always when no GPU was found;
 *   - nowhere when plain host memory and device memory are mixed, or a
 *     pointer is another device's memory: SMM_ERR_INVALID_ARG, naming the
 *     pointers, nothing queued or written.
 * A packed B's memory counts as a pointer: a B packed from device memory
 * is a device pointer. On an AUTO context, smm_malloc, smm_free,
 * smm_memcpy, smm_context_set_stream and smm_synchronize work on the GPU
 * found as on a GPU context; without a GPU they work on host memory, and
 * smm_memcpy then takes every kind (each is a host copy), so one program
 * that allocates through smm_malloc and copies with the device kinds runs
 * on every machine. smm_context_set_num_threads sets the host backend's
 * threads. smm_context_backend gives the host backend,
 * smm_context_device_backend the GPU one. The rules for threads are those
 * of every context ("Threads" below).
 * Errors: SMM_ERR_INVALID_ARG (ctx NULL, backend outside the enum, or
 * SMM_BACKEND set to an unknown name), SMM_ERR_NOT_AVAILABLE (the backend
 * cannot run here; smm_backend_available says why), SMM_ERR_NO_MEMORY.
 * On error *ctx is set to NULL (when ctx is non-NULL).
 */
SMM_API smm_status smm_context_create(smm_context **ctx, smm_backend backend);

/* As smm_context_create, with all of the context's allocations going
 * through `allocator` (NULL: malloc). The allocator struct is copied.
 * Host working memory is allocated at the start of each call and freed
 * before it returns (a failure is SMM_ERR_NO_MEMORY with nothing written);
 * on the cpu backend a matrix multiplication takes, per thread, a tile of
 * int32 sums and packed panels (under 1 MiB), and at the avx_vnni,
 * avx512_vnni and amx_int8 levels also a shifted copy of A shared by the
 * threads: M + 1 rows of K bytes rounded up to 64 (64 more when that is a
 * multiple of 1024), or, when that exceeds 16 MiB, as many rows as fit in
 * 16 MiB (at least one row block) at a time.
 * Errors: as smm_context_create, plus SMM_ERR_INVALID_ARG when the
 * allocator has a NULL alloc or free member. */
SMM_API smm_status smm_context_create_with_allocator(smm_context **ctx,
                                                     smm_backend backend,
                                                     const smm_allocator *allocator);

/* Frees the context. NULL is a no-op. */
SMM_API void smm_context_destroy(smm_context *ctx);

/* The concrete backend of a context (never AUTO); for a context created on
 * AUTO without SMM_BACKEND, the one its host-memory calls run on. AUTO for
 * NULL. */
SMM_API smm_backend smm_context_backend(const smm_context *ctx);

/* The GPU backend a context runs device-memory calls on, and whose memory
 * smm_malloc returns: its own backend on a rocm or cuda context, the GPU
 * found on a context created on AUTO (smm_backend_auto_device), else (host
 * contexts, AUTO without a GPU, NULL) SMM_BACKEND_AUTO. */
SMM_API smm_backend smm_context_device_backend(const smm_context *ctx);

/*
 * Sets the number of threads the context's CPU work uses. 0 (the default)
 * means up to omp_get_max_threads() at each call (so OMP_NUM_THREADS
 * applies), fewer for a matrix multiplication too small to share: one
 * thread per 2^17 multiply-adds (M * N * K) at most. n > 0 uses n threads
 * wherever the work splits into that many tiles. Results never depend on
 * it. The reference backend is single-threaded and accepts any valid value.
 * Errors: SMM_ERR_INVALID_ARG if ctx is NULL or num_threads < 0.
 */
SMM_API smm_status smm_context_set_num_threads(smm_context *ctx, int num_threads);

/* The value set by smm_context_set_num_threads (0 = default); -1 for NULL. */
SMM_API int smm_context_get_num_threads(const smm_context *ctx);

/* A message describing the last error the calling thread got from a call
 * on this context (e.g. "smm_scaled_mm: lda (3) < k (5)"); "" after a
 * success, and "" in a thread that has made no call on the context.
 * Messages are kept per thread (see "Threads" below): each thread keeps
 * those of the last 16 contexts it got an error from. Valid until the
 * calling thread's next call on the context. "" for NULL. */
SMM_API const char *smm_context_last_error(const smm_context *ctx);

/*
 * Threads. One context may be used by several threads at the same time for
 * smm_scaled_mm, smm_gemm_s8s8s32, smm_gemm_s8s8s32_packed, smm_pack_b,
 * smm_quantize_i8, smm_scaled_epilogue, smm_malloc, smm_free, smm_memcpy, smm_synchronize,
 * smm_context_backend, smm_context_get_num_threads and
 * smm_context_last_error: these calls only read the context, each call's
 * working memory is its own, results are those of the same calls made one
 * after the other, and each thread reads the messages of its own calls only.
 * On a GPU context concurrent calls are queued on the context's one stream,
 * in the order the runtime receives them. smm_context_set_num_threads,
 * smm_context_set_stream and smm_context_destroy change the context: no
 * other call on the same context may run while one of them does. Each CPU
 * call runs its own OpenMP team, so concurrent calls each use their
 * context's thread count (set it to share the cores). A packed B is only
 * read, and may be used by concurrent calls on any contexts that accept it.
 * tests/check_threads.c holds this to account.
 */

/* ------------------------------------------------------------------ */
/* Device memory and streams (GPU contexts: SMM_BACKEND_ROCM, _CUDA)    */
/* ------------------------------------------------------------------ */

/*
 * On a GPU context every matrix, vector and scale pointer passed to
 * smm_scaled_mm, smm_gemm_s8s8s32, smm_gemm_s8s8s32_packed, smm_pack_b,
 * smm_quantize_i8 and smm_scaled_epilogue is a DEVICE pointer (from smm_malloc or the vendor
 * runtime). After the other argument checks, and before anything is queued,
 * each call asks the runtime where every pointer it reads or writes lives
 * (cudaPointerGetAttributes / hipPointerGetAttributes on the first byte of
 * each operand; about 85 ns per pointer on an H200, 0.4 to 0.6 us a call):
 * device memory of the calling thread's current device and managed memory
 * are accepted, and so is host memory registered with the runtime
 * (cudaHostRegister, cudaMallocHost) that the device sees at the same
 * address (read across the bus: slow, but correct); plain host memory
 * (malloc, the stack) and another device's memory are SMM_ERR_INVALID_ARG
 * naming the arguments, with nothing queued; the context stays usable.
 * Those calls are asynchronous: they are queued in order on
 * the context's stream (the runtime's default stream until
 * smm_context_set_stream) and return once queued; argument errors are still
 * reported before anything is queued, and nothing is written then. Call
 * smm_synchronize before reading results on the host. Errors the runtime
 * reports become SMM_ERR_DEVICE, with the runtime's own message in
 * smm_context_last_error. On CPU and reference contexts these functions
 * work on host memory (smm_malloc is an aligned host allocation,
 * smm_memcpy with SMM_MEMCPY_HOST_TO_HOST is a memcpy and any other kind is
 * SMM_ERR_INVALID_ARG, smm_synchronize returns at once). A context
 * created on AUTO runs each call where its pointers live
 * (smm_context_create).
 * smm_scaled_mm, smm_gemm_s8s8s32, smm_gemm_s8s8s32_packed,
 * smm_quantize_i8 and smm_scaled_epilogue only queue kernels, so while the caller captures the
 * stream it gave smm_context_set_stream into a CUDA (or HIP) graph, they
 * are recorded into that graph and run when it is replayed, with the same
 * results (tests/check_gpu_kernels.c checks this for smm_scaled_mm and
 * smm_quantize_i8 with CUDA graphs captured in the runtime's strictest
 * mode and replayed twice; HIP graphs are not checked).
 * The graph holds the pointers it was captured with: the buffers and
 * packed B must outlive its replays. smm_pack_b, smm_packed_b_destroy,
 * smm_memcpy, smm_malloc, smm_free and smm_synchronize wait for the device,
 * allocate or free, and must not be called while the context's stream is
 * being captured (nor, in the runtime's global capture mode, while any
 * capture is in progress).
 */

/* Direction of smm_memcpy. */
typedef enum {
    SMM_MEMCPY_HOST_TO_DEVICE = 0,
    SMM_MEMCPY_DEVICE_TO_HOST,
    SMM_MEMCPY_DEVICE_TO_DEVICE,
    SMM_MEMCPY_HOST_TO_HOST
} smm_memcpy_kind;

/*
 * Allocates `bytes` bytes of the context's memory (device memory on a GPU
 * context and on an AUTO context with a GPU, aligned to at least 256 bytes;
 * host memory aligned to 64 bytes elsewhere, taken through the context's
 * allocator). bytes == 0 gives a
 * valid, unique pointer. Free it with smm_free on the same context, before
 * that context is destroyed.
 * Errors (*ptr set to NULL when ptr is non-NULL): SMM_ERR_INVALID_ARG (ctx
 * or ptr NULL), SMM_ERR_NO_MEMORY, SMM_ERR_DEVICE.
 */
SMM_API smm_status smm_malloc(smm_context *ctx, size_t bytes, void **ptr);

/* Frees memory from smm_malloc; NULL is a no-op. On a GPU context it waits
 * for the work queued on the device first (as the runtime's free does).
 * Errors: SMM_ERR_INVALID_ARG (ctx NULL), SMM_ERR_DEVICE. */
SMM_API smm_status smm_free(smm_context *ctx, void *ptr);

/*
 * Copies `bytes` bytes (not elements) from src to dst in the direction
 * `kind`. On a GPU context it is ordered on the context's stream; a copy to
 * or from host memory returns when the host buffer may be reused (host to
 * device) or holds the data (device to host). Once kind is validated,
 * bytes == 0 does nothing.
 * On an AUTO context without a GPU every kind is a host copy.
 * Errors: SMM_ERR_INVALID_ARG (ctx NULL, kind outside the enum, a device
 * kind on a host context (not AUTO) (even with bytes == 0), dst or src NULL
 * with bytes > 0, or a range that wraps the address space),
 * SMM_ERR_OVERLAP (a copy within one memory whose ranges intersect),
 * SMM_ERR_DEVICE.
 */
SMM_API smm_status smm_memcpy(smm_context *ctx, void *dst, const void *src, size_t bytes,
                              smm_memcpy_kind kind);

/*
 * Makes the context queue its work on `stream` (a hipStream_t or
 * cudaStream_t passed as void *; NULL: the runtime's default stream). The
 * caller keeps ownership and must keep the stream alive while the context
 * uses it. Errors: SMM_ERR_INVALID_ARG (ctx NULL), SMM_ERR_UNSUPPORTED (not
 * a GPU context and stream != NULL).
 */
SMM_API smm_status smm_context_set_stream(smm_context *ctx, void *stream);

/* Waits until all work queued on the context's stream has finished.
 * Errors: SMM_ERR_INVALID_ARG (ctx NULL), SMM_ERR_DEVICE (the runtime
 * reported an error, e.g. from an earlier asynchronous kernel). */
SMM_API smm_status smm_synchronize(smm_context *ctx);

/* ------------------------------------------------------------------ */
/* Scaled matrix multiplication                                        */
/* ------------------------------------------------------------------ */

/*
 * Arguments of smm_scaled_mm (doc/numerics.md for every formula):
 *   a        int8 M x K, row-major, lda >= K (elements).       activations
 *   b        int8 N x K, row-major, ldb >= K (elements).       weights
 *            (the [out_features, in_features] checkpoint layout, i.e.
 *            K x N column-major)
 *   scale_a  float32, scale_a_len == 1 (per-tensor) or M (per-token)
 *   scale_b  float32, scale_b_len == 1 (per-tensor) or N (per-channel)
 *   bias     float32, N elements, or NULL
 *   azp      int32 activation zero points, azp_len == 1 (per-tensor) or
 *            M (per-token), or NULL (azp_len then ignored)
 *   c        M x N, row-major, ldc >= N (elements), of type c_dtype:
 *            SMM_DTYPE_F32, SMM_DTYPE_F16 or SMM_DTYPE_BF16
 *   b_packed B prepacked by smm_pack_b, or NULL (the default). When set,
 *            b must be NULL, ldb is ignored, and b_packed's n and k must
 *            equal n and k; the context must be able to use it (see
 *            smm_pack_b). Results are bit-for-bit those of the unpacked B.
 */
typedef struct smm_scaled_mm_args {
    int64_t m, n, k;
    const int8_t *a;
    int64_t lda;
    const int8_t *b;
    int64_t ldb;
    const float *scale_a;
    int64_t scale_a_len;
    const float *scale_b;
    int64_t scale_b_len;
    const float *bias;
    const int32_t *azp;
    int64_t azp_len;
    void *c;
    int64_t ldc;
    smm_dtype c_dtype;
    const smm_packed_b *b_packed;
} smm_scaled_mm_args;

/*
 * C = epilogue(A * B^T), the w8a8 linear layer; vLLM's cutlass_scaled_mm,
 * AITER's gemm_a8w8. Per element (doc/numerics.md, from vLLM's
 * ScaledEpilogue / ScaledEpilogueBias / ScaledEpilogueBiasAzp[Token]):
 *   acc  = sum_k A[m][k] * B[n][k]                (int32, wrapping)
 *   acc' = acc - z * colsum_B[n]                  (with azp; wrapping)
 *   t = (float)acc' * sb;  y = sa * t  |  fmaf(sa, t, bias[n])  |
 *   fmaf(sa, t, +0.0f) (azp, no bias);  C = round_to_nearest_even(y)
 * NaN results are written as the output type's canonical NaN.
 * M == 0 or N == 0: success, nothing written. K == 0: acc = 0.
 * Errors (nothing written): SMM_ERR_INVALID_ARG (ctx or args NULL, any size
 * negative, a required pointer NULL, lda < K when M > 1, ldb < K when N > 1,
 * ldc < N when M > 1, scale_a_len not 1 or M, scale_b_len not 1 or N,
 * azp_len not 1 or M with azp set, c_dtype not F32/F16/BF16, a footprint
 * whose byte count overflows; with b_packed: b also set, b_packed's n or k
 * not those of the problem, or a packed format this context cannot use),
 * SMM_ERR_OVERLAP (C's footprint intersects A, B, scale_a, scale_b, bias,
 * azp, or b_packed's buffer or handle), SMM_ERR_NO_MEMORY, SMM_ERR_UNSUPPORTED,
 * SMM_ERR_DEVICE. The b_packed checks are made even when M or N is 0.
 * On a GPU context, and on an AUTO context with a GPU, also
 * SMM_ERR_INVALID_ARG for pointers in memory the call cannot run on
 * (plain host memory on a GPU context, another device's memory, host and
 * device memory mixed on AUTO), naming them; see "Device memory and
 * streams" and smm_context_create. The same holds for
 * smm_gemm_s8s8s32, smm_gemm_s8s8s32_packed, smm_pack_b and smm_quantize_i8.
 */
SMM_API smm_status smm_scaled_mm(smm_context *ctx, const smm_scaled_mm_args *args);

/*
 * The raw accumulators: C[m][n] = sum_k A[m][k] * B[n][k], reduced modulo
 * 2^32 to int32 (exact, no wrap, whenever K <= 131071).
 *   a: int8 M x K, lda >= K;  b: int8 N x K, ldb >= K;
 *   c: int32 M x N, ldc >= N (all leading dimensions in elements).
 * Errors (nothing written): SMM_ERR_INVALID_ARG (ctx NULL, negative size,
 * required pointer NULL, leading dimension too small where read, byte count
 * overflow), SMM_ERR_OVERLAP (C's footprint intersects A or B),
 * SMM_ERR_NO_MEMORY, SMM_ERR_UNSUPPORTED, SMM_ERR_DEVICE.
 */
SMM_API smm_status smm_gemm_s8s8s32(smm_context *ctx, int64_t m, int64_t n, int64_t k,
                                    const int8_t *a, int64_t lda,
                                    const int8_t *b, int64_t ldb,
                                    int32_t *c, int64_t ldc);

/* ------------------------------------------------------------------ */
/* The epilogue alone (tensor parallelism)                             */
/* ------------------------------------------------------------------ */

/*
 * Arguments of smm_scaled_epilogue: smm_scaled_mm_args with the int8
 * operands replaced by what the epilogue reads of them.
 *   acc      int32 M x N, row-major, ldacc >= N (elements): the
 *            accumulators sum_k A[m][k] * B[n][k] (mod 2^32), e.g. of
 *            smm_gemm_s8s8s32, or the wrapping sum of several of them
 *   scale_a  float32, scale_a_len == 1 (per-tensor) or M (per-token)
 *   scale_b  float32, scale_b_len == 1 (per-tensor) or N (per-channel)
 *   bias     float32, N elements, or NULL
 *   azp      int32 activation zero points, azp_len == 1 or M, or NULL
 *            (azp_len and colsum_b then ignored)
 *   colsum_b int32, N elements: colsum_b[n] = sum_k B[n][k] (mod 2^32);
 *            required with azp. smm_gemm_s8s8s32 computes it exactly: with
 *            A one row of K ones (M = 1), C is the column sums of B
 *   c        M x N, row-major, ldc >= N (elements), of type c_dtype:
 *            SMM_DTYPE_F32, SMM_DTYPE_F16 or SMM_DTYPE_BF16
 */
typedef struct smm_epilogue_args {
    int64_t m, n;
    const int32_t *acc;
    int64_t ldacc;
    const float *scale_a;
    int64_t scale_a_len;
    const float *scale_b;
    int64_t scale_b_len;
    const float *bias;
    const int32_t *azp;
    int64_t azp_len;
    const int32_t *colsum_b;
    void *c;
    int64_t ldc;
    smm_dtype c_dtype;
} smm_epilogue_args;

/*
 * C = epilogue(acc): the second half of smm_scaled_mm, on accumulators the
 * caller gives. Per element, the formula of smm_scaled_mm (doc/numerics.md,
 * "Accumulation" and "Epilogue") with acc and colsum_b in place of the
 * sums over K:
 *   acc' = acc[m][n] - z * colsum_b[n]          (with azp; wrapping)
 *   t = (float)acc' * sb;  y = sa * t  |  fmaf(sa, t, bias[n])  |
 *   fmaf(sa, t, +0.0f) (azp, no bias);  C = round_to_nearest_even(y)
 * so that with acc = A * B^T (smm_gemm_s8s8s32) and colsum_b the column
 * sums of B, C is bit for bit that of smm_scaled_mm on A and B, on every
 * backend.
 * Tensor parallelism without losing a bit: int32 addition modulo 2^32 is
 * associative, so when K is split across T ranks, the wrapping sum (an
 * all-reduce of int32 with SUM) of the ranks' accumulators of their
 * K-slices, and of their K-slices' column sums, is the accumulator and
 * column sum of the whole K; one smm_scaled_epilogue on them gives the
 * bits of the TP = 1 smm_scaled_mm, for any T and any split
 * (doc/numerics.md, "Accumulation"; the recipe over NCCL in
 * doc/tensor-parallel.md).
 * M == 0 or N == 0: success, nothing written.
 * Errors (nothing written): SMM_ERR_INVALID_ARG (ctx or args NULL, m or n
 * negative, acc, c, scale_a or scale_b NULL, colsum_b NULL with azp set,
 * ldacc < N or ldc < N when M > 1, scale_a_len not 1 or M, scale_b_len
 * not 1 or N, azp_len not 1 or M with azp set, c_dtype not F32/F16/BF16, a
 * pointer not aligned to its element size, a footprint whose byte count
 * overflows), SMM_ERR_OVERLAP (C's footprint intersects acc, scale_a,
 * scale_b, bias, azp or colsum_b), SMM_ERR_NO_MEMORY, SMM_ERR_UNSUPPORTED
 * (a GPU plugin without this operation), SMM_ERR_DEVICE. Pointers are
 * checked, and an AUTO context routes the call, as for smm_scaled_mm
 * ("Device memory and streams", smm_context_create).
 */
SMM_API smm_status smm_scaled_epilogue(smm_context *ctx, const smm_epilogue_args *args);

/* ------------------------------------------------------------------ */
/* Prepacked weights                                                   */
/* ------------------------------------------------------------------ */

/*
 * Packs B (int8, N x K, row-major, ldb >= K elements when N > 1; the `b` of
 * smm_scaled_mm) once, in the layout ctx's backend computes from, together
 * with what its kernels precompute (the column sums of B over K, modulo
 * 2^32, used with azp). Pass the result as smm_scaled_mm_args.b_packed (with
 * b = NULL) or to smm_gemm_s8s8s32_packed: every result is bit-for-bit the
 * one computed from the unpacked B, and the backend skips work it would
 * redo on every call (packing B, the column sums). A packed B is only read
 * by the calls using it, so concurrent calls (on different contexts) may
 * share it. The packed copy is independent of b (which may be freed) and
 * of ctx: it is allocated through ctx's allocator, which it keeps, so
 * smm_packed_b_destroy works after smm_context_destroy(ctx).
 *
 * Packing is a pure function of B and the format (smm_packed_b_format). A
 * packed B can be used with any context of the same backend whose kernels
 * compute from the same format. The CPU format depends on the kernel level
 * the context chose (SMM_CPU_ISA, `scaledmm info`): a B packed on an
 * AVX-512 VNNI context is not accepted by an AVX2 one. Using a packed B with
 * a context of another backend or format is SMM_ERR_INVALID_ARG, with a
 * message naming both formats; nothing is repacked behind the caller's back.
 *   cpu, levels scalar and avx2: int16 panels of 4 rows of B per K block of
 *              1024 (the blocked driver's layout), an int8 copy of B (read
 *              by the small-M path) and the column sums: about 3 bytes per
 *              element of B (panels padded to 4 rows and to K a multiple of 16).
 *   cpu, levels avx_vnni, avx512_vnni and amx_int8: int8 panels of 8 / 16
 *              / 16 rows of B with 4 consecutive K values per row (the
 *              vpdpbusd layout; avx512_vnni's and amx_int8's are the same),
 *              zero-padded to K a multiple of 4, and the column sums: about
 *              1 byte per element of B.
 *   rocm, cuda: a device copy of B's rows (ld K), in device memory.
 *   reference: an int8 copy of B (the reference stays the plain loop nest).
 * On a context created on AUTO, b's memory decides (smm_context_create): a
 * B in the GPU's memory is packed in the GPU backend's format, a B in host
 * memory in the host backend's; calls using the packed B then run where
 * it lives (its buffer counts as one of their pointers).
 * Errors (*out set to NULL when out is non-NULL): SMM_ERR_INVALID_ARG (ctx
 * or out NULL, b NULL with N * K > 0, negative size, ldb < K when N > 1,
 * the byte size of B or of the packed copy overflows), SMM_ERR_NO_MEMORY,
 * SMM_ERR_UNSUPPORTED (the backend has no packed format), SMM_ERR_DEVICE.
 */
SMM_API smm_status smm_pack_b(smm_context *ctx, int64_t n, int64_t k, const int8_t *b,
                              int64_t ldb, smm_packed_b **out);

/* Frees a packed B (through the allocator of the context that made it, which
 * may already be destroyed). NULL is a no-op. */
SMM_API void smm_packed_b_destroy(smm_packed_b *pb);

/* N and K of a packed B; -1 for NULL. */
SMM_API int64_t smm_packed_b_n(const smm_packed_b *pb);
SMM_API int64_t smm_packed_b_k(const smm_packed_b *pb);

/* A static description of the packed layout, prefixed with the backend,
 * e.g. "cpu int16 panels 4x1024 + int8 rows + colsums"; two packed Bs are
 * interchangeable exactly when their formats are equal strings. "" for
 * NULL. Never NULL. */
SMM_API const char *smm_packed_b_format(const smm_packed_b *pb);

/*
 * smm_gemm_s8s8s32 with B prepacked: C[m][n] = sum_k A[m][k] * B[n][k]
 * (mod 2^32). a: int8 M x K, lda >= K; pb: packed N x K by smm_pack_b;
 * c: int32 M x N, ldc >= N. Shorthand for the b_packed route of
 * smm_scaled_mm without the epilogue.
 * Errors (nothing written): as smm_gemm_s8s8s32, plus SMM_ERR_INVALID_ARG
 * when pb is NULL, pb's n or k differ from n and k, or ctx cannot use pb's
 * format; SMM_ERR_OVERLAP when C intersects pb's buffer or handle.
 */
SMM_API smm_status smm_gemm_s8s8s32_packed(smm_context *ctx, int64_t m, int64_t n, int64_t k,
                                           const int8_t *a, int64_t lda,
                                           const smm_packed_b *pb, int32_t *c, int64_t ldc);

/* ------------------------------------------------------------------ */
/* Activation quantization                                             */
/* ------------------------------------------------------------------ */

/*
 * Arguments of smm_quantize_i8:
 *   x      M x K of x_dtype (F32, F16 or BF16), row-major, ldx >= K
 *   q      int8 M x K output, row-major, ldq >= K (elements)
 *   scale  STATIC_PER_TENSOR: input, 1 float (required)
 *          DYNAMIC_PER_TOKEN: output, M floats (required)
 *   azp    STATIC_PER_TENSOR: optional input, 1 int32 (NULL: symmetric)
 *          DYNAMIC_PER_TOKEN: optional output, M int32 (NULL: symmetric)
 */
typedef struct smm_quantize_args {
    int64_t m, k;
    const void *x;
    smm_dtype x_dtype;
    int64_t ldx;
    int8_t *q;
    int64_t ldq;
    float *scale;
    int32_t *azp;
    smm_quant_mode mode;
} smm_quantize_args;

/*
 * Quantizes activations to int8 (formulas of vLLM's
 * csrc/quantization/w8a8/int8/scaled_quant.cu; doc/numerics.md):
 *   static symmetric:   q = rne_sat_i8(x / s)
 *   static asymmetric:  q = sat_i8(rne_sat_i32(x * fl(1/s)) + z)
 *   dynamic symmetric:  s[m] = amax/127, q = rne_sat_i8(x * (127/amax))
 *   dynamic asymmetric: s[m] = (max-min)/255, z[m] = rne(-128 - min/s),
 *                       q as static asymmetric (degenerate rows fall back to
 *                       symmetric with z[m] = 0)
 * M == 0: success, nothing written. K == 0 (dynamic): scale[m] = 0 and
 * azp[m] = 0 are written for every row.
 * Errors (nothing written): SMM_ERR_INVALID_ARG (ctx or args NULL, negative
 * size, required pointer NULL, ldx < K or ldq < K when M > 1, unknown
 * x_dtype or mode, byte count overflow), SMM_ERR_OVERLAP (an output's
 * footprint intersects an input or another output), SMM_ERR_NO_MEMORY,
 * SMM_ERR_UNSUPPORTED, SMM_ERR_DEVICE.
 */
SMM_API smm_status smm_quantize_i8(smm_context *ctx, const smm_quantize_args *args);

/* ------------------------------------------------------------------ */
/* The whole linear layer: quantize, then multiply                     */
/* ------------------------------------------------------------------ */

/*
 * Arguments of smm_linear:
 *   x        M x K activations of x_dtype (F32, F16 or BF16), row-major,
 *            ldx >= K (elements)
 *   mode     SMM_QUANT_STATIC_PER_TENSOR: x_scale (1 float, required) and
 *            x_azp (1 int32, or NULL: symmetric) are inputs;
 *            SMM_QUANT_DYNAMIC_PER_TOKEN: a scale per row (and, when
 *            asymmetric, a zero point per row) is computed
 *   asymmetric  0 or 1. DYNAMIC_PER_TOKEN: 1 computes per-token zero
 *            points. STATIC_PER_TENSOR: 1 requires x_azp (x_azp decides)
 *   x_scale  STATIC: input, 1 float. DYNAMIC: output, M floats, or NULL
 *            (not returned)
 *   x_azp    STATIC: optional input, 1 int32. DYNAMIC: output, M int32, or
 *            NULL; must be NULL when not asymmetric
 *   q, ldq   output: the int8 activations, M x K, row-major, ldq >= K; or
 *            NULL (not returned)
 *   b ... c_dtype, b_packed: the weights, weight scales, bias and output,
 *            as in smm_scaled_mm_args
 * On a GPU context (and on an AUTO context whose data is on a GPU), q,
 * and with DYNAMIC_PER_TOKEN x_scale (and x_azp when asymmetric), are
 * required: the int8 activations and scales pass through that device
 * memory, which the caller provides (the library allocates no device
 * memory per call). On host contexts each may be NULL: the call then
 * keeps them in its own working memory (smm_context_create_with_allocator).
 */
typedef struct smm_linear_args {
    int64_t m, n, k;
    const void *x;
    smm_dtype x_dtype;
    int64_t ldx;
    smm_quant_mode mode;
    int asymmetric;
    float *x_scale;
    int32_t *x_azp;
    int8_t *q;
    int64_t ldq;
    const int8_t *b;
    int64_t ldb;
    const float *scale_b;
    int64_t scale_b_len;
    const float *bias;
    void *c;
    int64_t ldc;
    smm_dtype c_dtype;
    const smm_packed_b *b_packed;
} smm_linear_args;

/*
 * The w8a8 linear layer in one call, as vLLM runs it: quantize the float
 * activations to int8 (smm_quantize_i8, mode and asymmetric as above),
 * then C = epilogue(Q * B^T) (smm_scaled_mm with a = Q, scale_a = the
 * activation scales (per-tensor, or per-token when dynamic), azp = the
 * zero points when asymmetric). The results, C and every returned q,
 * x_scale and x_azp, are bit for bit those of the two calls made one after
 * the other (doc/numerics.md).
 * M == 0: success, nothing written (a b_packed is still checked). N == 0:
 * only q, x_scale and x_azp are written. K == 0: as the two calls (dynamic
 * scales 0, C = epilogue of zero sums).
 * Errors (nothing written): SMM_ERR_INVALID_ARG for every error of either
 * call on its half of the arguments (named "smm_linear" in the message),
 * for asymmetric not 0 or 1, for asymmetric 1 with static mode and no
 * x_azp, for x_azp set with dynamic mode and asymmetric 0, and for q,
 * x_scale or x_azp NULL where a GPU runs the call (above);
 * SMM_ERR_OVERLAP when an output (c, q, a dynamic x_scale or x_azp)
 * intersects an input (x, b, b_packed's buffer or handle, scale_b, bias, a
 * static x_scale or x_azp) or another output; SMM_ERR_NO_MEMORY (the
 * working memory for q, x_scale, x_azp not given, allocated only once
 * every check has passed), SMM_ERR_UNSUPPORTED,
 * SMM_ERR_DEVICE. Pointers are checked as for smm_scaled_mm.
 */
SMM_API smm_status smm_linear(smm_context *ctx, const smm_linear_args *args);

/* ------------------------------------------------------------------ */
/* Scalar conversions used by the contract (exported for tools/tests)  */
/* ------------------------------------------------------------------ */

/* binary32 -> binary16 / bfloat16 bits, round to nearest even, subnormals
 * kept, overflow to +-Inf, any NaN -> canonical 0x7FFF. */
SMM_API uint16_t smm_f32_to_f16(float x);
SMM_API uint16_t smm_f32_to_bf16(float x);
/* Exact widening of binary16 / bfloat16 bits to binary32. */
SMM_API float smm_f16_to_f32(uint16_t h);
SMM_API float smm_bf16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif
#endif /* SCALEDMM_H */
