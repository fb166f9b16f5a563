/*
 * _core.c - the CPython extension under the scaledmm package: a thin layer
 * over include/scaledmm.h. Every constant comes from the header at build
 * time; every call takes buffer addresses as integers (0 for NULL), which
 * the Python layer (scaledmm/_numpy.py, scaledmm/torch.py) derives from
 * arrays after checking their shapes, dtypes and strides. A failing call
 * raises scaledmm.Error carrying the library's status and message; the
 * library then wrote nothing.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <scaledmm.h>
#include <stdint.h>

static PyObject *Error;   /* scaledmm.Error, a RuntimeError */

/* Raises scaledmm.Error(message) with .status (int), .status_name and
 * .message set. Returns NULL. */
static PyObject *raise_status(smm_status st, const char *message)
{
    PyObject *text = PyUnicode_FromFormat("%s: %s", smm_strerror(st),
                                          message && *message ? message : "(no message)");
    if (!text)
        return NULL;
    PyObject *exc = PyObject_CallOneArg(Error, text);
    Py_DECREF(text);
    if (!exc)
        return NULL;
    PyObject *code = PyLong_FromLong((long)st);
    PyObject *name = PyUnicode_FromString(smm_strerror(st));
    PyObject *msg = PyUnicode_FromString(message ? message : "");
    if (code && name && msg && PyObject_SetAttrString(exc, "status", code) == 0 &&
        PyObject_SetAttrString(exc, "status_name", name) == 0 &&
        PyObject_SetAttrString(exc, "message", msg) == 0)
        PyErr_SetObject(Error, exc);
    Py_XDECREF(code);
    Py_XDECREF(name);
    Py_XDECREF(msg);
    Py_DECREF(exc);
    return NULL;
}

/* ------------------------------------------------------------------ */
/* PackedB: owns an smm_packed_b                                        */
/* ------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    smm_packed_b *pb;
} PackedB;

static void PackedB_dealloc(PackedB *self)
{
    smm_packed_b_destroy(self->pb);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *PackedB_get_n(PackedB *self, void *c)
{
    (void)c;
    return PyLong_FromLongLong(smm_packed_b_n(self->pb));
}

static PyObject *PackedB_get_k(PackedB *self, void *c)
{
    (void)c;
    return PyLong_FromLongLong(smm_packed_b_k(self->pb));
}

static PyObject *PackedB_get_format(PackedB *self, void *c)
{
    (void)c;
    return PyUnicode_FromString(smm_packed_b_format(self->pb));
}

static PyGetSetDef PackedB_getset[] = {
    {"n", (getter)PackedB_get_n, NULL, "N (rows of B, output features)", NULL},
    {"k", (getter)PackedB_get_k, NULL, "K (columns of B, input features)", NULL},
    {"format", (getter)PackedB_get_format, NULL,
     "the packed layout (smm_packed_b_format); equal strings are interchangeable", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject PackedBType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "scaledmm._core.PackedB",
    .tp_basicsize = sizeof(PackedB),
    .tp_dealloc = (destructor)PackedB_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A B (int8, N x K) packed once by Context.pack_b (smm_pack_b).",
    .tp_getset = PackedB_getset,
};

/* ------------------------------------------------------------------ */
/* Context: owns an smm_context                                         */
/* ------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    smm_context *ctx;
} Context;

static int Context_init(Context *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"backend", NULL};
    int backend = SMM_BACKEND_AUTO;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|i", names, &backend))
        return -1;
    if (self->ctx) {
        PyErr_SetString(PyExc_RuntimeError, "Context already initialised");
        return -1;
    }
    smm_status st = smm_context_create(&self->ctx, (smm_backend)backend);
    if (st != SMM_OK) {
        const char *why = "";
        if (st == SMM_ERR_NOT_AVAILABLE)
            smm_backend_available((smm_backend)backend, &why);
        char buf[600];
        snprintf(buf, sizeof buf, "cannot create a context on backend '%s'%s%s",
                 smm_backend_name((smm_backend)backend), *why ? ": " : "", why);
        raise_status(st, buf);
        return -1;
    }
    return 0;
}

static void Context_dealloc(Context *self)
{
    smm_context_destroy(self->ctx);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static smm_context *ctx_of(Context *self)
{
    if (!self->ctx)
        PyErr_SetString(PyExc_RuntimeError, "scaledmm Context is not initialised");
    return self->ctx;
}

#define CTX_OR_NULL(self, c) smm_context *c = ctx_of(self); if (!c) return NULL

static PyObject *check(smm_context *ctx, smm_status st)
{
    if (st != SMM_OK)
        return raise_status(st, smm_context_last_error(ctx));
    Py_RETURN_NONE;
}

static PyObject *Context_backend(Context *self, PyObject *unused)
{
    (void)unused;
    CTX_OR_NULL(self, ctx);
    return PyLong_FromLong((long)smm_context_backend(ctx));
}

static PyObject *Context_set_num_threads(Context *self, PyObject *arg)
{
    CTX_OR_NULL(self, ctx);
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < INT_MIN || n > INT_MAX) {   /* not cut to an int behind the caller's back */
        PyErr_Format(PyExc_OverflowError, "num_threads (%ld) is out of range", n);
        return NULL;
    }
    return check(ctx, smm_context_set_num_threads(ctx, (int)n));
}

static PyObject *Context_num_threads(Context *self, PyObject *unused)
{
    (void)unused;
    CTX_OR_NULL(self, ctx);
    return PyLong_FromLong(smm_context_get_num_threads(ctx));
}

static PyObject *Context_last_error(Context *self, PyObject *unused)
{
    (void)unused;
    CTX_OR_NULL(self, ctx);
    return PyUnicode_FromString(smm_context_last_error(ctx));
}

/* scaled_mm(m, n, k, a, lda, b, ldb, scale_a, scale_a_len, scale_b,
 *           scale_b_len, bias, azp, azp_len, c, ldc, c_dtype, packed_b) */
static PyObject *Context_scaled_mm(Context *self, PyObject *args)
{
    CTX_OR_NULL(self, ctx);
    smm_scaled_mm_args a = {0};
    unsigned long long pa, pb, psa, psb, pbias, pazp, pc;
    int c_dtype;
    PyObject *packed;
    if (!PyArg_ParseTuple(args, "LLLKLKLKLKLKKLKLiO", &a.m, &a.n, &a.k, &pa, &a.lda, &pb,
                          &a.ldb, &psa, &a.scale_a_len, &psb, &a.scale_b_len, &pbias, &pazp,
                          &a.azp_len, &pc, &a.ldc, &c_dtype, &packed))
        return NULL;
    if (packed != Py_None) {
        if (!PyObject_TypeCheck(packed, &PackedBType))
            return PyErr_Format(PyExc_TypeError, "packed_b must be a PackedB or None");
        a.b_packed = ((PackedB *)packed)->pb;
    }
    a.a = (const int8_t *)(uintptr_t)pa;
    a.b = (const int8_t *)(uintptr_t)pb;
    a.scale_a = (const float *)(uintptr_t)psa;
    a.scale_b = (const float *)(uintptr_t)psb;
    a.bias = (const float *)(uintptr_t)pbias;
    a.azp = (const int32_t *)(uintptr_t)pazp;
    a.c = (void *)(uintptr_t)pc;
    a.c_dtype = (smm_dtype)c_dtype;
    smm_status st;
    Py_BEGIN_ALLOW_THREADS
    st = smm_scaled_mm(ctx, &a);
    Py_END_ALLOW_THREADS
    return check(ctx, st);
}

/* gemm_s8s8s32(m, n, k, a, lda, b, ldb, c, ldc) */
static PyObject *Context_gemm_s8s8s32(Context *self, PyObject *args)
{
    CTX_OR_NULL(self, ctx);
    long long m, n, k, lda, ldb, ldc;
    unsigned long long pa, pb, pc;
    if (!PyArg_ParseTuple(args, "LLLKLKLKL", &m, &n, &k, &pa, &lda, &pb, &ldb, &pc, &ldc))
        return NULL;
    smm_status st;
    Py_BEGIN_ALLOW_THREADS
    st = smm_gemm_s8s8s32(ctx, m, n, k, (const int8_t *)(uintptr_t)pa, lda,
                          (const int8_t *)(uintptr_t)pb, ldb, (int32_t *)(uintptr_t)pc, ldc);
    Py_END_ALLOW_THREADS
    return check(ctx, st);
}

/* gemm_s8s8s32_packed(m, n, k, a, lda, packed_b, c, ldc) */
static PyObject *Context_gemm_s8s8s32_packed(Context *self, PyObject *args)
{
    CTX_OR_NULL(self, ctx);
    long long m, n, k, lda, ldc;
    unsigned long long pa, pc;
    PyObject *packed;
    if (!PyArg_ParseTuple(args, "LLLKLO!KL", &m, &n, &k, &pa, &lda, &PackedBType, &packed, &pc,
                          &ldc))
        return NULL;
    smm_status st;
    Py_BEGIN_ALLOW_THREADS
    st = smm_gemm_s8s8s32_packed(ctx, m, n, k, (const int8_t *)(uintptr_t)pa, lda,
                                 ((PackedB *)packed)->pb, (int32_t *)(uintptr_t)pc, ldc);
    Py_END_ALLOW_THREADS
    return check(ctx, st);
}

/* pack_b(n, k, b, ldb) -> PackedB */
static PyObject *Context_pack_b(Context *self, PyObject *args)
{
    CTX_OR_NULL(self, ctx);
    long long n, k, ldb;
    unsigned long long pb;
    if (!PyArg_ParseTuple(args, "LLKL", &n, &k, &pb, &ldb))
        return NULL;
    smm_packed_b *out = NULL;
    smm_status st;
    Py_BEGIN_ALLOW_THREADS
    st = smm_pack_b(ctx, n, k, (const int8_t *)(uintptr_t)pb, ldb, &out);
    Py_END_ALLOW_THREADS
    if (st != SMM_OK)
        return raise_status(st, smm_context_last_error(ctx));
    PackedB *obj = PyObject_New(PackedB, &PackedBType);
    if (!obj) {
        smm_packed_b_destroy(out);
        return NULL;
    }
    obj->pb = out;
    return (PyObject *)obj;
}

/* quantize_i8(m, k, x, x_dtype, ldx, q, ldq, scale, azp, mode) */
static PyObject *Context_quantize_i8(Context *self, PyObject *args)
{
    CTX_OR_NULL(self, ctx);
    smm_quantize_args q = {0};
    unsigned long long px, pq, ps, pz;
    int x_dtype, mode;
    if (!PyArg_ParseTuple(args, "LLKiLKLKKi", &q.m, &q.k, &px, &x_dtype, &q.ldx, &pq, &q.ldq,
                          &ps, &pz, &mode))
        return NULL;
    q.x = (const void *)(uintptr_t)px;
    q.x_dtype = (smm_dtype)x_dtype;
    q.q = (int8_t *)(uintptr_t)pq;
    q.scale = (float *)(uintptr_t)ps;
    q.azp = (int32_t *)(uintptr_t)pz;
    q.mode = (smm_quant_mode)mode;
    smm_status st;
    Py_BEGIN_ALLOW_THREADS
    st = smm_quantize_i8(ctx, &q);
    Py_END_ALLOW_THREADS
    return check(ctx, st);
}

static PyMethodDef Context_methods[] = {
    {"backend", (PyCFunction)Context_backend, METH_NOARGS,
     "backend() -> int: the context's concrete backend (smm_context_backend)"},
    {"set_num_threads", (PyCFunction)Context_set_num_threads, METH_O,
     "set_num_threads(n): threads for CPU work, 0 = OpenMP's default"},
    {"num_threads", (PyCFunction)Context_num_threads, METH_NOARGS,
     "num_threads() -> int: the value set (0 = default)"},
    {"last_error", (PyCFunction)Context_last_error, METH_NOARGS,
     "last_error() -> str: the message of the last failed call"},
    {"scaled_mm", (PyCFunction)Context_scaled_mm, METH_VARARGS,
     "scaled_mm(m, n, k, a, lda, b, ldb, scale_a, scale_a_len, scale_b, scale_b_len, bias, "
     "azp, azp_len, c, ldc, c_dtype, packed_b): smm_scaled_mm on raw addresses"},
    {"gemm_s8s8s32", (PyCFunction)Context_gemm_s8s8s32, METH_VARARGS,
     "gemm_s8s8s32(m, n, k, a, lda, b, ldb, c, ldc): smm_gemm_s8s8s32 on raw addresses"},
    {"gemm_s8s8s32_packed", (PyCFunction)Context_gemm_s8s8s32_packed, METH_VARARGS,
     "gemm_s8s8s32_packed(m, n, k, a, lda, packed_b, c, ldc): smm_gemm_s8s8s32_packed"},
    {"pack_b", (PyCFunction)Context_pack_b, METH_VARARGS,
     "pack_b(n, k, b, ldb) -> PackedB: smm_pack_b on a raw address"},
    {"quantize_i8", (PyCFunction)Context_quantize_i8, METH_VARARGS,
     "quantize_i8(m, k, x, x_dtype, ldx, q, ldq, scale, azp, mode): smm_quantize_i8"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ContextType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "scaledmm._core.Context",
    .tp_basicsize = sizeof(Context),
    .tp_dealloc = (destructor)Context_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Context(backend=BACKEND_AUTO): an smm_context (smm_context_create).",
    .tp_methods = Context_methods,
    .tp_init = (initproc)Context_init,
    .tp_new = PyType_GenericNew,
};

/* ------------------------------------------------------------------ */
/* Module functions                                                     */
/* ------------------------------------------------------------------ */

static PyObject *m_version(PyObject *m, PyObject *u)
{
    (void)m;
    (void)u;
    return PyUnicode_FromString(smm_version());
}

static PyObject *m_contract_version(PyObject *m, PyObject *u)
{
    (void)m;
    (void)u;
    return PyLong_FromLong(smm_contract_version());
}

static PyObject *m_cpu_features(PyObject *m, PyObject *u)
{
    (void)m;
    (void)u;
    return PyUnicode_FromString(smm_cpu_features());
}

static PyObject *m_cpu_name(PyObject *m, PyObject *u)
{
    (void)m;
    (void)u;
    return PyUnicode_FromString(smm_cpu_name());
}

/* cpu_levels(set) -> list of str: smm_cpu_levels (0 runnable, 1 all,
 * 2 emulated). */
static PyObject *m_cpu_levels(PyObject *m, PyObject *arg)
{
    const char *names[64];
    int n = 0;
    long set = PyLong_AsLong(arg);
    (void)m;
    if (set == -1 && PyErr_Occurred())
        return NULL;
    if (set < INT_MIN || set > INT_MAX ||
        smm_cpu_levels((smm_cpu_level_set)set, names, 64, &n) != SMM_OK) {
        PyErr_SetString(PyExc_ValueError, "cpu_levels: set is 0 (runnable), 1 (all) or 2 (emulated)");
        return NULL;
    }
    PyObject *list = PyList_New(0);
    for (int i = 0; list && i < n && i < 64; i++) {
        PyObject *s = PyUnicode_FromString(names[i]);
        if (!s || PyList_Append(list, s) < 0) {
            Py_XDECREF(s);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(s);
    }
    return list;
}

static PyObject *m_cpu_level_chosen(PyObject *m, PyObject *u)
{
    (void)m;
    (void)u;
    return PyUnicode_FromString(smm_cpu_level_chosen());
}

static PyObject *m_strerror(PyObject *m, PyObject *arg)
{
    (void)m;
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(smm_strerror((smm_status)v));
}

static PyObject *m_backend_name(PyObject *m, PyObject *arg)
{
    (void)m;
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(smm_backend_name((smm_backend)v));
}

static PyObject *m_backend_from_name(PyObject *m, PyObject *arg)
{
    (void)m;
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name)
        return NULL;
    smm_backend b;
    if (smm_backend_from_name(name, &b) != SMM_OK) {
        char buf[300];
        snprintf(buf, sizeof buf, "unknown backend '%.200s' (auto, reference, cpu, rocm, cuda)",
                 name);
        return raise_status(SMM_ERR_INVALID_ARG, buf);
    }
    return PyLong_FromLong((long)b);
}

static PyObject *m_backend_available(PyObject *m, PyObject *arg)
{
    (void)m;
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    const char *why = "";
    int ok = smm_backend_available((smm_backend)v, &why);
    return Py_BuildValue("(Os)", ok ? Py_True : Py_False, why ? why : "");
}

static PyObject *m_backend_auto(PyObject *m, PyObject *u)
{
    (void)m;
    (void)u;
    return PyLong_FromLong((long)smm_backend_auto());
}

static PyMethodDef module_methods[] = {
    {"version", m_version, METH_NOARGS, "smm_version()"},
    {"contract_version", m_contract_version, METH_NOARGS, "smm_contract_version()"},
    {"cpu_features", m_cpu_features, METH_NOARGS, "smm_cpu_features()"},
    {"cpu_name", m_cpu_name, METH_NOARGS, "smm_cpu_name()"},
    {"cpu_levels", m_cpu_levels, METH_O, "smm_cpu_levels(set)"},
    {"cpu_level_chosen", m_cpu_level_chosen, METH_NOARGS, "smm_cpu_level_chosen()"},
    {"strerror", m_strerror, METH_O, "smm_strerror(status)"},
    {"backend_name", m_backend_name, METH_O, "smm_backend_name(backend)"},
    {"backend_from_name", m_backend_from_name, METH_O, "smm_backend_from_name(name)"},
    {"backend_available", m_backend_available, METH_O,
     "backend_available(backend) -> (bool, reason): smm_backend_available"},
    {"backend_auto", m_backend_auto, METH_NOARGS, "smm_backend_auto()"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "scaledmm._core",
    "Thin binding of include/scaledmm.h (see the scaledmm package for the NumPy API).", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

#define ADD_INT(mod, name) \
    do { if (PyModule_AddIntConstant(mod, #name, name) < 0) goto fail; } while (0)

PyMODINIT_FUNC PyInit__core(void)
{
    PyObject *mod = PyModule_Create(&moduledef);
    if (!mod)
        return NULL;
    if (PyType_Ready(&ContextType) < 0 || PyType_Ready(&PackedBType) < 0)
        goto fail;
    Error = PyErr_NewExceptionWithDoc(
        "scaledmm.Error",
        "A scaledmm call failed; nothing was written. Attributes: status (the smm_status "
        "value), status_name (smm_strerror's name) and message (the library's message).",
        PyExc_RuntimeError, NULL);
    if (!Error || PyModule_AddObjectRef(mod, "Error", Error) < 0)
        goto fail;
    if (PyModule_AddObjectRef(mod, "Context", (PyObject *)&ContextType) < 0 ||
        PyModule_AddObjectRef(mod, "PackedB", (PyObject *)&PackedBType) < 0)
        goto fail;
    ADD_INT(mod, SMM_OK);
    ADD_INT(mod, SMM_ERR_INVALID_ARG);
    ADD_INT(mod, SMM_ERR_UNSUPPORTED);
    ADD_INT(mod, SMM_ERR_NO_MEMORY);
    ADD_INT(mod, SMM_ERR_OVERLAP);
    ADD_INT(mod, SMM_ERR_DEVICE);
    ADD_INT(mod, SMM_ERR_NOT_AVAILABLE);
    ADD_INT(mod, SMM_DTYPE_I8);
    ADD_INT(mod, SMM_DTYPE_I32);
    ADD_INT(mod, SMM_DTYPE_F32);
    ADD_INT(mod, SMM_DTYPE_F16);
    ADD_INT(mod, SMM_DTYPE_BF16);
    ADD_INT(mod, SMM_BACKEND_AUTO);
    ADD_INT(mod, SMM_BACKEND_REFERENCE);
    ADD_INT(mod, SMM_BACKEND_CPU);
    ADD_INT(mod, SMM_BACKEND_ROCM);
    ADD_INT(mod, SMM_BACKEND_CUDA);
    ADD_INT(mod, SMM_QUANT_STATIC_PER_TENSOR);
    ADD_INT(mod, SMM_QUANT_DYNAMIC_PER_TOKEN);
    ADD_INT(mod, SMM_CONTRACT_VERSION);
    return mod;
fail:
    Py_DECREF(mod);
    return NULL;
}
