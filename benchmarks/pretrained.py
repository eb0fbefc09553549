"""Time and peak memory of `primacy analyze icl` and `analyze ablation --hf_model` at real model sizes.

No hub is reachable here, so each model is built from the published architecture's config with random weights and
saved locally: the work per prompt is the same as for the trained model, only the scores differ. Each command runs
in its own process so its peak resident memory is its own.

    python benchmarks/pretrained.py --models gpt2 pythia-160m pythia-410m --device cpu
    python benchmarks/pretrained.py --models gpt2 --sequences 64 --random 5     # a lighter ablation for a CPU
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ARCHITECTURES = {  # published sizes (GPT-2 small; Pythia from its config.json files)
    "gpt2": ("GPT2Config", {}),
    "pythia-70m": ("GPTNeoXConfig", {"hidden_size": 512, "num_hidden_layers": 6, "num_attention_heads": 8,
                                     "intermediate_size": 2048, "vocab_size": 50304, "rotary_pct": 0.25}),
    "pythia-160m": ("GPTNeoXConfig", {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                                      "intermediate_size": 3072, "vocab_size": 50304, "rotary_pct": 0.25}),
    "pythia-410m": ("GPTNeoXConfig", {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                                      "intermediate_size": 4096, "vocab_size": 50304, "rotary_pct": 0.25}),
    "pythia-1b": ("GPTNeoXConfig", {"hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 8,
                                    "intermediate_size": 8192, "vocab_size": 50304, "rotary_pct": 0.25}),
}


def build(name: str, path: Path) -> None:
    import torch
    import transformers

    torch.manual_seed(0)
    kind, fields = ARCHITECTURES[name]
    config = getattr(transformers, kind)(**fields)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(path)


def timed(command: list[str]) -> dict:
    """Wall time and peak resident memory of one `primacy` process."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "primacy", *command], check=False, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(done.stderr)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # GiB; the largest child so far
    return {"seconds": round(seconds, 1), "peak_gib_so_far": round(peak, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["gpt2", "pythia-160m"], choices=list(ARCHITECTURES))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--n_items", type=int, default=100, help="n of the prompts and sequences (the paper's 100)")
    parser.add_argument("--sequences", type=int, default=256, help="analyze ablation --sequences")
    parser.add_argument("--random", type=int, default=20, help="analyze ablation --random")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:  # models in increasing size: the running peak is the latest one's
        for name in options.models:
            path = Path(tmp) / name
            build(name, path)
            common = ["--hf_model", str(path), "--device", options.device, "--dtype", options.dtype,
                      "--n_items", str(options.n_items), "--formats", "png"]
            icl = timed(["analyze", "icl", *common, "--out", str(Path(tmp) / f"{name}-icl")])
            print(json.dumps({name: {f"analyze icl (64 prompts, n {options.n_items})": icl}}), flush=True)
            ablation = timed(["analyze", "ablation", *common, "--heads", str(Path(tmp) / f"{name}-icl" / "heads.csv"),
                              "--out", str(Path(tmp) / f"{name}-ablation"), "--sequences", str(options.sequences),
                              "--random", str(options.random)])
            print(json.dumps({name: {f"analyze ablation ({options.sequences} sequences, {options.random} draws)":
                                     ablation}}), flush=True)


if __name__ == "__main__":
    main()
