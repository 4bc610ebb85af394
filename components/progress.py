"""Progress for long work: a rich bar on a terminal, periodic lines elsewhere (CI, files),
both with step, rate and ETA.

Written to the process's real stderr (``sys.__stderr__``): inside an Airflow task,
``sys.stdout``/``sys.stderr`` are captured into the task log, and whoever runs
``rlvr sweep`` would otherwise see nothing until the task ends.
"""
from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from typing import Iterator, TextIO


def _out() -> TextIO:
    return sys.__stderr__ or sys.stderr


def note(msg: str) -> None:
    """One progress line (stage started / cached / finished)."""
    out = _out()
    print(msg, file=out, flush=True)


class StepProgress:
    def __init__(self, label: str, total: int, start: int = 0, every_frac: float = 0.1):
        self.label, self.total, self.done = label, max(total, 1), start
        self.start_done, self.t0 = start, time.monotonic()
        self.every = max(1, int(self.total * every_frac))
        self.out = _out()
        self._bar = None
        if self.out.isatty():
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                       TimeElapsedColumn, TimeRemainingColumn)
            self._bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                                 console=Console(file=self.out))
            self._task = self._bar.add_task(label, total=self.total, completed=start, info="")

    def eta_s(self) -> float:
        rate = (self.done - self.start_done) / max(time.monotonic() - self.t0, 1e-9)
        return (self.total - self.done) / rate if rate > 0 else float("nan")

    def advance(self, n: int = 1, info: str = "") -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(self._task, advance=n, info=info)
        elif self.done % self.every == 0 or self.done == self.total:
            print(f"[{self.label}] {self.done}/{self.total} {info} "
                  f"elapsed {time.monotonic() - self.t0:.0f}s eta {self.eta_s():.0f}s", file=self.out, flush=True)


@contextmanager
def step_progress(label: str, total: int, start: int = 0) -> Iterator[StepProgress]:
    p = StepProgress(label, total, start)
    if p._bar is not None:
        p._bar.start()
    try:
        yield p
    finally:
        if p._bar is not None:
            p._bar.stop()
