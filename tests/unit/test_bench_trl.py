"""The TRL benchmark's pieces that must agree with rollforge for the comparison to hold: the
reward TRL's side computes, the prompt ids both sides feed the model, and the rollforge config
having TRL's shapes. (The benchmark itself is bench/bench_trl.py; it prints, it asserts nothing.)"""
import json
import subprocess
import sys
from pathlib import Path

from bench import trl_side, trl_workload
from flows.config import load_config
from training.tokenizer import ByteTokenizer

ROOT = Path(__file__).resolve().parents[2]
PROMPT = 'def affine(x):\n    """Return x times 2 plus 5.\n    >>> affine(1)\n    7\n    """\n'
TESTS = [{"args": [0], "expected": 5}, {"args": [3], "expected": 11}, {"args": [-1], "expected": 3}]


def test_trl_side_reward_is_the_fraction_of_tests_passed_in_a_fresh_interpreter():
    assert trl_side.run_tests(PROMPT + "    return x * 2 + 5\n", "affine", TESTS) == 1.0
    assert trl_side.run_tests(PROMPT + "    return 5 if x == 0 else 0\n", "affine", TESTS) == 1 / 3
    assert trl_side.run_tests(PROMPT + "    return x * 2 +\n", "affine", TESTS) == 0.0  # syntax
    assert trl_side.run_tests(PROMPT + "    raise ValueError\n", "affine", TESTS) == 0.0


def test_trl_side_reward_counts_a_bool_or_float_as_wrong_where_an_int_is_expected():
    assert trl_side.run_tests(PROMPT + "    return float(x * 2 + 5)\n", "affine", TESTS) == 0.0
    assert trl_side.run_tests(PROMPT + "    return True\n", "affine",
                              [{"args": [0], "expected": 1}]) == 0.0


def test_both_sides_encode_a_prompt_to_the_same_ids():
    hf = trl_workload.hf_byte_tokenizer()
    assert hf(PROMPT)["input_ids"] == ByteTokenizer().encode_prompt(PROMPT)
    assert hf.decode(ByteTokenizer().encode("    return x\n", bos=False) + [258],
                     skip_special_tokens=True) == "    return x\n"


def test_rollforge_config_of_the_bench_has_trls_shapes(tmp_path):
    out = tmp_path / "t.jsonl"
    subprocess.run([sys.executable, "-m", "flows.cli", "tasks", "export", "--families", "affine",
                    "--per-family", "2", "--split", "train", "--out", str(out)],
                   cwd=ROOT, check=True, capture_output=True)
    task = json.loads(out.read_text().splitlines()[0])
    cfg = load_config(ROOT / "bench" / "trl_workload.yaml", [
        "tasks.sources=" + json.dumps([{"file": str(out)}])])
    assert task["family"] == "affine"
    assert (cfg.sampling.group_size, cfg.tasks.tasks_per_iteration, cfg.sampling.max_new_tokens) \
        == (8, 8, 32)
    assert (cfg.rl.lr, cfg.rl.epochs, cfg.rl.kl_coef, cfg.rl.replay_coef, cfg.sft.steps) \
        == (1e-4, 1, 0.0, 0.0, 0)
    assert not cfg.tasks.dynamic_sampling and cfg.rl.micro_batch_size == 64


def _sitting(per_core: float, burners: int = 0) -> dict:
    from bench import bench_trl

    step = {"step_s": 1.0, "generate_s": 0.3, "reward_s": 0.4, "forward_s": 0.1,
            "backward_s": 0.1, "other_s": 0.1, "mean_reward": 0.0, "trained": True}
    it = {f"{p}_s": 0.1 for p in bench_trl.RF_PARTS} | {
        "iteration_s": 2.0, "wall_s": 2.0, "train_s": 0.2, "sequences": 64, "trained": True,
        "update_rest_s": 0.0, "mean_reward": 0.0, "bodies": {}}
    return {"workload": {"warm_start": {}}, "burners": burners, "threads": None,
            "trl": [{"steps": [step | {"t_end": float(i)} for i in range(3)], "trl": "x",
                     "torch": "x", "torch_threads": 2, "transformers": "x"}],
            "rollforge": [{"iterations": [it] * 3}], "order": [],
            "same": [{"steps": 3, "as_trained": [{"train_s": 0.05, "sequences": 16}] * 3,
                      "every_sequence": [{"train_s": 0.25, "sequences": 64}] * 3}],
            "load_start": "", "load_end": "", "others_before": 0.1, "others_during": per_core}


def test_the_report_prints_ratios_only_for_a_quiet_sitting_or_a_marked_loaded_one():
    from bench.bench_trl import report

    quiet = report(_sitting(0.2))
    assert "2.00x" in quiet and "quiet sitting" in quiet
    busy = report(_sitting(1.5))
    assert "NOT QUIET" in busy and "2.00x" not in busy
    assert "2.00x" in report(_sitting(1.5), allow_load=True)
    loaded = report(_sitting(1.5, burners=2))  # the loaded sitting is labelled, not refused
    assert "2.00x" in loaded and "LOADED sitting: 2" in loaded


def test_others_cpu_is_the_machines_busy_time_less_the_benchmarks_own(monkeypatch):
    import subprocess as sp

    from bench import bench_trl

    busy0, own0 = bench_trl.busy_s()
    sp.run([sys.executable, "-c", "import time\nt=time.process_time()\n"
            "while time.process_time()-t<1: pass"], check=True)
    busy1, own1 = bench_trl.busy_s()
    # a child's CPU is the benchmark's own, and the machine saw it busy
    assert own1 - own0 >= 0.9 and busy1 - busy0 >= 0.9
    clock = {"busy": 100.0, "own": 10.0, "t": 0.0}
    monkeypatch.setattr(bench_trl, "busy_s", lambda: (clock["busy"], clock["own"]))
    monkeypatch.setattr(bench_trl.time, "monotonic", lambda: clock["t"])
    monkeypatch.setattr(bench_trl.os, "cpu_count", lambda: 2)
    o = bench_trl.Others().start()
    clock.update(busy=106.0, own=14.0, t=4.0)  # 6 s busy in 4 s, 4 of them ours
    assert o.per_core() == 2.0 / 4.0 / 2


def test_the_report_says_which_of_issue_41s_targets_a_sitting_meets():
    from bench.bench_trl import report

    quiet = report(_sitting(0.2)).splitlines()
    line = lambda start: next(x for x in quiet if x.strip().startswith(start))  # noqa: E731
    # the fake sitting: iteration 2.0 s against a 1.0 s step, sampling 0.1 against 0.3, the
    # update's rest 0.0 s, bookkeeping 2.0 - 0.1 - 0.1 - 0.1 = 1.7 s, training 0.2 s / 64
    # sequences against TRL's 0.2 s / 64; on TRL's own batches 0.05 s (16 sequences run) and
    # 0.25 s (all 64)
    assert line("iteration / TRL step").split()[-2:] == ["NOT", "MET"]
    assert "2.000x" in line("iteration / TRL step")
    assert line("sampling /").endswith(" met") and "0.333x" in line("sampling /")
    assert line("update beyond").endswith(" met")
    assert "1.700 s" in line("bookkeeping") and line("bookkeeping").endswith("NOT MET")
    assert "0.250x" in line("training on TRL's") and line("training on TRL's").endswith(" met")
    assert "1.250x" in line("the same, every") and line("the same, every").endswith("NOT MET")
    same = quiet[quiet.index(next(x for x in quiet if x.startswith("training on the same"))):]
    assert "2 steps (each run's first left out)" in same[0]
    assert line("rollforge, as it trains").split()[-3:] == ["0.050", "3.125", "0.25x"]
    assert line("rollforge, every sequence").split()[-3:] == ["0.250", "3.906", "1.25x"]
    assert line("TRL forward + backward (64").split()[-2:] == ["0.200", "3.125"]
    assert not any("targets" in x for x in report(_sitting(1.5)).splitlines())  # not quiet


def test_train_same_runs_the_flows_update_on_given_batches_each_way(tmp_path):
    """bench/train_same.py on two tiny batches: as rollforge trains them only the rows whose
    advantage is not 0 run; every row runs in the other way; a bad way is a usage error."""
    from bench import trl_workload

    init = trl_workload.build_init(tmp_path)
    (tmp_path / "warm").symlink_to(init)
    prompt = list(b"Return x.")
    batches = [[{"prompt_ids": [257, *prompt], "completion_ids": [100 + i, 258],
                 "advantage": a} for i, a in enumerate(adv)]
               for adv in ([1.0, -1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.5])]
    (tmp_path / "b.json").write_text(json.dumps(batches))
    cmd = [sys.executable, str(ROOT / "bench" / "train_same.py"), "--work", str(tmp_path),
           "--batches", str(tmp_path / "b.json"), "--out", str(tmp_path / "r.json")]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads((tmp_path / "r.json").read_text())
    assert [s["sequences"] for s in res["as_trained"]] == [2, 1]
    assert [s["sequences"] for s in res["every_sequence"]] == [4, 4]
    assert all(s["train_s"] > 0 for s in res["every_sequence"])
    bad = subprocess.run(cmd + ["--ways", "fast"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "unknown way" in bad.stderr
    missing = subprocess.run([*cmd[:5], str(tmp_path / "none.json"), *cmd[6:]], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "cannot read the batches file" in missing.stderr
