"""The Prefect UI as an operator uses it, in a real browser: Debian's chromium, headless,
driven by Playwright, against a real Prefect server (UI on) with `rollforge serve` (tiny
config, no schedules). The train deployment's custom-run form shows the typed config filled
from the file; two fields are changed (iterations, rl.lr), the run is submitted from the form,
runs to completion with exactly those values, and its artifacts render: the metrics table with
a row per iteration and the reward-curve image loaded. Screenshots are kept under the test's
tmp folder and copied to $ROLLFORGE_TEST_ARTIFACTS when set."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prefect_server import ROOT, api, final_state, prefect_server, rollforge_serve, wait

# About 2 minutes on a quiet 2-core machine; the SFT start alone took 220 s at load 10, so
# every wait is generous and polls for the state it needs.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(720)]
CHROMIUM = os.environ.get("ROLLFORGE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update"]
STATUS = Path(os.environ.get("ROLLFORGE_BROWSER_LOG_DIR", "/tmp/rollforge-browser")) / "status"
ITERATIONS, LR = 3, 0.001  # tiny.yaml has 2 and 3e-4: both differ from the form's defaults
UI_TIMEOUT_MS = 60_000  # a loaded 2-core machine renders the long form slowly


@pytest.fixture(scope="module")
def sync_playwright():
    """Playwright's entry point; the browser set-up runs first if a part is missing, and the
    test skips with its reason only when that set-up could not install it."""
    def present() -> bool:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            return False
        return os.access(CHROMIUM, os.X_OK)

    if not present():
        subprocess.run(["bash", str(ROOT / "scripts/setup_browser.sh")], check=False)
        if not present():
            reason = STATUS.read_text().strip() if STATUS.is_file() else "unknown"
            pytest.skip(f"no headless browser: {reason} (scripts/setup_browser.sh)")
    from playwright.sync_api import sync_playwright
    return sync_playwright


def _shot(page, shot: Path) -> Path:
    """A screenshot, also copied to $ROLLFORGE_TEST_ARTIFACTS when set; its path printed."""
    page.screenshot(path=shot)
    print(f"screenshot: {shot}")
    if os.environ.get("ROLLFORGE_TEST_ARTIFACTS"):
        dest = Path(os.environ["ROLLFORGE_TEST_ARTIFACTS"]) / f"ui-{shot.name}"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, dest)
        print(f"screenshot: {dest}")
    return shot


def _property(scope, title: str):
    """A field (or section) of Prefect's schema form, by the title it shows."""
    label = f'.schema-form-property__label:text-is("{title} (Optional)")'
    return scope.locator(f".schema-form-property:has(> .p-label__header {label})").first


def _input(scope, title: str):
    return _property(scope, title).locator(":scope > .p-label__body").locator(
        "input, textarea").first


def _artifacts_tab(page, base_ui: str, run_id: str, tries: int = 3) -> None:
    """The flow run's page on its Artifacts tab, once the artifact cards show. A click on the
    tab before the page has settled can leave the other tab shown (seen once in CI, the run
    completed and its artifacts in the API): the page is loaded again, as a user would."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout  # noqa: PLC0415

    for attempt in range(tries):
        page.goto(f"{base_ui}/runs/flow-run/{run_id}", timeout=UI_TIMEOUT_MS)
        page.wait_for_load_state("networkidle")
        page.locator("li.p-tab#artifacts").click()
        try:
            page.locator(".artifact-card__title").first.wait_for(timeout=40_000)
            return
        except PlaywrightTimeout:
            if attempt == tries - 1:
                raise


def _open_artifact(page, base_ui: str, run_id: str, key: str, last: int):
    """From the flow run's Artifacts tab, the artifact `key` published after the last
    iteration (each iteration publishes a new version of it)."""
    _artifacts_tab(page, base_ui, run_id)
    page.locator(f"a:has(.artifact-card__title:text-is('{key}'))").filter(
        has_text=f"after iteration {last}").click()
    page.wait_for_url("**/artifacts/artifact/**", timeout=UI_TIMEOUT_MS)


def test_custom_run_from_the_ui_form_completes_and_its_artifacts_render(
        sync_playwright, tmp_path):
    out = tmp_path / "runs"
    shots = tmp_path / "screenshots"
    shots.mkdir()
    home = tmp_path / "prefect-home"
    home.mkdir()
    with prefect_server(home, ui=True) as (base, env), rollforge_serve(
            env, tmp_path / "serve.log", "--config", "configs/tiny.yaml", "--no-schedules",
            "--set", f"out_dir={out}") as serve:
        base_ui = base.removesuffix("/api")
        train = wait("the train deployment", lambda: api(
            base, "GET", "/deployments/name/rollforge-train/train"), 120, [serve])
        defaults = train["parameters"]["config"]
        assert (defaults["iterations"], defaults["rl"]["lr"]) == (2, 3e-4)

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                        args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.set_default_timeout(UI_TIMEOUT_MS)
                page.goto(f"{base_ui}/deployments/deployment/{train['id']}/run")
                # the form fills itself from several API calls; a loaded machine answers slowly
                page.wait_for_load_state("networkidle")
                iterations = _input(page, "Iterations")
                rl = _property(page, "Rl")
                lr = _input(rl, "Lr")
                # the form is the config: filled from the file, described, enums as choices
                assert iterations.input_value() == "2" and float(lr.input_value()) == 3e-4
                assert "learning rate of the RL update" in rl.inner_text()
                algorithm = _property(rl, "Algorithm")
                assert algorithm.locator(".p-select").inner_text().strip() == "grpo"  # a choice
                iterations.fill(str(ITERATIONS))
                iterations.scroll_into_view_if_needed()
                _shot(page, shots / "form-iterations.png")
                lr.fill(str(LR))
                lr.scroll_into_view_if_needed()
                _shot(page, shots / "form-rl-lr.png")
                lr.press("Tab")  # the form takes a typed value on blur, as a user's next click does
                page.wait_for_load_state("networkidle")
                for attempt in range(3):
                    with page.expect_response(lambda r: r.url.endswith("/create_flow_run")) as made:
                        page.get_by_role("button", name="Submit").click()
                    run = made.value.json()
                    # A server error (SQLite busy under load, while `serve` registers its
                    # deployments) is what a user answers by submitting again; anything else,
                    # a refused parameter above all, fails here with the server's answer.
                    if made.value.status < 500 or attempt == 2:
                        break
                    page.wait_for_timeout(2000)
                assert made.value.ok and "parameters" in run, (made.value.status, run)
                sent = run["parameters"]["config"]
                assert (sent["iterations"], sent["rl"]["lr"]) == (ITERATIONS, LR)

                state = final_state(base, run["id"], 540, [serve])
                assert state == "COMPLETED", (tmp_path / "serve.log").read_text()[-4000:]
                resolved = yaml.safe_load((out / "tiny" / "config.yaml").read_text())
                assert (resolved["iterations"], resolved["rl"]["lr"]) == (ITERATIONS, LR)

                _artifacts_tab(page, base_ui, run["id"])
                _shot(page, shots / "run-artifacts.png")

                _open_artifact(page, base_ui, run["id"], "rollforge-tiny-metrics", ITERATIONS - 1)
                rows = page.locator("table tbody tr")
                rows.nth(ITERATIONS - 1).wait_for()
                firsts = [rows.nth(i).locator("td").first.inner_text().strip()
                          for i in range(rows.count())]
                assert firsts == [str(i) for i in range(ITERATIONS)]
                _shot(page, shots / "metrics-table.png")

                _open_artifact(page, base_ui, run["id"], "rollforge-tiny-reward-curve",
                               ITERATIONS - 1)
                img = page.locator("img[src^='data:image/png']").first
                img.wait_for()
                page.wait_for_function("e => e.complete && e.naturalWidth > 0",
                                       arg=img.element_handle())
                assert img.evaluate("e => e.naturalWidth") > 0
                _shot(page, shots / "reward-curve.png")
            finally:
                browser.close()
