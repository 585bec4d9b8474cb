"""`rollforge export RUN_DIR --out DIR [--version latest|best:METRIC|N] [--from-engine]`:
a policy checkpoint as a plain Hugging Face model directory (weights, config, tokenizer) that
`AutoModelForCausalLM.from_pretrained` / `AutoTokenizer.from_pretrained` load as is."""
from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "export", help="export a checkpoint as a plain Hugging Face model directory",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", help="the run folder (holds checkpoints/vNNNN/)")
    p.add_argument("--out", required=True, help="directory to write (must be empty or absent)")
    p.add_argument("--version", default="latest",
                   help="latest (default), N, best:METRIC (highest recorded score) or best-min:METRIC")
    p.add_argument("--from-engine", action="store_true",
                   help="take the weights from the DeepSpeed state (fp32 masters, ZeRO shards "
                        "consolidated) instead of the checkpoint's model/ folder")
    p.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default=None,
                   help="cast the weights (default: as stored)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty --out")
    p.set_defaults(func=run)


def run(args) -> int:
    import os

    from flows.cli import UsageError
    from flows.env import apply_defaults

    apply_defaults()
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from training.export import export_checkpoint

    if not os.path.isdir(args.run_dir):
        raise UsageError(f"run_dir {args.run_dir!r} is not a directory")
    try:
        out = export_checkpoint(args.run_dir, args.version, args.out, from_engine=args.from_engine,
                                dtype=args.dtype, overwrite=args.overwrite)
    except (FileNotFoundError, LookupError, FileExistsError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    print(f"exported {args.run_dir} version {args.version} to {out}")
    return 0
