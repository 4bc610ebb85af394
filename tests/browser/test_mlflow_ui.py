"""The MLflow UI of the deployment's tracking server after the tiny GRPO + VSR sweep ran
through Airflow (tests/support/live_services.py): the page `rlvr ui` points at opens on the sweep's
runs with readable names, and the compare page of the two training runs shows the method
difference and both training curves; the sweep's own run shows the results table and the winner;
the training runs' Models column holds their registered policies."""
from __future__ import annotations

import json
import re
import subprocess

import pytest
from playwright.sync_api import expect

from live_services import REPO, RLVR

CURVE = "response/length_mean"   # changes every step; early in the (virtualised, alphabetical) metrics table
CELL_RUNS = ("prepare_data", "pretrain tiny", "filter_hard tiny", "seed_prefixes tiny",
             "train tiny grpo s0", "train tiny vsr s0", "evaluate tiny grpo s0", "evaluate tiny vsr s0",
             "evaluate tiny base", "tokens tiny", "tables tiny")


@pytest.fixture(scope="module")
def mlflow(services_sweep):
    from mlflow import MlflowClient
    c = MlflowClient(tracking_uri=services_sweep.services.mlflow)
    exp = c.get_experiment_by_name(services_sweep.name)
    assert exp is not None, f"no experiment {services_sweep.name} on {services_sweep.services.mlflow}"
    return c, exp.experiment_id


def test_runs_page_lists_readable_names(services_sweep, mlflow, page, shots):
    _, exp_id = mlflow
    r = subprocess.run(RLVR + ["ui", services_sweep.name], cwd=REPO, env=services_sweep.services.env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    url = r.stdout.strip().splitlines()[-1]   # the server is up: rlvr ui prints the URL and returns
    assert url == f"{services_sweep.services.mlflow}/#/experiments/{exp_id}/runs?workflowType=machine_learning"
    page.goto(url)
    _close_assistant(page)
    sweep_links = page.get_by_role("link", name=re.compile(rf"^sweep {services_sweep.name} "))
    expect(sweep_links.first).to_be_visible()
    assert "/runs" in page.url and "overview" not in page.url   # not the GenAI overview
    page.set_viewport_size({"width": 1600, "height": 1800})   # every row rendered (the grid virtualises)
    sweep_rows = page.locator('[role="row"]').filter(has=sweep_links)
    for i in reversed(range(sweep_rows.count())):   # open each sweep run's stage runs, last first
        sweep_rows.nth(i).locator("button").first.click()
    for name in CELL_RUNS:
        expect(page.get_by_role("link", name=name, exact=True).first).to_be_visible()
    trains = mlflow[0].search_runs([exp_id], "tags.`rlvr.stage` = 'train'")
    for run in trains:   # the Models column: the policy's registered version, as in the registry
        # the grid draws a row as several row elements (pinned name, scrolled cells) sharing its row-id
        cells = page.locator(f'[role="row"][row-id="{run.info.run_id}"]')
        registered = f"{services_sweep.name}.tiny.{run.data.tags['rlvr.method']}"
        expect(cells.filter(has_text=registered).first).to_be_visible()
    assert {r.data.tags["rlvr.method"] for r in trains} == {"grpo", "vsr"}
    page.screenshot(path=str(shots / "mlflow-runs.png"), full_page=True)
    print(f"screenshot: {shots / 'mlflow-runs.png'}")


def test_compare_grpo_and_vsr_training_runs(services_sweep, mlflow, page, shots):
    c, exp_id = mlflow
    runs = c.search_runs([exp_id], "tags.`rlvr.stage` = 'train' and attributes.status = 'FINISHED'",
                         order_by=["attributes.start_time DESC"])
    by_method = {}
    for r in runs:
        by_method.setdefault(r.data.tags["rlvr.method"], r)
    grpo, vsr = by_method["grpo"], by_method["vsr"]
    for r in (grpo, vsr):   # a curve, not a point
        assert len(c.get_metric_history(r.info.run_id, CURVE)) >= 2
    ids = [grpo.info.run_id, vsr.info.run_id]
    page.set_viewport_size({"width": 1600, "height": 3000})   # the metrics table is virtualised too
    page.goto(f"{services_sweep.services.mlflow}/#/compare-runs?runs={json.dumps(ids)}&experiments={json.dumps([exp_id])}")
    expect(page.get_by_text("Comparing 2 Runs")).to_be_visible()
    _close_assistant(page)
    for name in ("train tiny grpo s0", "train tiny vsr s0"):
        expect(page.get_by_text(name, exact=True).first).to_be_visible()
    method = page.locator("tr", has=page.get_by_text("train.method", exact=True))
    expect(method).to_contain_text("grpo")
    expect(method).to_contain_text("vsr")
    page.get_by_text("Show diff only").first.click()   # the params that differ: the method, not the seed
    expect(method).to_be_visible()
    expect(page.locator("tr", has=page.get_by_text("train.seed", exact=True))).to_have_count(0)
    page.screenshot(path=str(shots / "mlflow-compare.png"), full_page=True)

    # follow the metric link's own address (a click can land while the table re-renders)
    link = page.get_by_role("link", name=CURVE, exact=True)
    href = link.get_attribute("href")
    assert href and "metric" in href, href
    page.goto(href if href.startswith("http") else f"{services_sweep.services.mlflow}/{href.lstrip('/')}")
    for name in ("train tiny grpo s0", "train tiny vsr s0"):
        expect(page.get_by_text(f"{name} ({CURVE})")).to_be_visible()
    lines = page.locator(".js-plotly-plot .scatterlayer .trace path.js-line")
    expect(lines.first).to_be_visible()
    # the plot's own traces: each run's curve through all its points. Colours are not compared:
    # MLflow picks a run's colour from its id, and two runs can draw the same one.
    traces = page.locator(".js-plotly-plot").first.evaluate(
        "gd => gd.data.map(t => [t.name || '', (t.x || []).length])")
    for name, r in (("train tiny grpo s0", grpo), ("train tiny vsr s0", vsr)):
        points = len(c.get_metric_history(r.info.run_id, CURVE))
        assert any(name in trace and n == points for trace, n in traces), (name, points, traces)
    polylines = lines.evaluate_all("ps => ps.filter(p => (p.getAttribute('d') || '').includes('L')).length")
    assert polylines >= 2, polylines
    page.screenshot(path=str(shots / "mlflow-compare-curves.png"), full_page=True)
    print(f"screenshots: {shots / 'mlflow-compare.png'}, {shots / 'mlflow-compare-curves.png'}")


def test_sweep_run_page_shows_the_table_and_the_winner(services_sweep, mlflow, page, shots):
    """The sweep's parent run: its description (rendered Markdown) is the results table headed
    by the winning method, and the winner's headline metric is one of the run's metrics."""
    c, exp_id = mlflow
    found = c.search_runs([exp_id], f"tags.`rlvr.airflow_run` = '{services_sweep.dag_id}/{services_sweep.run_id}'")
    assert len(found) == 1, found
    run = found[0]
    winner = run.data.tags["rlvr.winner"]
    page.goto(f"{services_sweep.services.mlflow}/#/experiments/{exp_id}/runs/{run.info.run_id}")
    _close_assistant(page)
    expect(page.get_by_text(f"Winner: {winner}").first).to_be_visible()
    header = page.locator("th", has_text="mean@k [95% CI]")                # the table, rendered as a table
    expect(header.first).to_be_visible()
    for method in ("grpo", "vsr"):
        expect(page.locator("td", has_text=re.compile(rf"^{method}$")).first).to_be_visible()
    expect(page.get_by_text(f"{winner}/heldout_mean_at_k").first).to_be_visible()   # the metrics table
    page.screenshot(path=str(shots / "mlflow-sweep-run.png"), full_page=True)
    print(f"screenshot: {shots / 'mlflow-sweep-run.png'}")


def test_stage_runs_are_runs_not_evaluations(services_sweep, mlflow, page, shots):
    """MLflow 3's UI files a run without a logged model under "Evaluations" in its default
    (GenAI) view. A training run has its policy as a logged model; the tables run is reached
    through the link on the sweep's run, which opens the machine-learning view: both "Runs"."""
    c, exp_id = mlflow
    [train] = c.search_runs([exp_id], "tags.`rlvr.stage` = 'train' and tags.`rlvr.method` = 'vsr'")
    page.goto(f"{services_sweep.services.mlflow}/#/experiments/{exp_id}/runs/{train.info.run_id}")
    _close_assistant(page)
    crumb = page.get_by_test_id("experiment-observatory-link-runs")
    expect(crumb).to_have_text("Runs")
    expect(page.get_by_text(f"{services_sweep.name}-tiny-vsr").first).to_be_visible()   # its logged model
    [sweep] = c.search_runs([exp_id], f"tags.`rlvr.airflow_run` = '{services_sweep.dag_id}/{services_sweep.run_id}'")
    page.goto(f"{services_sweep.services.mlflow}/#/experiments/{exp_id}/runs/{sweep.info.run_id}")
    expect(crumb).to_have_text("Evaluations")   # the default view, no logged model: what the links avoid
    # the link sits at the end of the (collapsed) description: follow its own address
    href = page.get_by_role("link", name="All tables and plots: the tables run").get_attribute("href")
    [tables] = c.search_runs([exp_id], f"tags.`rlvr.stage` = 'tables' and tags.`mlflow.parentRunId` = "
                                       f"'{sweep.info.run_id}'")
    assert href == f"#/experiments/{exp_id}/runs/{tables.info.run_id}?workflowType=machine_learning", href
    page.goto(f"{services_sweep.services.mlflow}/{href}")
    expect(page.get_by_text("tables tiny", exact=True).first).to_be_visible()
    expect(crumb).to_have_text("Runs")
    page.screenshot(path=str(shots / "mlflow-tables-run.png"), full_page=True)


def _close_assistant(page) -> None:
    """MLflow 3.17 opens an assistant side panel; closed, the screenshots show the page."""
    panel = page.get_by_text("MLflow Assistant")
    try:
        panel.wait_for(timeout=10_000)
    except Exception:  # noqa: BLE001 - no panel in this UI version
        return
    page.get_by_role("button", name="Close").first.click()
