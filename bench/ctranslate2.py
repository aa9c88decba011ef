"""CTranslate2 (int8, float32) against attnlab's own decoding, in one run on 1,000 test sentences (issue 17).

    python bench/ctranslate2.py --run runs/quality/transformer-15min            # writes ## CTranslate2
    python bench/ctranslate2.py --run RUN --sentences 200 --threads 1 --no-write  # a quick look

The run is exported into a temporary folder twice (``--format ctranslate2``, float32 and int8); the
run itself is only read. Six decoders translate the same distinct test sources: attnlab greedy and
beam 4 (``translator.decode_many``, the path of ``attnlab translate``/``evaluate``), CTranslate2
float32 and int8, greedy and beam 4 (``CT2Translator``, the path of ``--engine ctranslate2``), and
attnlab greedy with ``torch.ao`` dynamic int8 ``nn.Linear`` (FFN, W_o and attention output
projections; the fused ``in_proj`` is sliced by the attention code and stays float32) as the next
step for the PyTorch path.

- sentences/s: the sentences are cut into chunks; every chunk is translated by every decoder, in
  an order that rotates from chunk to chunk, all in this one process, so machine noise (other
  processes on the same cores) hits every decoder alike and cancels in the ratios to attnlab greedy;
- BLEU: sacreBLEU with all references, exactly as ``attnlab evaluate`` scores (``corpus_scores``);
  ``same as attnlab greedy``: the share of sentences whose output equals attnlab greedy's;
- peak memory: each decoder runs again alone in a fresh subprocess; the peak resident set
  (``VmHWM``, reset after the imports) minus the resident set then, so it counts the loaded model
  and what decoding adds (Linux).

The matmul peak (fp32, ``attnlab.device.measure_peak_gflops``) is printed to describe the machine.

``--isa`` writes ``## CTranslate2 int8 on every x86 processor`` instead: each CTranslate2
setting (float32; int8 rounded by CTranslate2, ``127 / max|w|``; int8 rounded by attnlab,
``ct2.int8_weights``; int16) against attnlab greedy, greedy, one thread, in a child process per
instruction set, as the environment variables of ``ISAS`` select it (CTranslate2 and its backends
read them once, at load). ``AVX2, oneDNN`` is what an AMD EPYC without VNNI computes (the CI):

    python bench/ctranslate2.py --run RUN --isa --sentences 1000
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent

# This file is named after the engine: without bench/ on the path, `import ctranslate2` finds the library.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]

from attnlab import device as D  # noqa: E402
from attnlab.data import corpus  # noqa: E402
from attnlab.data.text import detokenize  # noqa: E402
from attnlab.evaluation.bleu import corpus_scores  # noqa: E402
from attnlab.export.engine import CT2Translator  # noqa: E402
from attnlab.export.folder import export_run  # noqa: E402
from attnlab.translator import Translator, decode_many  # noqa: E402

DECODERS = ("attnlab greedy", "attnlab beam 4", "attnlab+ao-int8 greedy",
            "ct2 float32 greedy", "ct2 float32 beam 4", "ct2 int8 greedy", "ct2 int8 beam 4")


def _rss(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise OSError(f"{field} not in /proc/self/status")


def ao_int8(tr: Translator) -> Translator:
    """A copy of ``tr`` whose ``nn.Linear`` layers (all but the fused ``in_proj``) are torch.ao dynamic int8."""
    from torch.ao.quantization import quantize_dynamic

    names = {n for n, m in tr.model.named_modules() if isinstance(m, nn.Linear) and not n.endswith("in_proj")}
    model = quantize_dynamic(tr.model, names, dtype=torch.qint8, inplace=False)
    q = Translator.__new__(Translator)
    q.__dict__.update(tr.__dict__)
    q.model = model.eval()
    return q


def _best(tr: Translator, beam: int, seqs: list[list[int]]) -> list[list[int]]:
    """Best hypothesis' ids per sentence, through the translator's search (CTranslate2's or decode_many)."""
    if isinstance(tr, CT2Translator):
        return [h[0].tokens for h in tr._search(seqs, tr.cfg.decode, beam)]
    return [h[0].tokens for h in decode_many(tr.model, seqs, tr.cfg.decode, tr.device, beam_size=beam)]


def decoders(run: Path, exports: dict[str, Path], threads: int, names=DECODERS) -> dict[str, object]:
    """name -> a function ``ids list -> list of token-id lists`` (best hypothesis per sentence)."""
    torch.set_num_threads(threads)
    out = {}
    base = None if all(n.startswith("ct2") for n in names) else Translator.from_run(run, device="cpu")
    for name in names:
        beam = 4 if "beam" in name else 1
        if name.startswith("ct2"):
            tr = CT2Translator.from_export(exports[name.split()[1]], device="cpu", threads=threads)
        elif "ao-int8" in name:
            tr = ao_int8(base)
        else:
            tr = base
        out[name] = partial(_best, tr, beam)
    return out


def test_sources(run: Path, n: int):
    tr = Translator.from_run(run, device="cpu")
    prepared = corpus.prepare(tr.cfg.data, tokenizers=(tr.src_tok, tr.tgt_tok))
    split = prepared.splits["test"]
    rows = split.unique_sources()[:n]
    src = [split.src[i][: tr.max_src_tokens] for i in rows]
    refs = [[detokenize(r.split(), "fr") for r in split.references[i]] for i in rows]
    return tr, src, refs


def race(fns: dict, src: list[list[int]], chunk: int) -> tuple[dict[str, float], dict[str, list]]:
    """Seconds per decoder over all chunks (rotating order) and each decoder's outputs in input order."""
    names = list(fns)
    seconds = dict.fromkeys(names, 0.0)
    outputs: dict[str, list] = {n: [] for n in names}
    for k, start in enumerate(range(0, len(src), chunk)):
        part = src[start : start + chunk]
        order = names[k % len(names):] + names[: k % len(names)]
        for name in order:
            t0 = time.perf_counter()
            outputs[name].append(fns[name](part))
            seconds[name] += time.perf_counter() - t0
    return seconds, {n: [h for part in outputs[n] for h in part] for n in names}


def memory_child(run: str, exports: str, name: str, n: int, threads: int) -> None:
    """One decoder alone: print the peak RSS added by loading it and translating ``n`` sentences."""
    _, src, _ = test_sources(Path(run), n)
    Path("/proc/self/clear_refs").write_text("5")
    base = _rss("VmRSS")
    fn = decoders(Path(run), {k: Path(v) for k, v in json.loads(exports).items()}, threads, (name,))[name]
    fn(src)
    print(f"peak_bytes {_rss('VmHWM') - base}")


def peak_memory(run: Path, exports: dict[str, Path], name: str, n: int, threads: int) -> float:
    cmd = [sys.executable, __file__, "--memory-child", name, "--run", str(run), "--sentences", str(n),
           "--exports", json.dumps({k: str(v) for k, v in exports.items()}), "--threads", str(threads)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("peak_bytes")), None)
    if line is None:
        raise RuntimeError(f"memory child for {name} failed: {proc.stderr[-2000:]}")
    return int(line.split()[1]) / 2**20


def measure(run: Path, exports: dict[str, Path], n: int, threads_list: list[int], chunk: int, memory: bool):
    tr, src, refs = test_sources(run, n)
    rows = []
    for threads in threads_list:
        fns = decoders(run, exports, threads)
        race(fns, src[: min(chunk, len(src))], chunk)  # warm-up: thread pools, allocators
        seconds, outs = race(fns, src, chunk)
        greedy = outs["attnlab greedy"]
        for name in fns:
            texts = [tr.tgt_tok.decode(h) for h in outs[name]]
            scores = corpus_scores(texts, refs)
            row = {"decoder": name, "threads": threads, "sentences": len(src), "seconds": seconds[name],
                   "sent_per_s": len(src) / seconds[name], "ratio": seconds["attnlab greedy"] / seconds[name],
                   "bleu": scores["bleu"], "signature": scores["bleu_signature"],
                   "same": sum(a == b for a, b in zip(outs[name], greedy)) / len(src)}
            if memory and threads == threads_list[0]:  # memory hardly depends on the thread count
                row["peak_mib"] = peak_memory(run, exports, name, n, threads)
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "CT2_FORCE_CPU_ISA": "AVX2",
        "ONEDNN_MAX_CPU_ISA": "AVX2"}
ISAS = {  # name -> environment of the child process
    "native (MKL)": {},
    "native, oneDNN": {"CT2_USE_MKL": "0"},
    "AVX2, oneDNN": {**AVX2, "CT2_USE_MKL": "0"},
    "AVX2, MKL": {**AVX2, "CT2_USE_MKL": "1"},
}
SETTINGS = ("float32", "int8, CTranslate2's rounding", "int8, attnlab's rounding", "int16")


def isa_models(run: Path, tmp: Path) -> dict[str, str]:
    """setting -> CTranslate2 model folder; the attnlab export (float32 CTranslate2 inside) is ``tmp/export``."""
    import ctranslate2

    from attnlab.export import ct2
    from attnlab.export.folder import _load

    export_run(run, tmp / "export", fmt="ctranslate2")
    ours = export_run(run, tmp / "attnlab-int8", fmt="ctranslate2", quantization="int8")
    out = {"float32": str(tmp / "export" / "ctranslate2"), "int8, attnlab's rounding": str(ours / "ctranslate2")}
    for setting, q in (("int8, CTranslate2's rounding", "int8"), ("int16", "int16")):
        _, _, _, model, src_tok, tgt_tok = _load(run, "best")
        with torch.no_grad():
            spec = ct2._transformer_spec(ctranslate2.specs, model, src_tok, tgt_tok)
        spec.validate()
        spec.optimize(quantization=q)  # CTranslate2's own rounding
        (tmp / f"ct2-{q}").mkdir()
        spec.save(str(tmp / f"ct2-{q}"))
        out[setting] = str(tmp / f"ct2-{q}")
    return out


def isa_child(run: str, tmp: str, n: int) -> None:
    """One instruction set (this process's environment): a JSON row per setting on stdout."""
    import ctranslate2

    torch.set_num_threads(1)
    models = json.loads((Path(tmp) / "models.json").read_text())
    tr, src, refs = test_sources(Path(run), n)
    ct = CT2Translator.from_export(Path(tmp) / "export", device="cpu", threads=1)
    t0 = time.perf_counter()
    greedy = _best(tr, 1, src)
    base_s = time.perf_counter() - t0
    base_bleu = corpus_scores([tr.tgt_tok.decode(h) for h in greedy], refs)["bleu"]
    for setting in SETTINGS:
        ct.ct2 = ctranslate2.Translator(models[setting], device="cpu", intra_threads=1)
        _best(ct, 1, src[:50])  # warm-up
        t0 = time.perf_counter()
        hyps = _best(ct, 1, src)
        seconds = time.perf_counter() - t0
        bleu = corpus_scores([tr.tgt_tok.decode(h) for h in hyps], refs)["bleu"]
        print(json.dumps({"setting": setting, "sentences": len(src), "same": sum(a == b for a, b in zip(hyps, greedy)),
                          "bleu": bleu, "attnlab_bleu": base_bleu, "sent_per_s": len(src) / seconds,
                          "ratio": base_s / seconds}), flush=True)


def isa_rows(run: Path, n: int) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="attnlab-ct2-isa-") as tmp:
        (Path(tmp) / "models.json").write_text(json.dumps(isa_models(run, Path(tmp))))
        for isa, env in ISAS.items():
            cmd = [sys.executable, __file__, "--isa-child", tmp, "--run", str(run), "--sentences", str(n)]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600,
                                  env={**os.environ, **env, "CT2_VERBOSE": "1"})
            if proc.returncode:
                raise RuntimeError(f"{isa} child failed: {proc.stderr[-2000:]}")
            backends = {}  # CTranslate2's info log: " - SGEMM backend: DNNL (packed: false)", GEMM_S16, GEMM_S8
            for x in proc.stderr.splitlines():
                if " backend: " in x:
                    kind, name = x.split(" - ", 1)[-1].split(" backend: ", 1)
                    backends[kind] = name.split()[0]
            for line in proc.stdout.splitlines():
                if line.startswith("{"):
                    row = {**json.loads(line), "isa": isa}
                    kind = {"float32": "SGEMM", "int16": "GEMM_S16"}.get(row["setting"], "GEMM_S8")
                    row["gemm"] = backends.get(kind, "?")
                    if row["gemm"] == "none":  # CTranslate2 falls back to int8 (its own rounding)
                        row["gemm"] = f"none → int8 on {backends.get('GEMM_S8', '?')}"
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    return rows


def isa_table(rows: list[dict], run: Path, cmd: str) -> str:
    lines = [
        "## CTranslate2 int8 on every x86 processor",
        "",
        f"`{cmd}` — {datetime.date.today()}, {_cpu_name()} ({_int8_flags()}), {os.cpu_count()} cores "
        f"(shared with other jobs), torch {torch.__version__}, ctranslate2 {__import__('ctranslate2').__version__}.",
        "",
        f"Model: `{run}`; {rows[0]['sentences']} distinct test sources, greedy, one thread; `same`: the output "
        "equals attnlab's own float32 greedy in the same process; ΔBLEU against that greedy's BLEU "
        f"({rows[0]['attnlab_bleu']:.2f}); speed relative to it (the machine is shared: ±10 %). The instruction "
        "sets are chosen by environment variables in a child process each: " + "; ".join(
            f"{isa}: `{' '.join(f'{k}={v}' for k, v in env.items()) or '(none)'}`" for isa, env in ISAS.items()) + ".",
        "",
        "| setting | ISA | GEMM | same as attnlab greedy | ΔBLEU | × attnlab greedy |",
        "| --- | --- | --- | --: | --: | --: |",
    ]
    for r in sorted(rows, key=lambda r: (SETTINGS.index(r["setting"]), list(ISAS).index(r["isa"]))):
        lines.append(f"| {r['setting']} | {r['isa']} | {r['gemm']} | {r['same']} ({100 * r['same'] / r['sentences']:.1f} %)"
                     f" | {r['bleu'] - r['attnlab_bleu']:+.2f} | {r['ratio']:.2f} |")
    return "\n".join(lines) + "\n"


def _int8_flags() -> str:
    """The processor's flags that decide how int8 GEMMs run (Linux)."""
    try:
        flags = next(x for x in Path("/proc/cpuinfo").read_text().splitlines() if x.startswith("flags")).split()
    except (OSError, StopIteration):
        return "flags unknown"
    return " ".join(f for f in ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8") if f in flags)


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def table(rows: list[dict], peak: float, cmd: str) -> str:
    lines = [
        "## CTranslate2",
        "",
        f"`{cmd}` — {datetime.date.today()}, {_cpu_name()}, {os.cpu_count()} cores (shared with other jobs), "
        f"torch {torch.__version__}, "
        f"ctranslate2 {__import__('ctranslate2').__version__}; fp32 matmul peak measured in this run: "
        f"{peak / 1e9:.1f} GFLOP/s.",
        "",
        f"Model: `{rows[0]['run']}` (Transformer, exported to a temporary folder; the run is only read). "
        "One process, the sentences in chunks that every decoder translates in a rotating order (noise "
        "cancels in the ratios); BLEU as `attnlab evaluate` scores (sacreBLEU, all references); peak memory: "
        "a fresh subprocess per decoder, VmHWM after the imports minus the RSS then (model + decoding; "
        "the ct2 rows include the PyTorch weights that `CT2Translator` keeps for attention maps).",
        "",
        "| decoder | threads | sentences/s | × attnlab greedy | BLEU | same as attnlab greedy | peak MiB |",
        "| --- | --: | --: | --: | --: | --: | --: |",
    ]
    for r in rows:
        mem = f"{r['peak_mib']:.0f}" if "peak_mib" in r else "—"
        lines.append(f"| {r['decoder']} | {r['threads']} | {r['sent_per_s']:.0f} | {r['ratio']:.2f} | "
                     f"{r['bleu']:.2f} | {100 * r['same']:.1f} % | {mem} |")
    if rows:
        lines += ["", f"sacreBLEU: `{rows[0]['signature']}`"]
    return "\n".join(lines) + "\n"


def write_section(section: str, path: Path) -> None:
    """Replace (or add) ``section`` (its first line is the ``## `` title) in ``path``, leaving the others alone."""
    title = section.splitlines()[0].strip()
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else ["# attnlab benchmark results"]
    start = next((i for i, x in enumerate(lines) if x.strip() == title), None)
    if start is None:
        lines += [""] + section.rstrip("\n").splitlines()
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        lines = lines[:start] + section.rstrip("\n").splitlines() + [""] + lines[end:]
    path.write_text("\n".join(lines).rstrip("\n") + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", required=True, help="a trained Transformer run folder (read only)")
    p.add_argument("--sentences", type=int, default=1000, help="distinct test sources")
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts, e.g. 1,2")
    p.add_argument("--chunk", type=int, default=100, help="sentences per interleaved chunk")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    p.add_argument("--no-write", action="store_true", help="print only; leave bench/RESULTS.md alone")
    p.add_argument("--results", type=Path, default=HERE / "RESULTS.md")
    p.add_argument("--isa", action="store_true", help="the int8 settings on each instruction set (## CTranslate2 int8 "
                   "on every x86 processor)")
    p.add_argument("--isa-child", help=argparse.SUPPRESS)
    p.add_argument("--memory-child", help=argparse.SUPPRESS)
    p.add_argument("--exports", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]
    if args.memory_child:
        memory_child(args.run, args.exports, args.memory_child, args.sentences, threads[0])
        return 0
    if args.isa_child:
        isa_child(args.run, args.isa_child, args.sentences)
        return 0
    if args.isa:
        cmd = "python bench/ctranslate2.py " + " ".join(argv if argv is not None else sys.argv[1:])
        section = isa_table(isa_rows(Path(args.run), args.sentences), Path(args.run), cmd)
        print(section)
        if not args.no_write:
            write_section(section, args.results)
            print(f"wrote the ## CTranslate2 int8 on every x86 processor section of {args.results}")
        return 0
    torch.set_num_threads(max(threads))
    peak = D.measure_peak_gflops(2.0) * 1e9  # FLOP/s, fp32 on the CPU
    print(f"fp32 matmul peak: {peak / 1e9:.1f} GFLOP/s ({max(threads)} threads)")
    with tempfile.TemporaryDirectory(prefix="attnlab-ct2-bench-") as tmp:
        exports = {q: export_run(args.run, Path(tmp) / q, fmt="ctranslate2", quantization=q)
                   for q in ("float32", "int8")}
        rows = measure(Path(args.run), exports, args.sentences, threads, args.chunk, not args.no_memory)
    for r in rows:
        r["run"] = args.run
    cmd = "python bench/ctranslate2.py " + " ".join(argv if argv is not None else sys.argv[1:])
    section = table(rows, peak, cmd)
    print(section)
    if not args.no_write:
        write_section(section, args.results)
        print(f"wrote the ## CTranslate2 section of {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
