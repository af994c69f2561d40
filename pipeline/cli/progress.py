"""A rich live view of stage progress while the pipeline runs."""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from pipeline.report.terminal import STATUS_MARK, STATUS_STYLE
from pipeline.stage_result import StageResult


class ProgressView:
    """Observer for the runner and progress sink for stages."""

    def __init__(self, console: Console, stage_names: list[str], title: str) -> None:
        self.console = console
        self.title = title
        self.rows: dict[str, tuple[str, str, float | None]] = {
            name: ("pending", "", None) for name in stage_names}
        self.running: str | None = None
        self.started = 0.0
        self.progress_state: tuple[float, float, str] | None = None
        self.display = Live(console=console, refresh_per_second=8, transient=False,
                         get_renderable=self._render) if console.is_terminal else None

    def __enter__(self) -> ProgressView:
        if self.display is not None:
            self.display.start()
        else:
            self.console.print(self.title)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.display is not None:
            self.display.stop()

    def stage_started(self, name: str) -> None:
        self.running = name
        self.started = time.monotonic()
        self.progress_state = None
        self.rows[name] = ("running", "", None)

    def stage_finished(self, result: StageResult) -> None:
        self.running = None
        self.rows[result.name] = (result.status.value, result.message, result.duration_s)
        if self.display is None:
            mark = STATUS_MARK[result.status.value]
            self.console.print(f"{mark} {result.name:<11} {result.status.value:<8} "
                               f"{result.duration_s:6.1f}s  {result.message}", highlight=False,
                               soft_wrap=True)

    def __call__(self, stage: str, done: float, total: float, text: str) -> None:
        self.progress_state = (done, total, text)

    def _render(self) -> RenderableType:
        table = Table.grid(padding=(0, 1))
        table.add_column(width=2)
        table.add_column(width=11)
        table.add_column(width=8, justify="right")
        table.add_column(overflow="fold")
        for name, (status, message, duration) in self.rows.items():
            if status == "running":
                elapsed = time.monotonic() - self.started
                detail: RenderableType = Text("")
                if self.progress_state is not None:
                    done, total, text = self.progress_state
                    bar = Table.grid(padding=(0, 1))
                    bar.add_row(ProgressBar(total=max(total, 1e-9), completed=done, width=24),
                                Text(f"{text} ({max(total - done, 0):.0f}s left)"))
                    detail = bar
                table.add_row(Spinner("dots"), Text(name, style="cyan"),
                              f"{elapsed:.1f}s", detail)
            else:
                style = STATUS_STYLE.get(status, "dim")
                mark = STATUS_MARK.get(status, "·")
                table.add_row(Text(mark, style=style), Text(name, style=style),
                              f"{duration:.1f}s" if duration is not None else "",
                              Text(message, style="dim" if status == "pending" else ""))
        outer = Table.grid()
        outer.add_row(Text(self.title, style="bold"))
        outer.add_row(table)
        return outer
