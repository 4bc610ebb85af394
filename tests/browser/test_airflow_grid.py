"""The Airflow UI of the deployment after the tiny GRPO + VSR sweep ran through it
(tests/support/live_services.py): the run's grid shows every task, every task instance succeeded,
and the mapped train / evaluate tasks carry their readable labels (map_index_template)."""
from __future__ import annotations

import urllib.parse

import pytest
import yaml
from playwright.sync_api import expect

from components.sweep import parse_sweep
from live_services import TINY_SWEEP


@pytest.fixture(scope="module")
def expected(services_sweep):
    """(task ids of the DAG, {mapped task: its labels}) from Airflow's REST API and the sweep."""
    from components.services import remote
    af = remote.Airflow(services_sweep.services.airflow)
    tasks = sorted(t["task_id"] for t in af.call("GET", f"/dags/{services_sweep.dag_id}/tasks")["tasks"])
    cfg = parse_sweep(yaml.safe_load(TINY_SWEEP))
    mapped = {"train": sorted(g["key"] for g in cfg.grid()), "evaluate": sorted(c["label"] for c in cfg.eval_cells())}
    return tasks, mapped


def _run_url(s) -> str:
    return f"{s.services.airflow}/dags/{s.dag_id}/runs/{urllib.parse.quote(s.run_id, safe='')}"


def test_grid_every_task_succeeded_with_readable_map_labels(services_sweep, expected, page, shots):
    tasks, mapped = expected
    page.set_viewport_size({"width": 1600, "height": 1400})
    page.goto(_run_url(services_sweep))
    cells = page.locator(f'a[id^="grid-{services_sweep.run_id}-"]')   # the run's column of the grid
    expect(cells).to_have_count(len(tasks))
    assert sorted(c.removeprefix(f"grid-{services_sweep.run_id}-") for c in
                  cells.evaluate_all("cs => cs.map(c => c.id)")) == tasks
    rows = page.locator("table tbody tr")   # the run's task instances: task, map label, state, ...
    expect(rows).to_have_count(len(tasks) - len(mapped) + sum(len(v) for v in mapped.values()))
    seen: dict[str, list[str]] = {}
    for cells_text in rows.evaluate_all("rs => rs.map(r => [...r.querySelectorAll('td')].map(td => td.innerText))"):
        task, label, state = cells_text[1], cells_text[2], cells_text[3]
        assert state == "Success", cells_text
        seen.setdefault(task, []).append(label)
    assert sorted(seen) == tasks
    assert {t: sorted(seen[t]) for t in mapped} == mapped
    page.screenshot(path=str(shots / "airflow-run-grid.png"), full_page=True)

    page.goto(_run_url(services_sweep) + "/tasks/train/mapped")
    for label in mapped["train"]:
        row = page.locator("table tbody tr", has=page.get_by_text(label, exact=True))
        expect(row).to_contain_text("Success")
    page.screenshot(path=str(shots / "airflow-train-mapped.png"), full_page=True)
    print(f"screenshots: {shots / 'airflow-run-grid.png'}, {shots / 'airflow-train-mapped.png'}")
