"""scaled_epilogue and scaledmm.distributed: the epilogue on int32 sums,
and a row-parallel layer over a real torch.distributed group (gloo, two
processes on the CPU) giving the bits of scaled_mm on the whole K."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
import scaledmm.torch as smt  # noqa: E402


def tbits(t):
    return t.contiguous().view(torch.uint8 if t.element_size() == 1 else
                               {2: torch.int16, 4: torch.int32}[t.element_size()])


def problem(rng, m, n, k, per_token, per_channel, with_bias, with_azp):
    g = torch.Generator().manual_seed(int(rng.integers(1 << 62)))
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=g)
    b = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=g)
    sa = torch.rand(m if per_token else 1, generator=g) * 0.02 + 1e-3
    sb = torch.rand(n if per_channel else 1, generator=g) * 0.02 + 1e-3
    bias = torch.randn(n, generator=g) if with_bias else None
    azp = torch.randint(-128, 128, (m if per_token else 1,), dtype=torch.int32,
                        generator=g) if with_azp else None
    return a, b, sa, sb, bias, azp


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("with_bias,with_azp", [(False, False), (True, False), (False, True),
                                                (True, True)])
def test_epilogue_is_scaled_mm(rng, out_dtype, with_bias, with_azp):
    """scaled_epilogue(gemm_s8s8s32(a, b), ...) == scaled_mm(a, b, ...) bit
    for bit, also on accumulators summed over slices of K."""
    for m, n, k in [(1, 7, 33), (5, 16, 64), (13, 40, 300)]:
        a, b, sa, sb, bias, azp = problem(rng, m, n, k, m > 1, True, with_bias, with_azp)
        want = smt.ops.scaled_mm(a, b, sa, sb, out_dtype, bias, azp)
        colsum = b.sum(dim=1, dtype=torch.int64).to(torch.int32)
        got = smt.scaled_epilogue(smt.ops.gemm_s8s8s32(a, b), sa, sb, out_dtype, bias, azp,
                                  colsum)
        assert torch.equal(tbits(got), tbits(want))
        cut = k // 3
        acc = (smt.ops.gemm_s8s8s32(a[:, :cut].contiguous(), b[:, :cut].contiguous()) +
               smt.ops.gemm_s8s8s32(a[:, cut:].contiguous(), b[:, cut:].contiguous()))
        got = smt.scaled_epilogue(acc, sa, sb, out_dtype, bias, azp, colsum)
        assert torch.equal(tbits(got), tbits(want))


def test_epilogue_empty():
    out = smt.scaled_epilogue(torch.empty((0, 5), dtype=torch.int32), torch.ones(1),
                              torch.ones(5), torch.bfloat16)
    assert out.shape == (0, 5) and out.dtype == torch.bfloat16


def test_epilogue_bad_arguments():
    acc = torch.zeros((3, 4), dtype=torch.int32)
    sa, sb = torch.ones(3), torch.ones(4)
    with pytest.raises(TypeError, match="acc has dtype"):
        smt.scaled_epilogue(acc.to(torch.int64), sa, sb)
    with pytest.raises(TypeError, match="out_dtype"):
        smt.scaled_epilogue(acc, sa, sb, torch.int32)
    with pytest.raises(ValueError, match="scale_a has 2 elements"):
        smt.scaled_epilogue(acc, torch.ones(2), sb)
    with pytest.raises(ValueError, match="scale_b has 3 elements"):
        smt.scaled_epilogue(acc, sa, torch.ones(3))
    with pytest.raises(ValueError, match="bias has 5 elements"):
        smt.scaled_epilogue(acc, sa, sb, bias=torch.ones(5))
    with pytest.raises(ValueError, match="azp needs colsum_b"):
        smt.scaled_epilogue(acc, sa, sb, azp=torch.zeros(1, dtype=torch.int32))
    with pytest.raises(ValueError, match="colsum_b has 3 elements"):
        smt.scaled_epilogue(acc, sa, sb, azp=torch.zeros(1, dtype=torch.int32),
                            colsum_b=torch.zeros(3, dtype=torch.int32))
    with pytest.raises(ValueError, match="dimensions"):
        smt.scaled_epilogue(acc.reshape(-1), sa, sb)
    with pytest.raises(ValueError, match="not contiguous along its last"):
        smt.scaled_epilogue(acc.t(), torch.ones(4), torch.ones(3))


def test_fake_shape():
    with torch._subclasses.fake_tensor.FakeTensorMode():
        acc = torch.empty((3, 4), dtype=torch.int32)
        out = torch.ops.scaledmm.scaled_epilogue(acc, torch.ones(3), torch.ones(4),
                                                 torch.float16)
    assert out.shape == (3, 4) and out.dtype == torch.float16


WORKER = textwrap.dedent('''
    import json, sys
    import torch
    import torch.distributed as dist
    import scaledmm.torch as smt
    import scaledmm.distributed as smd

    rank, init, seed, out_path = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    g = torch.Generator().manual_seed(seed)   # the same inputs on both ranks
    m, n, k = 6, 48, 1000
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=g)
    b = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=g)
    sa = torch.rand(m, generator=g) * 0.02 + 1e-3
    sb = torch.rand(n, generator=g) * 0.02 + 1e-3
    bias = torch.randn(n, generator=g)
    azp = torch.randint(-128, 128, (m,), dtype=torch.int32, generator=g)
    lo, hi = (0, 377) if rank == 0 else (377, k)   # an uneven split of K
    a_r, b_r = a[:, lo:hi].contiguous(), b[:, lo:hi].contiguous()
    colsum = smd.weight_colsum(b_r)
    res = {"colsum": bool(torch.equal(colsum, b.sum(dim=1, dtype=torch.int64).to(torch.int32)))}
    for name, z in (("symmetric", None), ("azp", azp)):
        want = smt.ops.scaled_mm(a, b, sa, sb, torch.bfloat16, bias, z)
        got = smd.row_parallel_scaled_mm(a_r, b_r, sa, sb, torch.bfloat16, bias, z, colsum)
        res[name] = bool(torch.equal(got.view(torch.int16), want.view(torch.int16)))
        if z is None:   # the usual way: each rank's float32 epilogue (bias once), summed
            part = smt.ops.scaled_mm(a_r, b_r, sa, sb, torch.float32,
                                     bias if rank == 0 else None, None)
            dist.all_reduce(part)
            want32 = smt.ops.scaled_mm(a, b, sa, sb, torch.float32, bias, None)
            res["naive_differs"] = int((part.view(torch.int32) !=
                                        want32.view(torch.int32)).sum())
    dist.destroy_process_group()
    json.dump(res, open(out_path + str(rank), "w"))
''')


def test_row_parallel_gloo(rng, tmp_path):
    """Two processes in a gloo group, K split unevenly: the row-parallel
    layer (int32 all-reduce, one epilogue) equals scaled_mm on the whole K
    bit for bit on every rank; the float sum of per-rank epilogues is shown
    to differ."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    init = "file://" + str(tmp_path / "rendezvous")
    out = tmp_path / "result.json"
    seed = int(rng.integers(1 << 62))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, str(script), str(r), init, str(seed), str(out)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for r in range(2)]
    logs = [p.communicate(timeout=300)[0] for p in procs]
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log
    for r in range(2):
        res = json.loads((tmp_path / ("result.json" + str(r))).read_text())
        print("row parallel, 2 gloo ranks, rank", r, res)
        assert res["colsum"] and res["symmetric"] and res["azp"], res
        assert res["naive_differs"] > 0, res
