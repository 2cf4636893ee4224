"""float32 against bf16-mixed for SGRAF: matmul peaks, training step, per-sample pass, 1K evaluation.

In one run (every measurement in a fresh child process of this script) it prints:

1. **Matmul peak** of float32 and of bfloat16: GFLOP/s of a ``2048 x 2048`` product
   (``2 n^3`` FLOP, best of a few), both dtypes in the same child, and their ratio.
2. **Training step** of SGR and SAF (forward of the whole model, encoders included, and
   backward of the summed scores; train mode; no optimizer step) at batch 32 and 128, in
   float32 and under ``torch.autocast(device, dtype=torch.bfloat16)`` (what Lightning's
   ``bf16-mixed`` wraps a ``training_step`` in): seconds, the float32/bf16 time ratio, and the
   achieved GFLOP/s as a share of the matmul peak *of the step's own dtype*. FLOP are counted
   once per (module, batch) with ``torch.utils.flop_counter.FlopCounterMode`` over a float32
   step (the bf16 step runs the same matrix products); only matrix products are counted.
3. **Per-sample pass**: the no-grad forward of the same model in eval mode over
   ``--pass-batches`` batches of ``--pass-batch`` pairs, keeping each pair's own (diagonal)
   score, as ncl's per-sample passes (``ncl/training/passes.py``) do: time and the largest
   difference of the bf16 scores from the float32 ones.
4. **Evaluation** of ``--eval-images`` images (default 1,000) and 5 captions each: encode in
   batches, then the full score matrix with ncl's evaluation path
   (``ncl.evaluation.similarity.sharded_similarity`` over ``SGRAF.similarity``, whose chunked
   plan is ``SGRAF.similarity_plan``), in float32, in bf16 (encoders and similarity under
   autocast) and in ``bf16-encode`` (encoders under autocast, similarity in float32: what
   ``ncl fit --trainer.precision bf16-mixed`` computes at validation, because Lightning's
   autocast covers ``validation_step``, where ncl encodes, and not ``on_validation_epoch_end``,
   where it scores). Time, the largest absolute difference of the score matrix from float32's,
   the share of images whose top-1 caption (i2t) and of captions whose top-1 image (t2i) is
   the same as in float32, and i2t/t2i R@1. With random weights R@1 means little; the score
   difference and the rank agreement are what the run is for.

The model is ncl's own ``SGRAF`` (official dimensions: 36 regions x 2048 features, word 300,
embed 1024, sim 256, F30K vocabulary of 8,481; captions of 10-18 tokens; ``--toy`` shrinks the
dimensions for a smoke test). bf16 goes through ncl's real code path, including the custom
autograd Function of ``ncl/models/local_similarity.py`` and the float32 score of
``ncl/models/layers.py``.

On a CPU without bf16 matrix units (``torch.ops.mkldnn._is_mkldnn_bf16_supported()`` false;
the header prints it and ``torch.backends.cpu.get_cpu_capability()``) torch emulates bf16
matrix products: on the project's AVX2 VM 0.3-20 GFLOP/s against about 80 in float32, a bf16
SGR step at batch 32 took 35 s against 2.5 s. Shrink the run there (``--eval-images 100
--pass-batches 1 --batches 32``). ``--device cuda`` runs the same measurements on a GPU
(``torch.cuda.synchronize`` around every timing; peak memory from
``torch.cuda.max_memory_allocated``).

Usage::

    python scripts/benchmarks/bench_precision.py --threads 1 --eval-images 100 --pass-batches 1
    python scripts/benchmarks/bench_precision.py --device cuda --repeats 5
    python scripts/benchmarks/bench_precision.py --toy --batches 4 --eval-images 4 --rounds 1
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
from benchlib import (
    ROOT,
    load_average,
    parse_or_run_worker,
    print_header,
    run_worker_child,
    threads_env,
    top1_agreement,
)

F30K_VOCAB = 8481
CAPTIONS_PER_IMAGE = 5
OFFICIAL_DIMS = {"img_dim": 2048, "word_dim": 300, "embed_size": 1024, "sim_dim": 256,
                 "num_regions": 36}
TOY_DIMS = {"img_dim": 64, "word_dim": 32, "embed_size": 64, "sim_dim": 32, "num_regions": 12}
# A variant of the training step: how it runs. "loop" is float32 with the official
# per-caption similarity loop instead of ncl's chunked "auto" path.
STEP_VARIANTS = ("fp32", "bf16", "fp16", "loop")
EVAL_VARIANTS = ("fp32", "bf16", "bf16-encode")
LOW_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
DTYPE_OF = {"fp32": "fp32", "loop": "fp32", "bf16": "bf16", "bf16-encode": "bf16",
            "fp16": "fp16"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (0: torch's default)")
    parser.add_argument("--modules", nargs="+", default=["SGR", "SAF"], choices=["SGR", "SAF"])
    parser.add_argument("--batches", type=int, nargs="+", default=[32, 128],
                        help="training-step batch sizes (images = captions)")
    parser.add_argument("--variants", nargs="+", default=["fp32", "bf16"], choices=STEP_VARIANTS,
                        help="training-step variants; the first is the reference of the ratios")
    parser.add_argument("--rounds", type=int, default=1,
                        help="timed steps per variant, each in a fresh process; minimum kept")
    parser.add_argument("--repeats", type=int, default=1,
                        help="timed steps within one process, minimum kept (use more on CUDA)")
    parser.add_argument("--skip-steps", action="store_true")
    parser.add_argument("--peak-n", type=int, default=2048, help="size of the peak matmul")
    parser.add_argument("--pass-batches", type=int, default=4,
                        help="batches of the per-sample pass (0 skips it)")
    parser.add_argument("--pass-batch", type=int, default=128, help="pairs per pass batch")
    parser.add_argument("--eval-images", type=int, default=1000,
                        help=f"evaluation images, {CAPTIONS_PER_IMAGE} captions each (0 skips it)")
    parser.add_argument("--eval-variants", nargs="+", default=list(EVAL_VARIANTS),
                        choices=EVAL_VARIANTS, help="fp32 is always computed (the reference)")
    parser.add_argument("--eval-shard", type=int, default=1000,
                        help="images/captions per block (ncl's eval_shard_size, 1000)")
    parser.add_argument("--encode-batch", type=int, default=128)
    parser.add_argument("--min-len", type=int, default=10)
    parser.add_argument("--max-len", type=int, default=18)
    parser.add_argument("--toy", action="store_true",
                        help="small model dimensions (smoke tests): "
                             + ", ".join(f"{k} {v}" for k, v in TOY_DIMS.items()))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    parser.add_argument("--scratch", default="", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# ----------------------------------------------------------------------------- worker side


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA); a no-op on CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def precision(variant: str, device: torch.device) -> contextlib.AbstractContextManager:
    """The autocast context of ``variant``: none for float32, bf16/fp16 autocast otherwise."""
    dtype = LOW_DTYPES.get(DTYPE_OF[variant])
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def best_time(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    """Minimum wall time of ``fn`` over ``repeats`` calls, synchronised on CUDA, seconds."""
    best = float("inf")
    for _ in range(max(repeats, 1)):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        best = min(best, time.perf_counter() - start)
    return best


def matmul_peak(dtype: torch.dtype, n: int, device: torch.device) -> dict[str, float]:
    """Best GFLOP/s of an ``n x n`` product in ``dtype`` (``2 n^3`` FLOP).

    A small product first sets the library up. Then at least one timed product and at most
    five, stopping once three seconds are spent: an emulated bf16 product of 2048^3 on a CPU
    without bf16 units takes about a minute, a float32 one a fifth of a second.
    """
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    warm = n if device.type == "cuda" else min(n, 256)
    torch.matmul(a[:warm, :warm], b[:warm, :warm], out=out[:warm, :warm])
    best, spent, count = float("inf"), 0.0, 0
    while count < 1 or (count < 5 and spent < 3.0):
        seconds = best_time(lambda: torch.matmul(a, b, out=out), device, 1)
        best, spent, count = min(best, seconds), spent + seconds, count + 1
    return {"gflops": 2 * n**3 / best / 1e9, "seconds": best, "products": count}


def dims(args: argparse.Namespace) -> dict[str, int]:
    """The model dimensions of this run (official, or small with ``--toy``)."""
    return TOY_DIMS if args.toy else OFFICIAL_DIMS


def build_model(args: argparse.Namespace, module: str, variant: str,
                device: torch.device) -> torch.nn.Module:
    """ncl's SGRAF (from the checkout: the parent puts it first on ``PYTHONPATH``)."""
    from ncl.models.sgraf import SGRAF

    torch.manual_seed(args.seed)  # the same weights in every child and variant
    strategy = "loop" if variant == "loop" else "auto"
    return SGRAF(F30K_VOCAB, module, similarity_strategy=strategy, **dims(args)).to(device)


def make_images(n: int, args: argparse.Namespace, device: torch.device, seed: int) -> torch.Tensor:
    """Random region features ``(n, R, img_dim)``."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, dims(args)["num_regions"], dims(args)["img_dim"],
                       generator=gen).to(device)


def make_tokens(n: int, args: argparse.Namespace, device: torch.device,
                seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero-padded random ids ``(n, max_len)`` and lengths ``(n,)`` uniform in [min, max]."""
    gen = torch.Generator().manual_seed(seed + 1)
    lengths = torch.randint(args.min_len, args.max_len + 1, (n,), generator=gen)
    tokens = torch.randint(4, F30K_VOCAB, (n, args.max_len), generator=gen)
    tokens = tokens * (torch.arange(args.max_len) < lengths.unsqueeze(1))
    return tokens.to(device), lengths


def peak_memory_mib(device: torch.device) -> float | None:
    """``torch.cuda.max_memory_allocated`` in MiB on CUDA; ``None`` on CPU (not measured)."""
    if device.type != "cuda":
        return None
    sync(device)
    return torch.cuda.max_memory_allocated(device) / 2**20


def reset_peak_memory(device: torch.device) -> None:
    """Start a new peak-memory window (CUDA)."""
    if device.type == "cuda":
        sync(device)
        torch.cuda.reset_peak_memory_stats(device)


def training_step(model: torch.nn.Module, variant: str, device: torch.device,
                  images: torch.Tensor, tokens: torch.Tensor,
                  lengths: torch.Tensor) -> Callable[[int], None]:
    """``step(n)``: forward of the first ``n`` pairs under ``variant``'s autocast, backward of
    the summed scores (scaled by a ``GradScaler`` for ``fp16``), gradients dropped."""
    scaler = torch.amp.GradScaler(device.type) if variant == "fp16" else None

    def step(n: int) -> None:
        with precision(variant, device):
            scores = model(images[:n], tokens[:n], lengths[:n])
        loss = scores.float().sum()
        (scaler.scale(loss) if scaler is not None else loss).backward()
        model.zero_grad(set_to_none=True)

    return step


def work_step(args: argparse.Namespace, device: torch.device, module: str, batch: int,
              variants: list[str], count: bool) -> dict:
    """Time one training step of each variant (in this order), and count its FLOP once.

    ``fp16`` scales the loss with ``torch.amp.GradScaler`` as Lightning's ``16-mixed`` does.
    The warm-up step is the full batch on CUDA (kernel selection depends on the shapes) and
    a batch of 2 on CPU (where the timed step is long and the set-up is per library).
    """
    images = make_images(batch, args, device, args.seed)
    tokens, lengths = make_tokens(batch, args, device, args.seed)
    out: dict[str, dict] = {}
    for variant in variants:
        model = build_model(args, module, variant, device).train()
        step = training_step(model, variant, device, images, tokens, lengths)
        step(batch if device.type == "cuda" else min(2, batch))
        reset_peak_memory(device)
        load = load_average()
        cpu_start = time.process_time()
        seconds = best_time(partial(step, batch), device, args.repeats)
        cpu_s = (time.process_time() - cpu_start) / max(args.repeats, 1)  # per step
        out[variant] = {"step_s": seconds, "cpu_s": cpu_s,
                        "peak_mib": peak_memory_mib(device), "uptime": load,
                        "plan": list(model.similarity_plan(device))}
        del model
    result: dict[str, object] = {"variants": out}
    if count:
        from torch.utils.flop_counter import FlopCounterMode

        model = build_model(args, module, "fp32", device).train()
        counter = FlopCounterMode(display=False)
        with counter:
            model(images, tokens, lengths).sum().backward()
        result["flop"] = counter.get_total_flops()
    return result


@torch.no_grad()
def work_pass(args: argparse.Namespace, device: torch.device, model: torch.nn.Module,
              variant: str) -> dict:
    """The per-sample pass: each pair's own score over ``--pass-batches`` batches (eval mode)."""
    n = args.pass_batch * args.pass_batches
    images = make_images(n, args, device, args.seed + 2)
    tokens, lengths = make_tokens(n, args, device, args.seed + 2)
    with precision(variant, device):
        model(images[:2], tokens[:2], lengths[:2])  # warm-up
    diag: list[torch.Tensor] = []

    def run() -> None:
        diag.clear()
        for start in range(0, n, args.pass_batch):
            part = slice(start, start + args.pass_batch)
            with precision(variant, device):
                scores = model(images[part], tokens[part], lengths[part])
            diag.append(scores.diagonal().float())

    reset_peak_memory(device)
    load = load_average()
    seconds = best_time(run, device, 1)
    return {"seconds": seconds, "pairs": n, "peak_mib": peak_memory_mib(device), "uptime": load,
            "diag": torch.cat(diag).cpu().tolist()}


@torch.no_grad()
def encode(args: argparse.Namespace, device: torch.device, model: torch.nn.Module,
           variant: str, images: torch.Tensor, tokens: torch.Tensor,
           lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Image and caption embeddings in batches, kept as float32 (as ncl's validation_step does)."""
    size = args.encode_batch
    sync(device)
    start = time.perf_counter()
    with precision(variant, device):
        img = torch.cat([model.encode_images(images[i:i + size]).float()
                         for i in range(0, len(images), size)])
        cap = torch.cat([model.encode_captions(tokens[i:i + size], lengths[i:i + size]).float()
                         for i in range(0, len(tokens), size)])
    sync(device)
    return img, cap, time.perf_counter() - start


def work_eval(args: argparse.Namespace, device: torch.device, model: torch.nn.Module,
              variants: list[str], module: str) -> dict[str, dict]:
    """Encode once per encoder dtype, score with ncl's sharded evaluation, save the matrices."""
    from ncl.evaluation.similarity import sharded_similarity
    from ncl.metrics.retrieval import retrieval_metrics

    n_img = args.eval_images
    images = make_images(n_img, args, device, args.seed + 3)
    tokens, lengths = make_tokens(n_img * CAPTIONS_PER_IMAGE, args, device, args.seed + 3)
    with torch.no_grad(), precision(variants[0], device):
        model(images[:2], tokens[:2], lengths[:2])  # warm-up
    encoded: dict[str, tuple[torch.Tensor, torch.Tensor, float]] = {}
    out: dict[str, dict] = {}
    for variant in variants:
        enc_dtype = DTYPE_OF[variant]
        reset_peak_memory(device)
        load = load_average()
        if enc_dtype not in encoded:
            encoded[enc_dtype] = encode(args, device, model, enc_dtype, images, tokens, lengths)
        img, cap, encode_s = encoded[enc_dtype]
        sync(device)
        start = time.perf_counter()
        with precision("bf16" if variant == "bf16" else "fp32", device):
            sims = sharded_similarity(model.similarity, img, cap, lengths.cpu(),
                                      args.eval_shard, device=device)
        similarity_s = time.perf_counter() - start  # the matrix is on the CPU: synchronised
        path = Path(args.scratch) / f"eval_{module}_{variant}.pt"
        torch.save(sims, path)
        metrics = retrieval_metrics(sims, CAPTIONS_PER_IMAGE)
        out[variant] = {"encode_s": encode_s, "similarity_s": similarity_s,
                        "peak_mib": peak_memory_mib(device), "uptime": load, "matrix": str(path),
                        "i2t_r1": metrics["i2t_r1"], "t2i_r1": metrics["t2i_r1"],
                        "plan": list(model.similarity_plan(device))}
    return out


def work_infer(args: argparse.Namespace, device: torch.device, module: str,
               variants: list[str]) -> dict:
    """The per-sample pass and the evaluation of ``variants`` with one eval-mode model."""
    model = build_model(args, module, "fp32", device).eval()
    result: dict[str, dict] = {"pass": {}, "eval": {}}
    if args.pass_batches > 0:  # bf16-encode is an evaluation variant: its pass is bf16's
        for variant in dict.fromkeys("bf16" if v == "bf16-encode" else v for v in variants):
            result["pass"][variant] = work_pass(args, device, model, variant)
    if args.eval_images > 0:
        result["eval"] = work_eval(args, device, model, variants, module)
    return result


def run_worker(args: argparse.Namespace) -> None:
    """One child: ``peak:<dtypes>``, ``step:<module>:<batch>:<variants>:<count 0/1>`` or
    ``infer:<module>:<variants>`` (variants and dtypes comma-separated); JSON on stdout."""
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    kind, *fields = args.worker.split(":")
    if kind == "peak":
        result = {name: dict(matmul_peak({"fp32": torch.float32, **LOW_DTYPES}[name],
                                         args.peak_n, device), uptime=load_average())
                  for name in fields[0].split(",")}
    elif kind == "step":
        module, batch, variants, count = fields
        result = work_step(args, device, module, int(batch), variants.split(","), count == "1")
    elif kind == "infer":
        module, variants = fields
        result = work_infer(args, device, module, variants.split(","))
    else:
        raise ValueError(f"unknown worker {args.worker!r}")
    result["ncl"] = str(Path(sys.modules["ncl"].__file__).parent) if "ncl" in sys.modules else ""
    print(json.dumps(result))


# ----------------------------------------------------------------------------- parent side


def spawn(argv: list[str], worker: str) -> dict:
    """Run one child with the checkout first on ``PYTHONPATH``; return its JSON."""
    args = parse_args(argv)
    env = threads_env(args.threads) if args.threads else dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    result, _ = run_worker_child(__file__, argv, worker, env=env, cwd=ROOT)
    return result


def device_facts(args: argparse.Namespace) -> str:
    """What the header says about the device and the CPU's bf16 support."""
    facts = [f"device {args.device}"]
    if torch.device(args.device).type == "cuda":
        facts.append(f"GPU {torch.cuda.get_device_name(torch.device(args.device))}, "
                     f"CUDA {torch.version.cuda}, "
                     f"TF32 matmul {torch.backends.cuda.matmul.allow_tf32}")
    facts.append(f"threads {args.threads or torch.get_num_threads()}")
    facts.append("torch.backends.cpu.get_cpu_capability() "
                 f"{torch.backends.cpu.get_cpu_capability()}")
    facts.append("torch.ops.mkldnn._is_mkldnn_bf16_supported() "
                 f"{bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())}")
    facts.append("toy dims" if args.toy else "official dims")
    return ", ".join(facts)


def cuda_missing(args: argparse.Namespace) -> str | None:
    """Why ``--device`` cannot be used here, or ``None``."""
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        return f"--device {args.device}: torch.cuda.is_available() is False on this machine"
    return None


def load(text: str) -> str:
    """A load-average string without its label, for a table cell."""
    return text.replace("load average ", "")


def mib(value: float | None) -> str:
    """Peak MiB for a table cell; ``-`` where not measured (CPU)."""
    return "-" if value is None else f"{value:.0f}"


def measure_peaks(argv: list[str], args: argparse.Namespace, variants: list[str]) -> dict:
    """The matmul peak of every dtype used, in one child; print the table."""
    names = list(dict.fromkeys(["fp32", "bf16"] + [DTYPE_OF[v] for v in variants]))
    peaks = spawn(argv, "peak:" + ",".join(names))
    threads = args.threads or "default"
    print(f"\n## Matmul peak, {args.peak_n}^3 (2 n^3 FLOP, best of up to 5 products), "
          f"{threads} thread(s), one child")
    print(f"{'':<5} {'dtype':<6} {'GFLOP/s':>9} {'best s':>9} {'products':>8}   load")
    for name in names:
        p = peaks[name]
        print(f"peak  {name:<6} {p['gflops']:>9.1f} {p['seconds']:>9.3g} {p['products']:>8}   "
              f"{load(p['uptime'])}")
    for name in names[1:]:
        print(f"matmul peak ratio fp32/{name} = "
              f"{peaks['fp32']['gflops'] / peaks[name]['gflops']:.2f} (GFLOP/s of float32 over "
              f"{name})")
    return {name: peaks[name]["gflops"] for name in names}


def measure_steps(argv: list[str], args: argparse.Namespace, peaks: dict[str, float]) -> None:
    """Every (module, batch, variant) in fresh children, round by round; print the table."""
    times: dict[tuple[str, int, str], list[dict]] = {}
    flop: dict[tuple[str, int], int] = {}
    for round_ in range(args.rounds):
        for module in args.modules:
            for batch in args.batches:
                for index, variant in enumerate(args.variants):
                    count = "1" if round_ == 0 and index == 0 else "0"
                    result = spawn(argv, f"step:{module}:{batch}:{variant}:{count}")
                    times.setdefault((module, batch, variant), []).append(
                        result["variants"][variant])
                    if "flop" in result:
                        flop[(module, batch)] = result["flop"]
    print(f"\n## Training step (forward + backward of the summed scores, train mode, no "
          f"optimizer step), {'toy' if args.toy else 'official'} dims, captions "
          f"{args.min_len}-{args.max_len} tokens")
    print("GFLOP: matrix products of one float32 step (FlopCounterMode), counted once per "
          "module and batch; 'of peak': achieved GFLOP/s over the matmul peak of the step's "
          "own dtype above; peak MiB: torch.cuda.max_memory_allocated (CUDA only)")
    print(f"{'':<5} {'module':<6} {'batch':>5} {'variant':<7} {'round':>5} {'step s':>9} "
          f"{'cpu s':>8} {'GFLOP':>8} {'GFLOP/s':>8} {'of peak':>8} {'peak MiB':>9}   load")
    for (module, batch, variant), runs in times.items():
        count = flop[(module, batch)]
        for round_, run in enumerate(runs):
            rate = count / run["step_s"] / 1e9
            share = rate / peaks[DTYPE_OF[variant]]
            print(f"step  {module:<6} {batch:>5} {variant:<7} {round_ + 1:>5} "
                  f"{run['step_s']:>9.3f} {run['cpu_s']:>8.2f} {count / 1e9:>8.2f} "
                  f"{rate:>8.1f} {share:>8.1%} {mib(run['peak_mib']):>9}   {load(run['uptime'])}")
    ref = args.variants[0]
    for module in args.modules:
        for batch in args.batches:
            best = {v: min(r["step_s"] for r in times[(module, batch, v)]) for v in args.variants}
            for variant in args.variants[1:]:
                ratio = best[ref] / best[variant]
                print(f"{module} batch {batch}: step time ratio {ref}/{variant} = {ratio:.3f} "
                      f"({variant} {'faster' if ratio > 1 else 'slower'}; best of "
                      f"{args.rounds} round(s))")


def measure_inference(argv: list[str], args: argparse.Namespace, scratch: str) -> None:
    """The per-sample pass and the evaluation, per module: float32 in one child, the bf16
    variants (which share their encodings) in another; print both tables."""
    child_argv = [*argv, "--scratch", scratch]
    low = [v for v in args.eval_variants if v != "fp32"]
    if args.eval_images <= 0:  # only the pass: bf16-encode is an evaluation variant
        low = ["bf16"]
    results: dict[str, dict] = {}
    for module in args.modules:
        merged: dict[str, dict] = {"pass": {}, "eval": {}}
        for group in (["fp32"], low):
            if group:
                part = spawn(child_argv, f"infer:{module}:{','.join(group)}")
                merged["pass"].update(part["pass"])
                merged["eval"].update(part["eval"])
        results[module] = merged
    if args.pass_batches > 0:
        report_pass(args, results)
    if args.eval_images > 0:
        report_eval(args, results)


def report_pass(args: argparse.Namespace, results: dict[str, dict]) -> None:
    """The per-sample pass table and its float32/bf16 ratio."""
    n = args.pass_batches * args.pass_batch
    print(f"\n## Per-sample pass: no-grad forward in eval mode, {args.pass_batches} batch(es) "
          f"of {args.pass_batch} pairs ({n} pairs), each pair's own (diagonal) score")
    print(f"{'':<5} {'module':<6} {'variant':<7} {'seconds':>9} {'pairs/s':>9} "
          f"{'max |diff| vs fp32':>19} {'peak MiB':>9}   load")
    for module, result in results.items():
        ref = torch.tensor(result["pass"]["fp32"]["diag"])
        for variant, run in result["pass"].items():
            diff = (torch.tensor(run["diag"]) - ref).abs().max().item()
            print(f"pass  {module:<6} {variant:<7} {run['seconds']:>9.3f} "
                  f"{run['pairs'] / run['seconds']:>9.1f} {diff:>19.2e} "
                  f"{mib(run['peak_mib']):>9}   {load(run['uptime'])}")
        for variant in [v for v in result["pass"] if v != "fp32"]:
            ratio = result["pass"]["fp32"]["seconds"] / result["pass"][variant]["seconds"]
            print(f"{module} per-sample pass: time ratio fp32/{variant} = {ratio:.3f}")


def compare_matrices(reference: str, other: str) -> tuple[float, float, float]:
    """Two saved score matrices: the largest absolute difference, and the shares of rows
    (images, i2t) and of columns (captions, t2i) whose top-1 is the same in both."""
    return top1_agreement(torch.load(reference), torch.load(other))


def report_eval(args: argparse.Namespace, results: dict[str, dict]) -> None:
    """The evaluation table: times, score differences, top-1 agreement, R@1."""
    n_img = args.eval_images
    print(f"\n## Evaluation: {n_img} images x {n_img * CAPTIONS_PER_IMAGE} captions, shards of "
          f"{args.eval_shard} (ncl.evaluation.similarity.sharded_similarity over "
          f"SGRAF.similarity), random weights")
    print("bf16: encoders and similarity under autocast; bf16-encode: encoders under autocast, "
          "similarity in float32 (what bf16-mixed validation computes); 'top-1 same': share of "
          "images (i2t) / captions (t2i) whose best match is float32's; encode s of "
          "bf16-encode is bf16's (the same encodings)")
    print(f"{'':<5} {'module':<6} {'variant':<11} {'encode s':>9} {'similarity s':>13} "
          f"{'total s':>9} {'max |diff|':>10} {'i2t top-1 same':>14} {'t2i top-1 same':>14} "
          f"{'i2t R@1':>7} {'t2i R@1':>7} {'peak MiB':>9}   load")
    for module, result in results.items():
        runs = result["eval"]
        for variant, run in runs.items():
            diff, i2t, t2i = compare_matrices(runs["fp32"]["matrix"], run["matrix"])
            total = run["encode_s"] + run["similarity_s"]
            print(f"eval  {module:<6} {variant:<11} {run['encode_s']:>9.2f} "
                  f"{run['similarity_s']:>13.2f} {total:>9.2f} {diff:>10.2e} {i2t:>14.1%} "
                  f"{t2i:>14.1%} {run['i2t_r1']:>7.1f} {run['t2i_r1']:>7.1f} "
                  f"{mib(run['peak_mib']):>9}   {load(run['uptime'])}")
        base = runs["fp32"]
        for variant in [v for v in runs if v != "fp32"]:
            run = runs[variant]
            ratio = (base["encode_s"] + base["similarity_s"]) / (run["encode_s"]
                                                                 + run["similarity_s"])
            print(f"{module} evaluation: time ratio fp32/{variant} = {ratio:.3f}; R@1 change "
                  f"i2t {run['i2t_r1'] - base['i2t_r1']:+.1f}, "
                  f"t2i {run['t2i_r1'] - base['t2i_r1']:+.1f}")


def check_args(args: argparse.Namespace) -> str | None:
    """The first problem with the options, or ``None``."""
    if missing := cuda_missing(args):
        return missing
    if args.eval_images > 0 and "fp32" not in args.eval_variants:
        args.eval_variants.insert(0, "fp32")
    sizes = {"--rounds": args.rounds, "--repeats": args.repeats, "--peak-n": args.peak_n,
             "--pass-batch": args.pass_batch, "--eval-shard": args.eval_shard,
             "--encode-batch": args.encode_batch, "--min-len": args.min_len}
    sizes.update({"--batches": min(args.batches)})
    for name, value in sizes.items():
        if value < 1:
            return f"{name} must be at least 1, got {value}"
    if args.max_len < args.min_len:
        return f"--max-len ({args.max_len}) must be at least --min-len ({args.min_len})"
    return None


def main(argv: list[str] | None = None) -> None:
    """Peaks, training steps, per-sample pass and evaluation, each in fresh children."""
    parsed = parse_or_run_worker(argv, parse_args, run_worker)
    if parsed is None:
        return
    args, argv = parsed
    if problem := check_args(args):
        print(f"bench_precision: error: {problem}", file=sys.stderr)
        raise SystemExit(2)
    print_header("bench_precision", argv, device_facts(args))
    if args.device == "cpu" and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        print("note: this CPU has no bf16 matrix units (no AVX512-BF16/AMX): torch emulates bf16 "
              "matrix products (an SGRAF step measured 8-14x slower than float32); shrink the "
              "run (--eval-images 100 --pass-batches 1) or see docs/benchmarks/precision.md")
    started = time.perf_counter()
    peaks = measure_peaks(argv, args, args.variants)
    if not args.skip_steps:
        measure_steps(argv, args, peaks)
    if args.pass_batches > 0 or args.eval_images > 0:
        with tempfile.TemporaryDirectory(prefix="ncl_bench_precision_") as scratch:
            measure_inference(argv, args, scratch)
    print(f"\nbenchmark wall time {time.perf_counter() - started:.0f} s; {load_average()}")


if __name__ == "__main__":
    main()
