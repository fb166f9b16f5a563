// torch_ops.cpp - scaledmm's PyTorch custom operators (namespace `scaledmm`).
//
// Compiled against the installed torch on first use (scaledmm/torch.py) and
// linked to the libscaledmm bundled with the package. The ops are
// registered with the dispatcher in C++ (the CPU and CUDA keys; ROCm builds
// of torch use the CUDA key too), so a call from Python costs what any
// native op's dispatch costs. Their fake (meta) kernels are registered in
// scaledmm/torch.py.
//
// The tensor's device picks the backend: CPU tensors run on the library's
// cpu backend (or the one scaledmm.torch.set_cpu_backend names), CUDA
// tensors on the cuda (or, under a ROCm torch, rocm) backend, on the
// tensor's device and torch's current stream of that device, so the ops
// are recorded into a CUDA graph being captured on that stream. Contexts
// are created once per thread and backend. CPU work uses the library's
// OpenMP threads (OMP_NUM_THREADS; fewer on small problems) unless
// scaledmm.torch.set_num_threads sets a count. Every argument is checked here, before the
// library checks it again; on any error nothing is written.
//
// scaledmm::PackedB (a TorchScript custom class) owns a weight packed once
// by smm_pack_b, with the context of the weight's device; scaled_mm_packed
// takes it in place of the int8 weight and gives the same bits; so does
// linear_packed (smm_linear: quantize_i8 and scaled_mm_packed in one call).
// It may be used only on the device and backend it was packed for (checked
// here, with a message naming both). Its __obj_flatten__ gives torch.compile the state
// its fake class (scaledmm/torch.py) is rebuilt from.
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <scaledmm.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <tuple>

namespace {

std::atomic<int> cpu_backend{SMM_BACKEND_CPU};
std::atomic<int> gpu_backend{SMM_BACKEND_CUDA};
std::atomic<int> cpu_threads{0};   // smm_context_set_num_threads for CPU work

struct ThreadContexts {
    std::array<smm_context *, 8> ctx{};
    ~ThreadContexts()
    {
        for (smm_context *c : ctx)
            smm_context_destroy(c);
    }
};

smm_context *context_for(int backend)
{
    thread_local ThreadContexts cache;
    smm_context *&c = cache.ctx.at(static_cast<size_t>(backend));
    if (!c) {
        smm_status st = smm_context_create(&c, static_cast<smm_backend>(backend));
        if (st != SMM_OK) {
            const char *why = "";
            smm_backend_available(static_cast<smm_backend>(backend), &why);
            TORCH_CHECK(false, "scaledmm: cannot create a context on backend '",
                        smm_backend_name(static_cast<smm_backend>(backend)), "': ",
                        smm_strerror(st), (why && *why) ? ": " : "", why ? why : "");
        }
    }
    return c;
}

// The context for work on `device`, bound to torch's current stream there
// (GPU) or to torch's thread count (CPU).
smm_context *context_on(const c10::Device &device)
{
    if (device.is_cpu()) {
        smm_context *c = context_for(cpu_backend.load(std::memory_order_relaxed));
        smm_context_set_num_threads(c, cpu_threads.load(std::memory_order_relaxed));
        return c;
    }
    TORCH_CHECK(device.is_cuda(), "scaledmm: tensors on ", device,
                " are not supported (CPU and CUDA/ROCm devices only)");
    smm_context *c = context_for(gpu_backend.load(std::memory_order_relaxed));
    c10::Stream s = c10::impl::getDeviceGuardImpl(device.type())->getStream(device);
    smm_context_set_stream(c, s.native_handle());
    return c;
}

void check_status(smm_context *ctx, smm_status st, const char *op)
{
    TORCH_CHECK(st == SMM_OK, "scaledmm.", op, ": ", smm_strerror(st), ": ",
                smm_context_last_error(ctx));
}

c10::ScalarType dtype_of(smm_dtype d)
{
    switch (d) {
    case SMM_DTYPE_F16: return at::kHalf;
    case SMM_DTYPE_BF16: return at::kBFloat16;
    default: return at::kFloat;
    }
}

smm_dtype float_code(c10::ScalarType t, const char *op, const char *name)
{
    switch (t) {
    case at::kFloat: return SMM_DTYPE_F32;
    case at::kHalf: return SMM_DTYPE_F16;
    case at::kBFloat16: return SMM_DTYPE_BF16;
    default:
        TORCH_CHECK_TYPE(false, "scaledmm.", op, ": ", name, " has dtype ", t,
                         "; expected float32, float16 or bfloat16");
    }
    return SMM_DTYPE_F32;
}

// A 2-D tensor of `dtype` passed through its leading dimension (elements).
int64_t leading_dim(const at::Tensor &t, c10::ScalarType dtype, const char *op, const char *name)
{
    TORCH_CHECK_TYPE(t.scalar_type() == dtype, "scaledmm.", op, ": ", name, " has dtype ",
                     t.scalar_type(), "; expected ", dtype);
    TORCH_CHECK_VALUE(t.dim() == 2, "scaledmm.", op, ": ", name, " has ", t.dim(),
                      " dimensions; expected 2");
    const int64_t rows = t.size(0), cols = t.size(1);
    if (rows == 0 || cols == 0)
        return std::max<int64_t>(cols, 1);
    TORCH_CHECK_VALUE(cols == 1 || t.stride(1) == 1, "scaledmm.", op, ": ", name,
                      " is not contiguous along its last dimension (strides ", t.strides(),
                      "); a transposed or strided view cannot be given as a leading "
                      "dimension: pass ", name, ".contiguous()");
    if (rows == 1)
        return cols;
    TORCH_CHECK_VALUE(t.stride(0) >= cols, "scaledmm.", op, ": ", name,
                      " has overlapping or reversed rows (row stride ", t.stride(0), " < ", cols,
                      " columns)");
    return t.stride(0);
}

// A contiguous vector of `dtype` with `len_a` or `len_b` elements (any shape).
int64_t vector_len(const at::Tensor &t, c10::ScalarType dtype, int64_t len_a, int64_t len_b,
                   const char *op, const char *name)
{
    TORCH_CHECK_TYPE(t.scalar_type() == dtype, "scaledmm.", op, ": ", name, " has dtype ",
                     t.scalar_type(), "; expected ", dtype);
    TORCH_CHECK_VALUE(t.is_contiguous(), "scaledmm.", op, ": ", name, " is not contiguous");
    TORCH_CHECK_VALUE(t.numel() == len_a || t.numel() == len_b, "scaledmm.", op, ": ", name,
                      " has ", t.numel(), " elements; expected ", len_a,
                      len_a != len_b ? " or " : "", len_a != len_b ? std::to_string(len_b) : "");
    return t.numel();
}

void same_device(const at::Tensor &ref, const at::Tensor &t, const char *op, const char *name,
                 const char *ref_name = "a")
{
    TORCH_CHECK_VALUE(t.device() == ref.device(), "scaledmm.", op, ": ", name, " is on ",
                      t.device(), " but ", ref_name, " is on ", ref.device(),
                      "; every tensor of a call must be on one device");
}

// The operands A (int8 [M, K]) and B (int8 [N, K]) of a matrix
// multiplication, checked, with their sizes and leading dimensions.
struct Operands {
    int64_t m, n, k, lda, ldb;
};

Operands operands(const at::Tensor &a, const at::Tensor &b, const char *op)
{
    Operands o;
    o.lda = leading_dim(a, at::kChar, op, "a");
    o.ldb = leading_dim(b, at::kChar, op, "b");
    o.m = a.size(0);
    o.k = a.size(1);
    o.n = b.size(0);
    TORCH_CHECK_VALUE(b.size(1) == o.k, "scaledmm.", op, ": b has shape ", b.sizes(),
                      "; expected [N, ", o.k, "] (K of a)");
    same_device(a, b, op, "b");
    return o;
}

// The epilogue operands (scales, bias, zero points) and the output of an
// [M, N] problem on a's device, checked, into args; then the call.
void run_scaled_mm(const at::Tensor &a, const at::Tensor &scale_a, const at::Tensor &scale_b,
                   const c10::optional<at::Tensor> &bias, const c10::optional<at::Tensor> &azp,
                   at::Tensor &out, smm_scaled_mm_args &args, const char *op)
{
    const int64_t m = args.m, n = args.n;
    same_device(a, scale_a, op, "scale_a");
    same_device(a, scale_b, op, "scale_b");
    same_device(a, out, op, "out");
    args.scale_a_len = vector_len(scale_a, at::kFloat, 1, m, op, "scale_a");
    args.scale_b_len = vector_len(scale_b, at::kFloat, 1, n, op, "scale_b");
    if (bias) {
        same_device(a, *bias, op, "bias");
        vector_len(*bias, at::kFloat, n, n, op, "bias");
        args.bias = bias->data_ptr<float>();
    }
    if (azp) {
        same_device(a, *azp, op, "azp");
        args.azp_len = vector_len(*azp, at::kInt, 1, m, op, "azp");
        args.azp = azp->data_ptr<int32_t>();
    }
    args.c_dtype = float_code(out.scalar_type(), op, "out");
    TORCH_CHECK_VALUE(out.dim() == 2 && out.size(0) == m && out.size(1) == n, "scaledmm.", op,
                      ": out has shape ", out.sizes(), "; expected [", m, ", ", n, "]");
    args.ldc = leading_dim(out, out.scalar_type(), op, "out");
    args.a = static_cast<const int8_t *>(a.data_ptr());
    args.scale_a = scale_a.data_ptr<float>();
    args.scale_b = scale_b.data_ptr<float>();
    args.c = out.data_ptr();
    c10::DeviceGuard guard(a.device());
    smm_context *ctx = context_on(a.device());
    check_status(ctx, smm_scaled_mm(ctx, &args), op);
}

void scaled_mm_into(const at::Tensor &a, const at::Tensor &b, const at::Tensor &scale_a,
                    const at::Tensor &scale_b, const c10::optional<at::Tensor> &bias,
                    const c10::optional<at::Tensor> &azp, at::Tensor &out, const char *op)
{
    const Operands o = operands(a, b, op);
    smm_scaled_mm_args args{};
    args.m = o.m;
    args.n = o.n;
    args.k = o.k;
    args.lda = o.lda;
    args.ldb = o.ldb;
    args.b = static_cast<const int8_t *>(b.data_ptr());
    run_scaled_mm(a, scale_a, scale_b, bias, azp, out, args, op);
}

at::Tensor scaled_mm(const at::Tensor &a, const at::Tensor &b, const at::Tensor &scale_a,
                     const at::Tensor &scale_b, c10::ScalarType out_dtype,
                     const c10::optional<at::Tensor> &bias, const c10::optional<at::Tensor> &azp)
{
    float_code(out_dtype, "scaled_mm", "out_dtype");
    TORCH_CHECK_VALUE(a.dim() == 2 && b.dim() == 2, "scaledmm.scaled_mm: a and b must be 2-D "
                      "(got ", a.dim(), " and ", b.dim(), " dimensions)");
    at::Tensor out = at::empty({a.size(0), b.size(0)}, a.options().dtype(out_dtype));
    scaled_mm_into(a, b, scale_a, scale_b, bias, azp, out, "scaled_mm");
    return out;
}

void scaled_mm_out(const at::Tensor &a, const at::Tensor &b, const at::Tensor &scale_a,
                   const at::Tensor &scale_b, const c10::optional<at::Tensor> &bias,
                   const c10::optional<at::Tensor> &azp, at::Tensor out)
{
    scaled_mm_into(a, b, scale_a, scale_b, bias, azp, out, "scaled_mm_out");
}

// ---------------------------------------------------------------------- //
// Prepacked weights                                                        //
// ---------------------------------------------------------------------- //

// The backend the ops use for tensors on `device` now.
int backend_for(const c10::Device &device)
{
    return device.is_cpu() ? cpu_backend.load(std::memory_order_relaxed)
                           : gpu_backend.load(std::memory_order_relaxed);
}

// scaledmm::PackedB: a weight B (int8 [N, K]) packed once by smm_pack_b for
// one device, on the backend the ops used for that device when it was
// packed. Immutable; owns the packed copy (freed with the object).
struct PackedB : torch::CustomClassHolder {
    smm_packed_b *pb = nullptr;
    int64_t n = 0, k = 0;
    std::string format;
    c10::Device device{c10::kCPU};
    int backend = SMM_BACKEND_CPU;

    PackedB(smm_packed_b *pb_, const c10::Device &device_, int backend_)
        : pb(pb_), n(smm_packed_b_n(pb_)), k(smm_packed_b_k(pb_)),
          format(smm_packed_b_format(pb_)), device(device_), backend(backend_)
    {
    }
    PackedB(const PackedB &) = delete;
    PackedB &operator=(const PackedB &) = delete;
    ~PackedB() override
    {
        if (device.is_cuda()) {
            try {   // free device memory with its device current
                c10::DeviceGuard guard(device);
                smm_packed_b_destroy(pb);
                return;
            } catch (...) {
            }
        }
        smm_packed_b_destroy(pb);
    }
};

using PackedBPtr = c10::intrusive_ptr<PackedB>;

// pack_b(weight) -> PackedB: weight int8 [N, K] (rows may be strided, the
// last dimension contiguous), packed on its device's backend.
PackedBPtr pack_b(const at::Tensor &weight)
{
    const char *op = "pack_b";
    const int64_t ldb = leading_dim(weight, at::kChar, op, "weight");
    const c10::Device device = weight.device();
    c10::DeviceGuard guard(device);
    smm_context *ctx = context_on(device);
    smm_packed_b *pb = nullptr;
    check_status(ctx,
                 smm_pack_b(ctx, weight.size(0), weight.size(1),
                            static_cast<const int8_t *>(weight.data_ptr()), ldb, &pb),
                 op);
    try {
        return c10::make_intrusive<PackedB>(pb, device, backend_for(device));
    } catch (...) {
        smm_packed_b_destroy(pb);
        throw;
    }
}

// A PackedB usable with the operand `a` (named `a_name`) of K columns: K,
// the device and the backend it was packed for.
void check_packed(const PackedBPtr &b, const at::Tensor &a, int64_t k, const char *op,
                  const char *a_name)
{
    TORCH_CHECK_VALUE(b, "scaledmm.", op, ": b is None; expected a PackedB from pack_b");
    TORCH_CHECK_VALUE(b->k == k, "scaledmm.", op, ": b was packed from a weight of shape [",
                      b->n, ", ", b->k, "]; expected [N, ", k, "] (K of ", a_name, ")");
    TORCH_CHECK_VALUE(b->device == a.device(), "scaledmm.", op, ": b was packed for ", b->device,
                      " but ", a_name, " is on ", a.device(), "; pack the weight on ", a_name,
                      "'s device (pack_b(weight.to(", a_name, ".device)))");
    const int backend = backend_for(a.device());
    TORCH_CHECK_VALUE(b->backend == backend, "scaledmm.", op, ": b was packed on backend '",
                      smm_backend_name(static_cast<smm_backend>(b->backend)), "' but ",
                      a.device(), " tensors now run on backend '",
                      smm_backend_name(static_cast<smm_backend>(backend)),
                      "'; pack the weight again");
}

void scaled_mm_packed_into(const at::Tensor &a, const PackedBPtr &b, const at::Tensor &scale_a,
                           const at::Tensor &scale_b, const c10::optional<at::Tensor> &bias,
                           const c10::optional<at::Tensor> &azp, at::Tensor &out, const char *op)
{
    smm_scaled_mm_args args{};
    args.lda = leading_dim(a, at::kChar, op, "a");
    args.m = a.size(0);
    args.k = a.size(1);
    check_packed(b, a, args.k, op, "a");
    args.n = b->n;
    args.b_packed = b->pb;
    run_scaled_mm(a, scale_a, scale_b, bias, azp, out, args, op);
}

at::Tensor scaled_mm_packed(const at::Tensor &a, const PackedBPtr &b, const at::Tensor &scale_a,
                            const at::Tensor &scale_b, c10::ScalarType out_dtype,
                            const c10::optional<at::Tensor> &bias,
                            const c10::optional<at::Tensor> &azp)
{
    const char *op = "scaled_mm_packed";
    float_code(out_dtype, op, "out_dtype");
    TORCH_CHECK_VALUE(a.dim() == 2, "scaledmm.", op, ": a has ", a.dim(),
                      " dimensions; expected 2");
    TORCH_CHECK_VALUE(b, "scaledmm.", op, ": b is None; expected a PackedB from pack_b");
    at::Tensor out = at::empty({a.size(0), b->n}, a.options().dtype(out_dtype));
    scaled_mm_packed_into(a, b, scale_a, scale_b, bias, azp, out, op);
    return out;
}

void scaled_mm_packed_out(const at::Tensor &a, const PackedBPtr &b, const at::Tensor &scale_a,
                          const at::Tensor &scale_b, const c10::optional<at::Tensor> &bias,
                          const c10::optional<at::Tensor> &azp, at::Tensor out)
{
    scaled_mm_packed_into(a, b, scale_a, scale_b, bias, azp, out, "scaled_mm_packed_out");
}

// linear_packed(x, b, scale_b, out_dtype, bias=None, x_scale=None,
// x_azp=None, symmetric=True) -> (out, q, scale, azp): smm_linear, the
// bits of quantize_i8(x, x_scale, x_azp, symmetric) followed by
// scaled_mm_packed(q, b, scale, scale_b, out_dtype, bias, azp or None).
// q, scale and azp are allocated here (on a GPU the library needs them
// from the caller); azp is empty when the quantization is symmetric.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>
linear_packed(const at::Tensor &x, const PackedBPtr &b, const at::Tensor &scale_b,
              c10::ScalarType out_dtype, const c10::optional<at::Tensor> &bias,
              const c10::optional<at::Tensor> &x_scale, const c10::optional<at::Tensor> &x_azp,
              bool symmetric)
{
    const char *op = "linear_packed";
    smm_linear_args l{};
    TORCH_CHECK_VALUE(x.dim() == 2, "scaledmm.", op, ": x has ", x.dim(),
                      " dimensions; expected 2");
    // x before out_dtype: out_dtype defaults to x's dtype in the Python API
    l.x_dtype = float_code(x.scalar_type(), op, "x");
    l.c_dtype = float_code(out_dtype, op, "out_dtype");
    l.ldx = leading_dim(x, x.scalar_type(), op, "x");
    l.m = x.size(0);
    l.k = x.size(1);
    check_packed(b, x, l.k, op, "x");
    l.n = b->n;
    same_device(x, scale_b, op, "scale_b", "x");
    l.scale_b_len = vector_len(scale_b, at::kFloat, 1, l.n, op, "scale_b");
    if (bias) {
        same_device(x, *bias, op, "bias", "x");
        vector_len(*bias, at::kFloat, l.n, l.n, op, "bias");
    }
    if (x_scale) {
        same_device(x, *x_scale, op, "x_scale", "x");
        vector_len(*x_scale, at::kFloat, 1, 1, op, "x_scale");
        TORCH_CHECK_VALUE(x_azp || symmetric, "scaledmm.", op,
                          ": static asymmetric quantization needs x_azp");
        if (x_azp) {
            same_device(x, *x_azp, op, "x_azp", "x");
            vector_len(*x_azp, at::kInt, 1, 1, op, "x_azp");
        }
        l.mode = SMM_QUANT_STATIC_PER_TENSOR;
        l.asymmetric = x_azp ? 1 : 0;
    } else {
        TORCH_CHECK_VALUE(!x_azp, "scaledmm.", op, ": dynamic quantization produces the zero "
                          "points; pass symmetric=False instead of x_azp");
        l.mode = SMM_QUANT_DYNAMIC_PER_TOKEN;
        l.asymmetric = symmetric ? 0 : 1;
    }
    // Every argument is checked: the outputs (never aliasing an input).
    at::Tensor out = at::empty({l.m, l.n}, x.options().dtype(out_dtype));
    at::Tensor q = at::empty({l.m, l.k}, x.options().dtype(at::kChar));
    at::Tensor s, z;
    if (x_scale) {
        s = x_scale->clone();
        z = x_azp ? x_azp->clone() : at::empty({0}, x.options().dtype(at::kInt));
    } else {
        s = at::empty({l.m}, x.options().dtype(at::kFloat));
        z = at::empty({symmetric ? 0 : l.m}, x.options().dtype(at::kInt));
    }
    l.x = x.data_ptr();
    l.q = static_cast<int8_t *>(q.data_ptr());
    l.ldq = std::max<int64_t>(l.k, 1);
    l.x_scale = s.data_ptr<float>();
    l.x_azp = z.numel() ? z.data_ptr<int32_t>() : nullptr;
    l.scale_b = scale_b.data_ptr<float>();
    l.bias = bias ? bias->data_ptr<float>() : nullptr;
    l.b_packed = b->pb;
    l.c = out.data_ptr();
    l.ldc = std::max<int64_t>(l.n, 1);
    c10::DeviceGuard guard(x.device());
    smm_context *ctx = context_on(x.device());
    check_status(ctx, smm_linear(ctx, &l), op);
    return {out, q, s, z};
}

at::Tensor gemm_s8s8s32(const at::Tensor &a, const at::Tensor &b)
{
    const char *op = "gemm_s8s8s32";
    const Operands o = operands(a, b, op);
    const int64_t m = o.m, n = o.n, k = o.k;
    at::Tensor out = at::empty({m, n}, a.options().dtype(at::kInt));
    c10::DeviceGuard guard(a.device());
    smm_context *ctx = context_on(a.device());
    check_status(ctx,
                 smm_gemm_s8s8s32(ctx, m, n, k, static_cast<const int8_t *>(a.data_ptr()), o.lda,
                                  static_cast<const int8_t *>(b.data_ptr()), o.ldb,
                                  out.data_ptr<int32_t>(), std::max<int64_t>(n, 1)),
                 op);
    return out;
}

// scaled_epilogue(acc, scale_a, scale_b, out_dtype, bias=None, azp=None,
// colsum_b=None) -> out: smm_scaled_epilogue on int32 accumulators [M, N],
// e.g. summed across tensor-parallel ranks.
at::Tensor scaled_epilogue(const at::Tensor &acc, const at::Tensor &scale_a,
                           const at::Tensor &scale_b, c10::ScalarType out_dtype,
                           const c10::optional<at::Tensor> &bias,
                           const c10::optional<at::Tensor> &azp,
                           const c10::optional<at::Tensor> &colsum_b)
{
    const char *op = "scaled_epilogue";
    smm_epilogue_args args{};
    args.c_dtype = float_code(out_dtype, op, "out_dtype");
    args.ldacc = leading_dim(acc, at::kInt, op, "acc");
    const int64_t m = acc.size(0), n = acc.size(1);
    args.m = m;
    args.n = n;
    same_device(acc, scale_a, op, "scale_a", "acc");
    same_device(acc, scale_b, op, "scale_b", "acc");
    args.scale_a_len = vector_len(scale_a, at::kFloat, 1, m, op, "scale_a");
    args.scale_b_len = vector_len(scale_b, at::kFloat, 1, n, op, "scale_b");
    if (bias) {
        same_device(acc, *bias, op, "bias", "acc");
        vector_len(*bias, at::kFloat, n, n, op, "bias");
        args.bias = bias->data_ptr<float>();
    }
    if (azp) {
        same_device(acc, *azp, op, "azp", "acc");
        args.azp_len = vector_len(*azp, at::kInt, 1, m, op, "azp");
        args.azp = azp->data_ptr<int32_t>();
        TORCH_CHECK_VALUE(colsum_b.has_value(), "scaledmm.", op,
                          ": azp needs colsum_b (the int32 column sums of the weight over all "
                          "of K)");
        same_device(acc, *colsum_b, op, "colsum_b", "acc");
        vector_len(*colsum_b, at::kInt, n, n, op, "colsum_b");
        args.colsum_b = colsum_b->data_ptr<int32_t>();
    }
    at::Tensor out = at::empty({m, n}, acc.options().dtype(out_dtype));
    if (m == 0 || n == 0)
        return out;
    args.acc = acc.data_ptr<int32_t>();
    args.scale_a = scale_a.data_ptr<float>();
    args.scale_b = scale_b.data_ptr<float>();
    args.c = out.data_ptr();
    args.ldc = n;
    c10::DeviceGuard guard(acc.device());
    smm_context *ctx = context_on(acc.device());
    check_status(ctx, smm_scaled_epilogue(ctx, &args), op);
    return out;
}

// quantize_i8(x, scale=None, azp=None, symmetric=True) -> (q, scale, azp)
// scale given: static per-tensor (azp: optional zero point); else dynamic
// per-token, producing scale [M] and, unless symmetric, azp [M]. A
// symmetric call returns an empty int32 azp.
std::tuple<at::Tensor, at::Tensor, at::Tensor>
quantize_i8(const at::Tensor &x, const c10::optional<at::Tensor> &scale,
            const c10::optional<at::Tensor> &azp, bool symmetric)
{
    const char *op = "quantize_i8";
    TORCH_CHECK_VALUE(x.dim() == 2, "scaledmm.", op, ": x has ", x.dim(),
                      " dimensions; expected 2");
    smm_quantize_args q{};
    q.x_dtype = float_code(x.scalar_type(), op, "x");
    q.ldx = leading_dim(x, x.scalar_type(), op, "x");
    q.m = x.size(0);
    q.k = x.size(1);
    at::Tensor out = at::empty({q.m, q.k}, x.options().dtype(at::kChar));
    q.ldq = std::max<int64_t>(q.k, 1);
    at::Tensor s, z;
    if (scale) {
        same_device(x, *scale, op, "scale", "x");
        vector_len(*scale, at::kFloat, 1, 1, op, "scale");
        TORCH_CHECK_VALUE(azp || symmetric, "scaledmm.", op,
                          ": static asymmetric quantization needs azp");
        s = scale->clone();   // outputs never alias inputs (the op's schema)
        if (azp) {
            same_device(x, *azp, op, "azp", "x");
            vector_len(*azp, at::kInt, 1, 1, op, "azp");
            z = azp->clone();
        } else {
            z = at::empty({0}, x.options().dtype(at::kInt));
        }
        q.mode = SMM_QUANT_STATIC_PER_TENSOR;
    } else {
        TORCH_CHECK_VALUE(!azp, "scaledmm.", op, ": dynamic quantization produces the zero "
                          "points; pass symmetric=False instead of azp");
        s = at::empty({q.m}, x.options().dtype(at::kFloat));
        z = at::empty({symmetric ? 0 : q.m}, x.options().dtype(at::kInt));
        q.mode = SMM_QUANT_DYNAMIC_PER_TOKEN;
    }
    q.x = x.data_ptr();
    q.q = static_cast<int8_t *>(out.data_ptr());
    q.scale = s.data_ptr<float>();
    q.azp = z.numel() ? z.data_ptr<int32_t>() : nullptr;
    c10::DeviceGuard guard(x.device());
    smm_context *ctx = context_on(x.device());
    check_status(ctx, smm_quantize_i8(ctx, &q), op);
    return {out, s, z};
}

// Which backends the ops use: cpu for CPU tensors (cpu or reference),
// gpu for CUDA tensors (cuda, or rocm under a ROCm build of torch).
void set_backends(int64_t cpu, int64_t gpu)
{
    TORCH_CHECK_VALUE(cpu == SMM_BACKEND_CPU || cpu == SMM_BACKEND_REFERENCE,
                      "scaledmm: the CPU tensors' backend must be cpu or reference");
    TORCH_CHECK_VALUE(gpu == SMM_BACKEND_CUDA || gpu == SMM_BACKEND_ROCM,
                      "scaledmm: the GPU tensors' backend must be cuda or rocm");
    cpu_backend.store(static_cast<int>(cpu));
    gpu_backend.store(static_cast<int>(gpu));
}

void set_num_threads(int64_t n)
{
    TORCH_CHECK_VALUE(n >= 0 && n <= 1 << 20, "scaledmm.set_num_threads: ", n,
                      " is not a thread count (0: the library's default)");
    cpu_threads.store(static_cast<int>(n));
}

// The stream handle the ops use on `device` (tests compare it with torch's).
int64_t current_stream_handle(c10::Device device)
{
    c10::Stream s = c10::impl::getDeviceGuardImpl(device.type())->getStream(device);
    return static_cast<int64_t>(reinterpret_cast<intptr_t>(s.native_handle()));
}

} // namespace

TORCH_LIBRARY(scaledmm, m)
{
    m.class_<PackedB>("PackedB")
        .def("n", [](const PackedBPtr &self) -> int64_t { return self->n; })
        .def("k", [](const PackedBPtr &self) -> int64_t { return self->k; })
        .def("format", [](const PackedBPtr &self) -> std::string { return self->format; })
        .def("device", [](const PackedBPtr &self) -> std::string { return self->device.str(); })
        .def("backend", [](const PackedBPtr &self) -> std::string {
            return smm_backend_name(static_cast<smm_backend>(self->backend));
        })
        // Not picklable (the packed data lives in library memory, on a
        // device): pickle and copy.deepcopy raise TypeError, the error
        // pickling code expects of an object it cannot serialize (e.g.
        // inductor's benchmark harness, which then skips the object).
        .def_pickle(
            [](const PackedBPtr &self) -> std::string {
                TORCH_CHECK_TYPE(false, "a scaledmm PackedB (", self->n, " x ", self->k,
                                 ") cannot be pickled or copied: keep the int8 weight and "
                                 "pack it again");
                return std::string();
            },
            [](std::string) -> PackedBPtr {
                TORCH_CHECK_TYPE(false, "a scaledmm PackedB cannot be unpickled");
                return PackedBPtr();
            })
        // The state torch.compile guards on and rebuilds its fake object from
        // (scaledmm/torch.py registers the fake class).
        .def("__obj_flatten__", [](const PackedBPtr &self) {
            return std::make_tuple(
                std::make_tuple(std::string("n"), self->n),
                std::make_tuple(std::string("k"), self->k),
                std::make_tuple(std::string("format"), self->format),
                std::make_tuple(std::string("device"), self->device.str()),
                std::make_tuple(std::string("backend"),
                                std::string(smm_backend_name(
                                    static_cast<smm_backend>(self->backend)))));
        });
    m.def("scaled_mm(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, ScalarType out_dtype, "
          "Tensor? bias=None, Tensor? azp=None) -> Tensor");
    m.def("scaled_mm_out(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias, "
          "Tensor? azp, Tensor(a!) out) -> ()");
    m.def("gemm_s8s8s32(Tensor a, Tensor b) -> Tensor");
    m.def("scaled_epilogue(Tensor acc, Tensor scale_a, Tensor scale_b, ScalarType out_dtype, "
          "Tensor? bias=None, Tensor? azp=None, Tensor? colsum_b=None) -> Tensor");
    m.def("pack_b(Tensor weight) -> __torch__.torch.classes.scaledmm.PackedB");
    m.def("scaled_mm_packed(Tensor a, __torch__.torch.classes.scaledmm.PackedB b, "
          "Tensor scale_a, Tensor scale_b, ScalarType out_dtype, Tensor? bias=None, "
          "Tensor? azp=None) -> Tensor");
    m.def("scaled_mm_packed_out(Tensor a, __torch__.torch.classes.scaledmm.PackedB b, "
          "Tensor scale_a, Tensor scale_b, Tensor? bias, Tensor? azp, Tensor(a!) out) -> ()");
    m.def("quantize_i8(Tensor x, Tensor? scale=None, Tensor? azp=None, bool symmetric=True) "
          "-> (Tensor, Tensor, Tensor)");
    m.def("linear_packed(Tensor x, __torch__.torch.classes.scaledmm.PackedB b, Tensor scale_b, "
          "ScalarType out_dtype, Tensor? bias=None, Tensor? x_scale=None, Tensor? x_azp=None, "
          "bool symmetric=True) -> (Tensor, Tensor, Tensor, Tensor)");
    m.def("_set_backends(int cpu, int gpu) -> ()", &set_backends);
    m.def("_set_num_threads(int n) -> ()", &set_num_threads);
    m.def("_current_stream_handle(Device device) -> int", &current_stream_handle);
}

TORCH_LIBRARY_IMPL(scaledmm, CPU, m)
{
    m.impl("pack_b", &pack_b);
    m.impl("scaled_mm_packed", &scaled_mm_packed);
    m.impl("scaled_mm_packed_out", &scaled_mm_packed_out);
    m.impl("scaled_mm", &scaled_mm);
    m.impl("scaled_mm_out", &scaled_mm_out);
    m.impl("gemm_s8s8s32", &gemm_s8s8s32);
    m.impl("scaled_epilogue", &scaled_epilogue);
    m.impl("quantize_i8", &quantize_i8);
    m.impl("linear_packed", &linear_packed);
}

// No derivatives: where an input requires grad, the outputs carry a node
// whose backward raises "derivative for scaledmm::<op> is not implemented",
// as torch's own ops without one do (without this, backward only warned and
// gave no gradients). The out= ops are left to torch's default.
TORCH_LIBRARY_IMPL(scaledmm, Autograd, m)
{
    for (const char *op : {"pack_b", "scaled_mm_packed", "scaled_mm", "gemm_s8s8s32",
                           "scaled_epilogue", "quantize_i8", "linear_packed"})
        m.impl(op, torch::autograd::autogradNotImplementedFallback());
}

TORCH_LIBRARY_IMPL(scaledmm, CUDA, m)
{
    m.impl("pack_b", &pack_b);
    m.impl("scaled_mm_packed", &scaled_mm_packed);
    m.impl("scaled_mm_packed_out", &scaled_mm_packed_out);
    m.impl("scaled_mm", &scaled_mm);
    m.impl("scaled_mm_out", &scaled_mm_out);
    m.impl("gemm_s8s8s32", &gemm_s8s8s32);
    m.impl("scaled_epilogue", &scaled_epilogue);
    m.impl("quantize_i8", &quantize_i8);
    m.impl("linear_packed", &linear_packed);
}
