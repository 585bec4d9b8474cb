import os
import sys
from pathlib import Path

# Before anything imports Prefect or DeepSpeed: nothing phones home, CPU DeepSpeed, offline HF.
from flows.env import apply_defaults

apply_defaults()
os.environ.setdefault("DS_ACCELERATOR", "cpu")

import pytest  # noqa: E402

SLOW_ENV = "ROLLFORGE_SLOW_TESTS"
SHARED_PREFECT_ENV = "ROLLFORGE_TEST_PREFECT_SERVER"


# The modules that take a minute or more (measured under `make test`'s two workers), longest
# first. xdist's loadfile hands out whole modules in collection order, one to each free worker:
# a long module collected last would leave the other worker idle for its whole length.
LONG_MODULES = ("test_engine_run.py", "test_engine_vllm.py", "test_update_ranks.py",
                "test_clean_stop.py", "test_kind_folders.py", "test_flow_loop.py",
                "test_repo_hacks.py", "test_overlap.py", "test_eval_transfer_cli.py",
                "test_gateway_engine.py", "test_ui_browser.py", "test_verifiers_multiturn.py")


def pytest_collection_modifyitems(config, items):
    """The long modules first (LONG_MODULES), the rest in their order. `slow` tests (minutes
    each, a path that faster tests already cover in parts) run only with ROLLFORGE_SLOW_TESTS=1,
    so `make test` stays short; each says what it adds."""
    rank = {name: i for i, name in enumerate(LONG_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_MODULES)))  # stable
    if os.environ.get(SLOW_ENV):
        return
    skip = pytest.mark.skip(reason=f"slow (minutes): set {SLOW_ENV}=1 to run it")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _shared_prefect_server(tmp_path_factory):
    """With ROLLFORGE_TEST_PREFECT_SERVER=1 (`make test` sets it): one real Prefect server for
    the session (`rollforge server`, loopback), which every flow the tests run talks to through
    PREFECT_API_URL, as an operator's runs talk to theirs, instead of each run starting a
    temporary API of its own (7-10 s a run, about 40 runs). The tests of the temporary API's
    own path (a clean stop, a killed run, the default loop) take PREFECT_API_URL out of their
    runs' environment (tests/integration/prefect_server.py `own_api`); a test that needs a
    server of its own starts one."""
    if not os.environ.get(SHARED_PREFECT_ENV) or os.environ.get("PREFECT_API_URL"):
        yield None
        return
    sys.path.insert(0, str(Path(__file__).parent / "integration"))
    from prefect_server import prefect_server  # noqa: PLC0415

    with prefect_server(tmp_path_factory.mktemp("shared-prefect")) as (base, _env):
        from prefect.context import refresh_global_settings_context  # noqa: PLC0415

        os.environ["PREFECT_API_URL"] = base
        refresh_global_settings_context()
        try:
            yield base
        finally:
            os.environ.pop("PREFECT_API_URL", None)
            refresh_global_settings_context()


@pytest.fixture(scope="session")
def smollm2_dir():
    """SmolLM2-135M-Instruct as `make model` converts it (its real tokenizer and chat template),
    or the test skips, naming what to run."""
    from training import pretrained  # noqa: PLC0415

    path = pretrained.converted_dir("smollm2-135m-instruct")
    if not (path / pretrained.MODEL_FILE).is_file():
        pytest.skip(f"SmolLM2-135M-Instruct is not converted at {path}: run `make model`")
    return path


@pytest.fixture(scope="session")
def worker_step():
    """`play`'s step function for a config, as the loop runs steps on a Dask worker: each batch
    and its results pickled both ways, the steps run in this process (step_local)."""
    import pickle  # noqa: PLC0415

    from flows.episode_exec import step_local  # noqa: PLC0415

    def make(cfg):
        def step(turn, items):
            out = step_local(pickle.loads(pickle.dumps(items)), cfg.sandbox, cfg.rewards)
            return pickle.loads(pickle.dumps(out))
        return step
    return make
