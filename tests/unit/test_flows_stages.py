"""The flow's plain stage logic: cache keys, curriculum wiring, DAPO dropping, the stage journal
and the observability metrics (real sandbox executions, real Parquet store; no Prefect run)."""
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from flows import stages
from flows.config import load_config
from flows.episode_exec import Stepped, step_local
from flows.episodes import Episode, play
from flows.scoring import episode_rows, heldout_metrics
from storage.trajectories import write_shard
from tasks.curriculum import DifficultyLedger
from training.generate import Sample

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cfg():
    return load_config(ROOT / "configs/tiny.yaml")


@pytest.fixture(scope="module")
def train_pool(cfg):
    return [t for t in stages.task_pool(cfg) if t.split == "train"]


def _empty_ledger():
    return DifficultyLedger().to_frame()


def test_stage_cache_key_covers_inputs_and_policy_version_but_not_the_deadline(cfg, train_pool):
    from flows.staging import CODE_VERSION, stage_key

    from envs.registry import env_for_task

    key = stage_key("run_rollouts")
    env = env_for_task(train_pool[0])
    items = [(env, train_pool[0], "    return 1\n")]
    base = dict(cfg=cfg, iteration=3, version=3, round_=0, shard=1, turn=1, items=items,
                deadline_s=60.0)
    k = key(None, base)
    assert k.startswith(f"run_rollouts-{cfg.run_id}-it3-v3-r0-s1-{cfg.hash()}-{CODE_VERSION}-")
    assert key(None, {**base, "deadline_s": 999.0}) == k  # how long we wait is not an input
    assert key(None, {**base, "items": [(env, train_pool[0], "    return 2\n")]}) != k
    assert key(None, {**base, "items": [(env, train_pool[1], "    return 1\n")]}) != k
    assert key(None, {**base, "turn": 2}) != k
    # an environment enters the key by its kind and options, never by its address in memory
    from envs.registry import kind_class
    twin = kind_class("io")(env.config.model_dump())
    assert twin is not env and key(None, {**base, "items": [(twin, *items[0][1:])]}) == k
    other_env = kind_class("io")({**env.config.model_dump(), "n_tests": 3})
    assert key(None, {**base, "items": [(other_env, *items[0][1:])]}) != k
    assert key(None, {**base, "version": 4}) != k
    assert key(None, {**base, "shard": 2}) != k
    other = cfg.model_copy(update={"run_id": "other"})
    assert key(None, {**base, "cfg": other}) != k


def test_input_digest_is_the_same_in_a_fresh_process(cfg, train_pool):
    batch = train_pool[:3]
    ledger = DifficultyLedger.from_trajectories(pd.DataFrame({
        "task_id": [t.task_id for t in batch], "iteration": 0, "reward": [0.0, 0.5, 1.0],
        "pass_fraction": [0.0, 0.5, 1.0], "solved": [False, False, True],
        "family": [t.family for t in batch],
        "difficulty": [t.difficulty for t in batch], "split": "train",
        "group_id": ["0:0", "0:1", "0:2"]})).to_frame()
    here = stages.inputs_digest({"batch": batch, "ledger": ledger, "exclude": ["a", "b"]})
    code = ("from flows import stages\nfrom flows.config import load_config\n"
            "from tasks.curriculum import DifficultyLedger\nimport pandas as pd\n"
            f"cfg = load_config({str(ROOT / 'configs/tiny.yaml')!r})\n"
            "pool = [t for t in stages.task_pool(cfg) if t.split == 'train']\n"
            "batch = pool[:3]\n"
            "ledger = DifficultyLedger.from_trajectories(pd.DataFrame({"
            "'task_id': [t.task_id for t in batch], 'iteration': 0, 'reward': [0.0, 0.5, 1.0],"
            "'pass_fraction': [0.0, 0.5, 1.0], 'solved': [False, False, True],"
            "'family': [t.family for t in batch],"
            "'difficulty': [t.difficulty for t in batch], 'split': 'train',"
            "'group_id': ['0:0', '0:1', '0:2']})).to_frame()\n"
            "print(stages.inputs_digest({'batch': batch, 'ledger': ledger, 'exclude': ['a', 'b']}))")
    there = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                           timeout=120, env={"PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin"})
    assert there.returncode == 0, there.stderr[-2000:]
    assert there.stdout.strip() == here
    assert stages.inputs_digest({"batch": batch[:2], "ledger": ledger}) != here


def test_curriculum_draws_are_seeded_distinct_training_tasks_outside_exclude(cfg, train_pool):
    a = stages.pick_tasks(cfg, 2, 0, 6, _empty_ledger(), [])
    b = stages.pick_tasks(cfg, 2, 0, 6, _empty_ledger(), [])
    assert [t.task_id for t in a] == [t.task_id for t in b]  # a resumed run draws the same
    assert len({t.task_id for t in a}) == 6 and all(t.split == "train" for t in a)
    refill = stages.pick_tasks(cfg, 2, 1, 6, _empty_ledger(), [t.task_id for t in a])
    assert not {t.task_id for t in refill} & {t.task_id for t in a}
    everything = stages.pick_tasks(cfg, 2, 2, 1000, _empty_ledger(), [])
    assert len(everything) == len(train_pool)  # never more than the training split holds


def test_curriculum_favours_sometimes_solved_tasks_and_the_uniform_switch_does_not(cfg, train_pool):
    # every training task was always solved in iteration 0 except one, solved half the time
    mixed = train_pool[5]
    rows = []
    for t in train_pool:
        rewards = [1.0, 0.0, 1.0, 0.0] if t is mixed else [1.0] * 4
        rows += [{"task_id": t.task_id, "iteration": 0, "reward": r, "pass_fraction": r,
                  "solved": r == 1.0, "family": t.family, "difficulty": t.difficulty, "split": "train",
                  "group_id": f"0:{t.task_id}"} for r in rewards]
    ledger = DifficultyLedger.from_trajectories(pd.DataFrame(rows)).to_frame()
    uniform = cfg.model_copy(update={"tasks": cfg.tasks.model_copy(update={"sampler": "uniform"})})
    draws = {"curriculum": 0, "uniform": 0}
    for it in range(1, 41):
        draws["curriculum"] += stages.pick_tasks(cfg, it, 0, 1, ledger, [])[0].task_id == mixed.task_id
        draws["uniform"] += stages.pick_tasks(uniform, it, 0, 1, ledger, [])[0].task_id == mixed.task_id
    # weight = floor 0.02 + P(informative) = 1 - p^4 - (1-p)^4, p the posterior solve rate
    # (prior strength 2 at the level's rate, ~0.98): solved tasks p ~0.99 -> ~0.06 each,
    # the mixed one p ~0.66 -> ~0.82, so it wins ~0.82 / (31 x 0.06 + 0.82) ~ 30% of single
    # draws (~12 of 40); uniformly 1 in 32 (~1.25 of 40)
    assert draws["curriculum"] >= 8, draws
    assert draws["uniform"] <= 4, draws


def _play(tasks, answers, group=4):
    """Episodes of the real io kind, each answered by the next of `answers`, stepped in this
    process in the real sandbox (no cluster)."""
    from envs.registry import env_for_task
    from rewards.aggregate import RewardConfig
    from sandbox.config import SandboxConfig
    from training.tokenizer import ByteTokenizer

    it = iter(answers)

    def sample_fn(turn, contexts, eps, max_new, k):
        return [Sample(list(c), [3, 4], [-0.1, -0.2], next(it), True) for c in contexts], 0.0

    return play(tasks, [env_for_task(t) for t in tasks], group, 10 ** 6, ByteTokenizer(), 16,
                sample_fn, lambda turn, items: step_local(items, SandboxConfig(), RewardConfig()))


@pytest.fixture(scope="module")
def executed_group(train_pool):
    """Two groups of G=4 graded in the real process sandbox: one mixed (two reference
    solutions, two wrong answers), one all wrong."""
    t0, t1 = train_pool[0], train_pool[1]
    wrong = "    return None\n"
    eps = _play([t0, t1], [t0.reference, t0.reference, wrong, wrong] + [wrong] * 4)
    return [t0, t1], eps


def test_dropped_groups_are_the_uniform_ones_and_refills_continue_the_numbering(cfg, executed_group):
    tasks, eps = executed_group
    assert eps[0].grade.solved and not eps[2].grade.solved
    rows = episode_rows(cfg, 0, 0, eps, 4, cfg.hash(), group_offset=3)
    assert [r.group_id for r in rows] == ["0:3"] * 4 + ["0:4"] * 4
    keep = stages.informative_row_mask(rows)
    assert keep.tolist() == [True] * 4 + [False] * 4
    # the dropped group carried no learning signal anyway: its GRPO advantages are all 0
    assert all(r.advantage == 0.0 for r in rows[4:])
    assert rows[0].advantage > 0 > rows[2].advantage
    m = stages.rollout_metrics(rows)
    assert m["rollout/informative_groups"] == 0.5


def test_ledger_comes_from_the_stored_rows_of_earlier_iterations_only(cfg, executed_group, tmp_path):
    tasks, eps = executed_group
    run_dir = str(tmp_path / "run")
    for it in (0, 1):
        write_shard(run_dir, it, 0, episode_rows(cfg, it, it, eps, 4, "h"))
    ledger = stages.ledger_frame(run_dir, 1)
    assert ledger["iteration"].unique().tolist() == [0]
    by_task = ledger.set_index("task_id")
    assert by_task.loc[tasks[0].task_id, "solved"] == 2  # two reference solutions of four
    assert by_task.loc[tasks[1].task_id, "informative_groups"] == 0  # the dropped group counts
    assert len(stages.ledger_frame(run_dir, 2)) == 4 and stages.ledger_frame(run_dir, 0).empty



def test_the_ledger_folded_one_iteration_at_a_time_is_the_ledger_of_all_rows_read_at_once(
        cfg, executed_group, tmp_path):
    """ledger_frame folds each new iteration's rows into the ledger it built before: the result
    must be what one read of every earlier iteration gives, forwards, backwards and after an
    iteration's files are rewritten (other rows under new names)."""
    from rewards.outcome import SOLVED_FACTS, fill_solved
    from storage import trajectories
    from storage.trajectories import write_iteration
    from tasks.curriculum import TRAJECTORY_COLUMNS

    _, eps = executed_group
    run_dir = str(tmp_path / "run")
    columns = list(dict.fromkeys(TRAJECTORY_COLUMNS + SOLVED_FACTS))

    def at_once(before):
        its = [i for i in trajectories.iterations_written(run_dir) if i < before]
        rows = pd.concat([trajectories.open_dataset(run_dir, i).to_table(columns=columns)
                          .to_pandas() for i in its], ignore_index=True)
        return DifficultyLedger.from_trajectories(fill_solved(rows)).to_frame()

    for it in range(4):  # later iterations see the other half of the answers solved
        write_shard(run_dir, it, 0, episode_rows(cfg, it, it, eps[it % 2:] + eps[:it % 2], 4, "h"))
    for before in (1, 2, 3, 4, 2, 4):
        pd.testing.assert_frame_equal(stages.ledger_frame(run_dir, before), at_once(before))
    write_iteration(run_dir, 1, [episode_rows(cfg, 1, 1, eps[:4], 4, "h")])  # a rewrite
    got = stages.ledger_frame(run_dir, 4)
    pd.testing.assert_frame_equal(got, at_once(4))
    assert got[got["iteration"] == 1]["samples"].sum() == 4

def test_journal_appends_one_parsable_line_per_event(tmp_path):
    stages.journal(str(tmp_path), "score", "start", iteration=1, round=0)
    stages.journal(str(tmp_path), "score", "end", iteration=1, round=0, seconds=0.5)
    recs = stages.read_journal(str(tmp_path))
    assert [(r["stage"], r["event"], r["iteration"]) for r in recs] == [
        ("score", "start", 1), ("score", "end", 1)]
    assert json.loads((tmp_path / "stages.jsonl").read_text().splitlines()[1])["seconds"] == 0.5
    with open(tmp_path / "stages.jsonl", "a") as fh:  # a line caught mid-write: not yet a record
        fh.write('{"t": 1.0, "stage": "sco')
    assert stages.read_journal(str(tmp_path)) == recs


def test_execution_metrics_worked_by_hand(executed_group):
    _, eps = executed_group
    ex = [Stepped(e.state, "", True, e.final, 0.5, e.backend) for e in eps[:4]]
    q = [{"queued": 6, "processing": 2, "unrunnable": 0, "workers": 2, "threads": 2},
         {"queued": 0, "processing": 2, "unrunnable": 0, "workers": 1, "threads": 1}]
    m = stages.execution_metrics(ex, wall_s=2.0, threads=2, queue_samples=q)
    # 4 rollouts in 2 s; 4 x 0.5 busy sandbox-seconds of 2 s x 2 threads offered
    assert m["rollout/per_s"] == 2.0
    assert m["sandbox/utilisation"] == 0.5
    assert m["cluster/queued_max"] == 6 and m["cluster/queued_mean"] == 3.0
    assert m["cluster/workers_min"] == 1
    assert "cluster/queued_max" not in stages.execution_metrics(ex, 2.0, 2, [])
    # a stage whose shards all came from the cache executed nothing: no figure, never one > 1
    cached = stages.execution_metrics([], wall_s=0.01, threads=2, queue_samples=[])
    assert math.isnan(cached["sandbox/utilisation"]) and math.isnan(cached["rollout/per_s"])
    # a worker that joined midway offered its slot too: the most threads seen are the slots
    joined = stages.execution_metrics(ex, 2.0, 1, [dict(q[0], threads=2)])
    assert joined["sandbox/utilisation"] == 0.5 and joined["cluster/threads"] == 2
    assert math.isclose(m["sandbox/busy_s"], 2.0)
    assert np.isfinite(m["cluster/processing_mean"])


def test_every_stage_has_retries_with_exponential_backoff_and_a_deadline():
    from flows import iteration as it

    for s in (it.sft_stage, it.generate_tasks, it.sample_completions, it.run_rollouts,
              it.score_rollouts, it.write_trajectories, it.update_policy, it.checkpoint):
        assert s.retries >= 1, s.name
        assert s.retry_delay_seconds == [2, 4, 8][:s.retries], s.name  # 2 s, doubling
        assert s.persist_result and s.cache_key_fn is not None, s.name
        # shards run in threads, where Prefect cannot interrupt them: they carry their own
        # deadline into step_many (see test_hung_rollout_shard_is_cancelled_at_its_deadline)
        assert s.timeout_seconds or s.name == "run_rollouts", s.name
    assert "deadline_s" in it.run_rollouts.fn.__wrapped__.__code__.co_varnames


@pytest.mark.integration
@pytest.mark.timeout(300, method="thread")  # pytest-timeout's signal method would own SIGALRM
def test_a_hung_stage_is_interrupted_at_its_deadline_and_retried(cfg, tmp_path):
    """A real Prefect run (temporary API): a stage built like the flow's, that hangs, is cut
    off by its deadline, retried after the backoff, cut off again, and the flow fails.
    Prefect interrupts a stage the flow calls directly with SIGALRM (main thread, no other
    alarm handler installed: as under `rollforge run` and `rollforge serve`)."""
    import time as _time

    from prefect import flow
    from prefect.testing.utilities import prefect_test_harness

    from flows.staging import pipeline_stage

    @pipeline_stage("hang_probe", retries=1, timeout_s=1)
    def hang(cfg, iteration: int) -> int:
        _time.sleep(60)
        return 1

    @flow
    def probe(cfg):
        return hang(cfg, 0)

    run_cfg = cfg.model_copy(update={"out_dir": str(tmp_path)})
    with prefect_test_harness(server_startup_timeout=180):
        t0 = _time.monotonic()  # after the server's start, which may take long on a busy machine
        state = probe(run_cfg, return_state=True)
        took = _time.monotonic() - t0
    assert state.is_failed()
    recs = stages.read_journal(run_cfg.run_dir)
    assert [r["event"] for r in recs] == ["start", "failed", "start", "failed"]
    assert [r["error"] for r in recs if r["event"] == "failed"] == [
        "deadline of 1 s passed (CancelledError: )"] * 2
    gap = recs[2]["t"] - recs[1]["t"]
    assert 1.5 <= gap < 30  # the 2 s backoff (20% jitter), then the retry
    assert took < 60  # two 1 s deadlines and a 2 s backoff, never the stage's 60 s


def test_heldout_pass_rates_leave_out_samples_the_sandbox_could_not_score():
    import math as _m

    from envs.io.procedural import generate_suite
    from envs.registry import env_for_task
    from rewards.aggregate import RewardBreakdown
    from training.episodes import EpisodeTokens

    task = generate_suite(["add"], [1], 1)[0].model_copy(update={"source": "procedural"})

    def ep(reward, infra):
        b = RewardBreakdown(reward, 1.0 if reward == 1.0 else 0.0, 6 if reward == 1.0 else 0, 6,
                            ("passed",) * 6, "ok", None, (), infra, 0.01)
        return Episode(task, env_for_task(task), 0, task, task.prompt, EpisodeTokens([1]),
                       final={"grade": b, "end_reason": "answer"})

    rates = heldout_metrics([task], [ep(1.0, False)], [ep(1.0, False), ep(_m.nan, True),
                                                        ep(0.0, False)])
    # 1 of the 2 scored samples, not 1 of 3; by family and by source alike
    assert rates["heldout/pass_sampled"] == rates["heldout/add/pass_sampled"] == 0.5
    assert rates["heldout/source/procedural/pass_sampled"] == 0.5
    assert rates["heldout/pass_greedy"] == 1.0 and rates["heldout/source/procedural/tasks"] == 1


def test_a_stage_input_that_cannot_be_hashed_by_value_is_refused_naming_its_type(executed_group):
    class Opaque:  # its repr holds a memory address: another cache key in every process
        pass

    with pytest.raises(TypeError, match=r"test_flows_stages.*Opaque.*cannot be hashed"):
        stages.inputs_digest({"batch": [Opaque()]})
    _, eps = executed_group  # what the stages are really handed hashes by value
    assert stages.inputs_digest(eps, np.arange(3), np.float32(0.5)) == \
        stages.inputs_digest(eps, np.arange(3), np.float32(0.5))


def test_an_object_many_inputs_share_hashes_as_its_copies_do(executed_group):
    """The digest walks a shared object (a task and its environment in every episode of its
    group) once; the key is the one equal copies give, and a changed copy still changes it."""
    import copy  # noqa: PLC0415

    _, eps = executed_group
    apart = [copy.deepcopy(e) for e in eps]  # nothing shared between them any more
    assert eps[0].task is eps[1].task and apart[0].task is not apart[1].task
    assert stages.inputs_digest(eps) == stages.inputs_digest(apart)
    apart[1].task = apart[1].task.model_copy(update={"prompt": apart[1].task.prompt + " "})
    assert stages.inputs_digest(eps) != stages.inputs_digest(apart)


def test_code_version_tells_apart_a_moved_file_and_two_files_of_one_name(tmp_path):
    def tree(name: str, files: dict[str, str]) -> str:
        root = tmp_path / name
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        return stages.code_version(root)

    here = tree("a", {"flows/x.py": "A = 1\n", "tasks/util.py": "B = 2\n"})
    moved = tree("b", {"flows/sub/x.py": "A = 1\n", "tasks/util.py": "B = 2\n"})
    swapped = tree("c", {"flows/util.py": "B = 2\n", "tasks/x.py": "A = 1\n"})
    assert len({here, moved, swapped}) == 3
    assert tree("d", {"flows/x.py": "A = 1\n", "tasks/util.py": "B = 2\n"}) == here


def test_a_stage_whose_product_is_gone_runs_again_instead_of_a_cache_hit(cfg, tmp_path):
    """A real Prefect run: the stage writes a file; called again, it is a cache hit while the
    file is there, and runs again once the file is gone (a stored result that says it wrote
    it is not the file). The first call passes its inputs by position and the named call
    after it is a hit: the key reads the inputs by name, so how a call spells them does not
    change it."""
    from pathlib import Path as _P

    from prefect import flow
    from prefect.testing.utilities import prefect_test_harness

    from flows.staging import pipeline_stage, call_stage

    run_cfg = cfg.model_copy(update={"out_dir": str(tmp_path)})
    made = _P(run_cfg.run_dir) / "product.txt"
    opts = {"result_storage": tmp_path / "results"}  # as train_flow: the run's own

    @pipeline_stage("product_probe", retries=0, timeout_s=None,
            product=lambda p: (_P(p["cfg"].run_dir) / "product.txt").exists())
    def make(cfg, iteration: int) -> str:
        made.write_text("made")
        return "made"

    @flow
    def probe(cfg):
        out = [make.with_options(**opts)(cfg, 0),  # run
               call_stage(make, opts, cfg=cfg, iteration=0)]  # hit
        made.unlink()
        return out + [call_stage(make, opts, cfg=cfg, iteration=0)]  # gone: runs again

    with prefect_test_harness(server_startup_timeout=180):
        assert probe(run_cfg) == ["made"] * 3
    starts = [r for r in stages.read_journal(run_cfg.run_dir) if r["event"] == "start"]
    assert len(starts) == 2 and made.read_text() == "made"


@pytest.mark.parametrize("stage, params, version", [
    ("update_policy", {"iteration": 0, "version": 2, "rows": []}, 3),
    ("sft_stage", {"version": 0}, 0),
])
def test_the_checkpoint_writing_stages_name_their_checkpoint_as_their_product(
        cfg, tmp_path, stage, params, version):
    from flows import iteration
    from training.checkpoints import checkpoint_dir

    run_cfg = cfg.model_copy(update={"out_dir": str(tmp_path)})
    product = getattr(iteration, stage).product
    assert not product({"cfg": run_cfg, **params})
    ckpt = checkpoint_dir(run_cfg.run_dir, version)
    ckpt.mkdir(parents=True)
    (ckpt / "meta.json").write_text("{}")
    assert product({"cfg": run_cfg, **params})


def test_the_warm_starts_probe_is_withheld_from_its_data_and_never_a_held_out_task():
    cfg = load_config("configs/default.yaml")
    assert cfg.sft.until_pass is not None  # the default run trains until its probe passes
    tasks = [t for _, ts in stages.sft_data(cfg) for t in ts]
    probe, rest = stages.probe_split(tasks, cfg.sft.probe_tasks)
    again, _ = stages.probe_split(list(reversed(tasks)), cfg.sft.probe_tasks)
    assert [t.prompt for t in probe] == [t.prompt for t in again]  # by hash, not by position
    assert len({t.prompt for t in probe}) == len(probe) == cfg.sft.probe_tasks
    assert not {t.prompt for t in probe} & {t.prompt for t in rest}
    gone = {t.prompt for t in probe}
    assert len(rest) == sum(t.prompt not in gone for t in tasks)  # every copy of a probe prompt
    held = {t.prompt for t in stages.heldout_tasks(cfg)}
    assert not held & {t.prompt for t in probe}
    assert len({t.family for t in probe}) > 4  # spread over the families with references


def test_a_probe_without_generic_names_holds_only_family_named_tasks_and_trains_on_the_rest():
    from envs.io.procedural import GENERIC_NAMES  # noqa: PLC0415

    cfg = load_config("configs/default.yaml", ["tasks.sft_generic_names=0.25"])
    tasks = [t for _, ts in stages.sft_data(cfg) for t in ts]
    mixed, _ = stages.probe_split(tasks, 64)
    assert any(t.entry_point in GENERIC_NAMES for t in mixed)  # so the choice changes something
    probe, rest = stages.probe_split(tasks, 64, generic_names=False)
    assert len(probe) == 64 and not any(t.entry_point in GENERIC_NAMES for t in probe)
    generic = [t for t in tasks if t.entry_point in GENERIC_NAMES]
    assert generic and {t.prompt for t in generic} <= {t.prompt for t in rest}  # all trained on
    assert not {t.prompt for t in probe} & {t.prompt for t in rest}


def test_the_summary_says_how_a_warm_start_until_a_criterion_ended():
    from flows.report import warm_start_line  # noqa: PLC0415

    line = warm_start_line({"sft/probe_pass": 0.84, "sft/steps": 1100, "sft/criterion_met_at": 800,
                            "sft/decay_from": 800, "sft/probe_tasks": 64})
    assert line == ["warm start: 1100 steps (criterion met at step 800); greedy pass of its 64 "
                    "probe tasks at the end 0.840"]
    assert "not met, decayed from step 1700" in warm_start_line(
        {"sft/probe_pass": 0.1, "sft/steps": 2000, "sft/criterion_met_at": math.nan,
         "sft/decay_from": 1700, "sft/probe_tasks": 64})[0]
    assert warm_start_line({"sft/reused": True}) == []


def test_collected_timed_adds_stage_seconds_under_the_metric_names_and_leaves_the_original():
    from flows.iteration import Collected

    col = Collected(rows=[], train_rows=[], episodes=[], stepped=[], queue=[], rounds=1,
                    kept_groups=0, first_share=math.nan, timings={"time/sample_s": 0.5},
                    sampled_with=0)
    later = col.timed(update_policy=1.5, update_wait=0.25)
    assert later.timings == {"time/sample_s": 0.5, "time/update_policy_s": 1.5,
                             "time/update_wait_s": 0.25}
    assert col.timings == {"time/sample_s": 0.5}
