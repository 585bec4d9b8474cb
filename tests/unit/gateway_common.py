"""What the gateway test files share: a run with a freshly initialised tiny policy published as
version 0, that policy served for real (uvicorn on loopback) by the module-scoped fixtures
`served` (byte-level, no chat template) and `served_chat` (the same weights with a
prefix-stable chat template in the tokenizer), and the real `openai` client pointed at it. A
test file imports the fixtures it uses by name; each file gets a gateway of its own."""
from __future__ import annotations

from pathlib import Path

import openai
import pytest
import torch

from flows.config import load_config
from gateway.app import Gateway
from gateway.records import EpisodeLog
from gateway.server import Served
from training import checkpoints
from training.config import PolicyConfig
from training.policy import TOKENIZER_ATTR, build_policy, save_policy
from training.tokenizer import HFTokenizer, byte_tokenizer_hf

ROOT = Path(__file__).resolve().parents[2]
KEY = "test-key-1234"
# A prefix-stable template: a turn's rendering is the previous turn's rendering + the reply +
# the EOS the template closes the reply with + the new message + the generation prompt.
# (Newlines as expressions: transformers renders with trim_blocks, which eats one after a tag.)
TEMPLATE = ("{% for m in messages %}<s>{{ m['role'] }}\n{{ m['content'] }}"
            "{% if m['role'] == 'assistant' %}</s>{% else %}{{ '\\n' }}{% endif %}{% endfor %}"
            "{% if add_generation_prompt %}<s>assistant\n{% endif %}")


def run_at_v0(tmp_path_factory, run_id: str, template: str | None):
    """The tiny config as run `run_id` in a fresh folder, with a freshly initialised policy (seed
    0) published as its version 0; `template`: a chat template for its tokenizer."""
    cfg = load_config(ROOT / "configs/tiny.yaml", [f"run_id={run_id}"])
    cfg = cfg.model_copy(update={"out_dir": str(tmp_path_factory.mktemp("runs"))})
    torch.manual_seed(0)
    model = build_policy(PolicyConfig()).eval()
    if template is not None:  # the byte vocabulary as Hugging Face files, with a chat template
        hf = byte_tokenizer_hf()
        hf.chat_template = template
        setattr(model, TOKENIZER_ATTR, HFTokenizer(hf))
    staging = checkpoints.staging_dir(cfg.run_dir, 0)
    save_policy(model, str(staging / "model"))
    checkpoints.publish(staging, checkpoints.checkpoint_dir(cfg.run_dir, 0), {"version": 0})
    return cfg


def _serve(tmp_path_factory, run_id: str, template: str | None):
    """(server, gateway) on a fresh run's version 0 until the fixture is torn down."""
    cfg = run_at_v0(tmp_path_factory, run_id, template)
    gw = Gateway(cfg, 0, KEY, EpisodeLog(Path(cfg.run_dir) / "gateway"))
    srv = Served(gw)
    yield srv, gw
    srv.stop()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A gateway on the byte-level policy (no chat template)."""
    yield from _serve(tmp_path_factory, "gw", None)


@pytest.fixture(scope="module")
def served_chat(tmp_path_factory):
    """A gateway on the same weights with a chat template in the tokenizer."""
    yield from _serve(tmp_path_factory, "gwchat", TEMPLATE)


def connect(srv, key=KEY, episode=None):
    """The real `openai` client on a served gateway; its requests tagged `episode` if given."""
    headers = {"X-Episode-Id": episode} if episode else None
    return openai.OpenAI(base_url=srv.url, api_key=key, max_retries=0, default_headers=headers)
