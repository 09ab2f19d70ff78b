"""What ``cp``/``sync`` show while they run: phases with their times, then live transfer figures.

Three forms, picked by where stderr goes:

- a terminal: a rich live display (one line per phase with a spinner and its time; the
  transfer line with bytes, objects, chunks, Gbit/s and ETA);
- a pipe or a file: plain lines, one per phase change and at most one progress line every
  ``plain_every`` seconds (log-friendly, no control characters);
- ``--json``: the JSON event stream (``{"event": "progress", ...}`` as before, plus
  ``{"event": "phase", ...}`` lines).

The transfer phase turns into "verify" once every chunk is written and the engine is checking
and committing the objects.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal, TextIO

from skyplane_ops import api

Mode = Literal["rich", "plain", "json", "off"]
PHASES = ("list", "plan", "provision", "transfer", "verify", "teardown")


def pick_mode(stream: TextIO, *, as_json: bool, quiet: bool) -> Mode:
    if quiet:
        return "off"
    if as_json:
        return "json"
    return "rich" if stream.isatty() else "plain"


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _eta(p: api.Progress) -> float | None:
    rate = p.bytes_done / p.elapsed_s if p.elapsed_s > 0 else 0.0
    if rate <= 0:
        return None
    return max(0.0, (p.bytes_total - p.bytes_done) / rate)


def progress_line(p: api.Progress) -> str:
    """One plain line: percent, bytes, chunks, rate and ETA."""
    frac = p.bytes_done / p.bytes_total if p.bytes_total else 1.0
    eta = _eta(p)
    return (
        f"transfer: {frac * 100:5.1f}%  {_size(p.bytes_done)} of {_size(p.bytes_total)}  "
        f"objects {p.objects_done}/{p.objects_total}  chunks {p.chunks_done}/{p.chunks_total}  "
        f"{p.gbps:.3f} Gbit/s  "
        f"ETA {'-' if eta is None else f'{eta:.0f}s'}"
    )


class RunView:
    """Phase timings and transfer progress for one command run (see the module doc)."""

    def __init__(self, stream: TextIO, mode: Mode, *, plain_every: float = 2.0) -> None:
        self.stream = stream
        self.mode = mode
        self.plain_every = plain_every
        self.times: dict[str, float] = {}
        self._t0 = time.monotonic()
        self._last_plain = 0.0
        self._json = api.JsonProgress(stream) if mode == "json" else None
        self._live: Any = None
        self._tasks: dict[Any, Any] = {}  # phase name or ("path", route) -> task id
        self._verifying = False
        self._verify_start = 0.0
        self._starts: dict[str, float] = {}
        self._rate = ""  # the last transfer rate seen, shown when the phase is done
        if mode == "rich":
            self._live = _rich_progress(stream)
            self._live.start()

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _emit(self, text: str, **event: Any) -> None:
        if self.mode == "json":
            self.stream.write(json.dumps({"event": "phase", **event}) + "\n")
        elif self.mode == "plain":
            self.stream.write(f"[{time.monotonic() - self._t0:7.1f}s] {text}\n")
        else:
            return
        self.stream.flush()

    @contextmanager
    def phase(self, name: str, detail: str = "") -> Iterator[dict[str, str]]:
        """Time one phase; the body may set ``note["done"]`` to say what it did."""
        note: dict[str, str] = {}
        start = time.monotonic()
        self._start(name, detail)
        ok = False
        try:
            yield note
            ok = True
        finally:
            self._end(name, time.monotonic() - start, note.get("done", ""), ok)

    def _start(self, name: str, detail: str) -> None:
        self._starts[name] = time.monotonic()
        if name == "transfer":
            self._verifying = False
        self._add_task(name, detail)
        self._emit(f"{name}: {detail or 'started'}", phase=name, state="started")

    def _add_task(self, name: str, info: str) -> None:
        if self._live is not None:
            self._tasks[name] = self._live.add_task(name, total=None, info=info)

    def _end(self, name: str, seconds: float, done: str, ok: bool) -> None:
        ended = [(name, seconds, done)]
        if name == "transfer" and self._verifying:  # the tail of the call was the verify phase
            now = time.monotonic()
            ended = [
                ("transfer", self._verify_start - self._starts[name], self._rate),
                ("verify", now - self._verify_start, done),
            ]
        if name == "transfer" and self._live is not None:  # the per-path lines stop too
            for key, task in self._tasks.items():
                if isinstance(key, tuple):
                    self._live.update(task, total=1, completed=1)
                    self._live.stop_task(task)
        for phase, secs, what in ended:
            self.times[phase] = secs
            self._finish_task(phase, secs, what, ok)
            state = "done" if ok else "stopped"
            text = f"{phase}: {state} in {secs:.1f}s" + (f" ({what})" if what else "")
            self._emit(text, phase=phase, state=state, seconds=round(secs, 3), info=what)

    def _finish_task(self, name: str, seconds: float, done: str, ok: bool) -> None:
        if self._live is None or name not in self._tasks:
            return
        task = self._tasks[name]
        info = f"{'done' if ok else 'stopped'} in {seconds:.1f}s" + (f" · {done}" if done else "")
        total = self._live.tasks[task].total or 1
        self._live.update(task, total=total, completed=total, info=info)
        self._live.stop_task(task)

    def listing(self, source: int, destination: int) -> None:
        """Objects listed so far (source, destination): a long listing shows it is moving."""
        text = f"{source:,} source objects listed" + (
            f", {destination:,} at the destination" if destination else ""
        )
        if self._live is not None and "list" in self._tasks:
            self._live.update(self._tasks["list"], info=text)
        elif self.mode == "plain":
            now = time.monotonic()
            if now - self._last_plain >= self.plain_every:
                self._last_plain = now
                self.stream.write(f"[{now - self._t0:7.1f}s] list: {text}\n")
                self.stream.flush()

    def transfer(self, p: api.Progress) -> None:
        """The engine's progress callback."""
        if self._json is not None:
            self._json(p)
        all_written = p.bytes_done >= p.bytes_total and p.chunks_done >= p.chunks_total
        self._rate = f"{p.gbps:.3f} Gbit/s, {p.chunks_done}/{p.chunks_total} chunks"
        if self._live is not None and "transfer" in self._tasks:
            eta = _eta(p)
            self._live.update(
                self._tasks["transfer"],
                total=max(p.bytes_total, 1),
                completed=p.bytes_done,
                info=f"{_size(p.bytes_done)}/{_size(p.bytes_total)} · {p.objects_done}/"
                f"{p.objects_total} objects · {p.chunks_done}/{p.chunks_total} chunks · "
                f"[cyan]{p.gbps:.2f} Gbit/s[/] · ETA " + ("-" if eta is None else f"{eta:.0f}s"),
            )
        if self._live is not None:
            for route, gbps in p.path_gbps.items():
                if ("path", route) not in self._tasks:
                    self._tasks[("path", route)] = self._live.add_task(
                        "  path", total=None, info=""
                    )
                self._live.update(self._tasks[("path", route)], info=f"{route}: {gbps:.3f} Gbit/s")
        if self.mode == "plain":
            now = time.monotonic()
            if (all_written and not self._verifying) or now - self._last_plain >= self.plain_every:
                self._last_plain = now
                self.stream.write(f"[{now - self._t0:7.1f}s] {progress_line(p)}\n")
                for route, gbps in p.path_gbps.items():
                    self.stream.write(f"           path {route}: {gbps:.3f} Gbit/s\n")
                self.stream.flush()
        if all_written and not self._verifying:
            self._verifying = True
            self._verify_start = time.monotonic()
            self._add_task("verify", "checking and committing")
            self._emit("verify: checking and committing", phase="verify", state="started")


def _rich_progress(stream: TextIO) -> Any:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    console = Console(file=stream)
    return Progress(
        SpinnerColumn(finished_text="[green]✓"),
        TextColumn("[bold]{task.description:<9}"),
        BarColumn(bar_width=12),
        TimeElapsedColumn(),
        TextColumn("{task.fields[info]}"),
        console=console,
        transient=False,
        refresh_per_second=5,
    )
