"""Load, validate, sample, mix and shuffle the training datasets given on the command line."""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from swiftcore_data.errors import DataError, SkipReport
from swiftcore_data.normalize import normalize_record
from swiftcore_data.readers import iter_rows
from swiftcore_data.sources import DatasetSource, parse_dataset_arg

__all__ = ["RecordStream", "Records", "load_records"]

_SKIP_HINT = "fix the row, or pass --skip-bad-rows to skip bad rows and get a count of what was skipped"

SourceArg = DatasetSource | str


class Records(list):
    """A list of canonical records that also carries :attr:`skipped`, the :class:`SkipReport` of the load."""

    skipped: SkipReport

    def __init__(self, items: Iterable[dict[str, Any]] = (), skipped: SkipReport | None = None) -> None:
        super().__init__(items)
        self.skipped = skipped if skipped is not None else SkipReport()


def load_records(
    sources: Sequence[SourceArg] | SourceArg,
    *,
    seed: int = 0,
    skip_bad_rows: bool = False,
    streaming: bool = False,
    shuffle: bool = True,
    require_assistant: bool = True,
    shuffle_buffer: int = 1000,
) -> Records | RecordStream:
    """Read every source, convert rows to canonical records, validate, sample by ratio, mix and shuffle.

    Args:
        sources: :class:`DatasetSource` objects or ``--dataset`` strings (``"train.jsonl#0.5"``).
        seed: seeds sub-/over-sampling and shuffling; the same seed gives the same records in the same order.
        skip_bad_rows: count and skip invalid rows instead of raising on the first; the counts are in
            ``.skipped`` and logged as a warning on the ``swiftcore_data`` logger.
        streaming: return a :class:`RecordStream` that reads lazily (for datasets that do not fit in memory).
            Ratios then apply per row in expectation, and shuffling uses a ``shuffle_buffer``-row buffer.
        shuffle: shuffle the mixed records (deterministically, by ``seed``). Without it, sources follow each
            other in the given order (streaming sources are interleaved).
        require_assistant: reject rows without an assistant turn (turn off for inference prompts).
        shuffle_buffer: rows held for shuffling when streaming.

    Returns:
        A :class:`Records` list, or a :class:`RecordStream` when ``streaming``. Every record has
        ``"_source"`` (``"file:line"``) for later error messages.

    Raises:
        DataError: a source cannot be read, a row is invalid (unless ``skip_bad_rows``), or every row was bad.
    """
    parsed = _parse_sources(sources)
    options = {"skip_bad_rows": skip_bad_rows, "require_assistant": require_assistant}
    if streaming:
        return RecordStream(parsed, seed=seed, shuffle=shuffle, shuffle_buffer=shuffle_buffer, **options)
    report = SkipReport()
    mixed: list[dict[str, Any]] = []
    for index, source in enumerate(parsed):
        read_before = report.total
        rows = list(_valid_records(source, report, streaming=False, **options))
        if report.total == read_before:
            raise DataError(source.label, None, "holds no rows: the dataset is empty", reason="empty dataset")
        rng = random.Random(f"swiftcore_data:{seed}:{index}")
        # Repeated rows are shallow copies so that a consumer mutating one does not change its twins.
        mixed += [rows[i] if n == 0 else dict(rows[i]) for n, i in _sample_indices(len(rows), source.ratio, rng)]
    _finish(report, kept=len(mixed), sources=parsed)
    if shuffle:
        random.Random(f"swiftcore_data:{seed}:shuffle").shuffle(mixed)
    return Records(mixed, report)


class RecordStream:
    """A re-iterable stream of canonical records (see :func:`load_records` with ``streaming=True``).

    Attributes:
        skipped: the :class:`SkipReport` of the current (or last finished) pass.
    """

    def __init__(
        self,
        sources: Sequence[DatasetSource],
        *,
        seed: int,
        skip_bad_rows: bool,
        shuffle: bool,
        require_assistant: bool,
        shuffle_buffer: int,
    ) -> None:
        self.sources = list(sources)
        self.seed = seed
        self.skip_bad_rows = skip_bad_rows
        self.shuffle = shuffle
        self.require_assistant = require_assistant
        self.shuffle_buffer = max(1, shuffle_buffer)
        self.skipped = SkipReport()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        report = self.skipped = SkipReport()
        rng = random.Random(f"swiftcore_data:{self.seed}:stream")
        streams = [self._sampled(source, index, report) for index, source in enumerate(self.sources)]
        mixed = _interleave(streams, rng)
        records = _buffer_shuffle(mixed, self.shuffle_buffer, rng) if self.shuffle else mixed
        kept = 0
        for record in records:
            kept += 1
            yield record
        _finish(report, kept=kept, sources=self.sources)

    def _sampled(self, source: DatasetSource, index: int, report: SkipReport) -> Iterator[dict[str, Any]]:
        rng = random.Random(f"swiftcore_data:{self.seed}:{index}")
        whole, frac = int(source.ratio), source.ratio - int(source.ratio)
        options = {"skip_bad_rows": self.skip_bad_rows, "require_assistant": self.require_assistant}
        for record in _valid_records(source, report, streaming=True, **options):
            copies = whole + (rng.random() < frac)
            for n in range(copies):
                yield record if n == 0 else dict(record)


def _parse_sources(sources: Sequence[SourceArg] | SourceArg) -> list[DatasetSource]:
    items = [sources] if isinstance(sources, str | DatasetSource) else list(sources)
    if not items:
        raise DataError("--dataset", None, "no dataset given; pass at least one --dataset PATH[#RATIO]")
    return [s if isinstance(s, DatasetSource) else parse_dataset_arg(s) for s in items]


def _valid_records(
    source: DatasetSource, report: SkipReport, *, streaming: bool, skip_bad_rows: bool, require_assistant: bool
) -> Iterator[dict[str, Any]]:
    for where, row in iter_rows(source, streaming=streaming):
        report.total += 1
        try:
            if isinstance(row, DataError):
                raise row
            yield normalize_record(row, where, require_assistant=require_assistant)
        except DataError as exc:
            if not skip_bad_rows:
                exc.hint = exc.hint or _SKIP_HINT
                raise
            report.add(exc)


def _sample_indices(n: int, ratio: float, rng: random.Random) -> list[tuple[int, int]]:
    """``(copy number, row index)`` pairs: ``int(ratio)`` full passes plus a seeded ``frac * n`` subset.

    The subset is drawn without replacement and kept in file order, so ``ratio=0.5`` keeps exactly
    ``round(n / 2)`` distinct rows.
    """
    whole = int(ratio)
    extra = sorted(rng.sample(range(n), round(n * (ratio - whole))))
    return [(copy, i) for copy in range(whole) for i in range(n)] + [(whole, i) for i in extra]


def _interleave(streams: list[Iterator[dict[str, Any]]], rng: random.Random) -> Iterator[dict[str, Any]]:
    """Draw from a seeded random one of the streams not yet exhausted, until all are."""
    active = list(streams)
    while active:
        stream = rng.choice(active)
        try:
            yield next(stream)
        except StopIteration:
            active.remove(stream)


def _buffer_shuffle(items: Iterator[dict[str, Any]], size: int, rng: random.Random) -> Iterator[dict[str, Any]]:
    """Shuffle a stream with a fixed-size buffer (the approach of ``datasets.IterableDataset.shuffle``)."""
    buffer: list[dict[str, Any]] = []
    for item in items:
        if len(buffer) < size:
            buffer.append(item)
            continue
        j = rng.randrange(size)
        yield buffer[j]
        buffer[j] = item
    rng.shuffle(buffer)
    yield from buffer


def _finish(report: SkipReport, *, kept: int, sources: Sequence[DatasetSource]) -> None:
    report.log()
    if report.total and not kept and report.skipped:
        raise DataError(
            ", ".join(s.label for s in sources),
            None,
            f"every row was invalid, nothing to train on:\n{report.summary()}",
            reason="no valid rows",
        )
