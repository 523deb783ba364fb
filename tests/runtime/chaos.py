"""The SIGKILL harness of the chaos tests: run a job with ``statekit run`` as its own process,
kill it at a random moment or while a checkpoint is being written, start the next attempt
from the job's checkpoint directory (its latest complete checkpoint), and check what the job
wrote against a truth computed without the job.

The building blocks compose into other loops (a test that kills one process of a job and
lets it fail over builds its own from :class:`JobProcess`, :func:`latest_checkpoint`,
:func:`checkpoint_in_progress` and :meth:`KillPlan.kill_moment`). Tests import the module by
name (``from chaos import ...``): tests/runtime/conftest.py puts this directory on ``sys.path``.

Invariants the loop checks on every attempt: it completes checkpoints of its own before it is
killed (so the next one restores from a later checkpoint), and it is still running when the
kill comes (it never ends on its own first).
"""

from __future__ import annotations

import collections
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
WORDCOUNT = str(EXAMPLES / "wordcount.py")
WORD = re.compile(r"[^\W\d_]+")  # what examples/wordcount.py counts, of the lower-cased line

__all__ = [
    "ROOT",
    "EXAMPLES",
    "WORDCOUNT",
    "WINDOW_MS",
    "windowed_input",
    "windowed_truth",
    "statekit_run",
    "statekit_env",
    "completed_checkpoints",
    "latest_checkpoint",
    "checkpoint_in_progress",
    "restore_from",
    "JobProcess",
    "KillPlan",
    "odd_attempts",
    "every_attempt",
    "no_attempt",
    "ChaosRun",
    "kill_repeatedly",
    "finish",
    "WordInput",
    "words",
    "read_lines",
    "read_counts",
    "assert_exactly_once",
    "assert_at_least_once",
]


# ---------------------------------------------------------------- commands


def statekit_run(job_file: str, options: Sequence[str] = (), job_args: Sequence[str] = (), *,
                 python_options: Sequence[str] = ()) -> list[str]:
    """The command line ``statekit run [OPTIONS] JOB.py [JOB ARGS]`` of this interpreter."""
    return [sys.executable, *python_options, "-m", "statekit.cli.main", "run", *options, job_file, *job_args]


def statekit_env(home: Path) -> dict[str, str]:
    """The environment of a ``statekit`` process whose job registry is ``home`` (one per test)."""
    return {**os.environ, "STATEKIT_HOME": str(home)}


# ---------------------------------------------------------------- checkpoints on disk


def completed_checkpoints(job_dir: Path) -> list[int]:
    """Ids of the complete checkpoints (``chk-N`` with a ``_metadata``) in ``job_dir``, ascending."""
    if not job_dir.is_dir():
        return []
    return sorted(int(e[4:]) for e in os.listdir(job_dir)
                  if e.startswith("chk-") and (job_dir / e / "_metadata").exists())


def latest_checkpoint(job_dir: Path) -> int:
    """The id of the latest complete checkpoint in ``job_dir`` (0: none yet)."""
    return (completed_checkpoints(job_dir) or [0])[-1]


def checkpoint_in_progress(job_dir: Path) -> bool:
    """Whether a ``chk-N`` without ``_metadata`` (a checkpoint being written) exists right now."""
    return job_dir.is_dir() and any(e.startswith("chk-") and not (job_dir / e / "_metadata").exists()
                                    for e in os.listdir(job_dir))


def restore_from(job_dir: Path) -> list[str]:
    """``-s JOB_DIR`` (``statekit run`` restores its latest complete checkpoint) once there is one."""
    return ["-s", str(job_dir)] if latest_checkpoint(job_dir) else []


# ---------------------------------------------------------------- processes


class JobProcess:
    """A job process a test started (stdout discarded, stderr kept to explain an early end).

    As a context manager it SIGKILLs the process on the way out if it still runs (a failing
    assertion leaves no job behind).
    """

    def __init__(self, command: Sequence[str], *, home: Path) -> None:
        self.process = subprocess.Popen(list(command), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        text=True, errors="replace", env=statekit_env(home))

    def __enter__(self) -> JobProcess:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        assert self.process.stderr is not None
        self.process.stderr.close()

    def stderr(self) -> str:
        """What the process wrote to stderr (call once it ended)."""
        assert self.process.stderr is not None
        return self.process.stderr.read()

    def assert_running(self, what: str) -> None:
        assert self.process.poll() is None, f"{what}: the job ended ({self.process.returncode}): {self.stderr()!r}"

    def wait_for(self, condition: Callable[[], bool], what: str, timeout: float, *, required: bool = True,
                 poll_s: float = 0.005) -> bool:
        """Wait until ``condition()`` holds; the job must keep running meanwhile.

        Returns:
            Whether it held; ``False`` after ``timeout`` seconds unless ``required`` (then the
            test fails naming ``what``).
        """
        deadline = time.monotonic() + timeout
        while not condition():
            self.assert_running(f"waiting for {what}")
            if time.monotonic() >= deadline:
                assert not required, f"timed out after {timeout} s waiting for {what}"
                return False
            time.sleep(poll_s)
        return True

    def kill(self) -> None:
        """SIGKILL the process, which must still be running."""
        self.assert_running("before the kill")
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()


def finish(command: Sequence[str], *, home: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``command`` to its end; it must exit 0 (``statekit run``: the job FINISHED)."""
    done = subprocess.run(list(command), capture_output=True, text=True, timeout=timeout, env=statekit_env(home))
    assert done.returncode == 0, done.stderr
    return done


# ---------------------------------------------------------------- the kill loop


def odd_attempts(attempt: int, _rng: random.Random) -> bool:
    """Kill every other attempt (1, 3, 5, ...) mid-checkpoint."""
    return attempt % 2 == 1


def every_attempt(_attempt: int, _rng: random.Random) -> bool:
    """Kill every attempt mid-checkpoint."""
    return True


def no_attempt(_attempt: int, _rng: random.Random) -> bool:
    """Kill every attempt at a random moment."""
    return False


@dataclass(frozen=True)
class KillPlan:
    """When each attempt is killed, once it completed ``checkpoints`` checkpoints of its own.

    Attributes:
        attempts: Attempts started and SIGKILLed.
        seed: Of the random moments (the same seed kills at the same moments relative to
            the attempt's checkpoints).
        checkpoints: Checkpoints each attempt must complete before it may be killed.
        checkpoint_timeout_s: How long an attempt may take for them.
        random_delay_s: A kill at a random moment comes uniform(0, random_delay_s) s after them.
        mid_checkpoint: Which attempts are killed while a checkpoint is being written
            (``(attempt, rng) -> bool``; default: every other one).
        mid_checkpoint_wait_s: How long to wait for a checkpoint in progress; then the kill
            comes anyway (counted as mid-checkpoint only if one is in progress at that moment).
        mid_checkpoint_required: Not seeing a checkpoint in progress fails the test instead.
        mid_checkpoint_delay_s: A further uniform(0, this) s once one is in progress (0: none,
            and no random draw).
    """

    attempts: int
    seed: int
    checkpoints: int = 1
    checkpoint_timeout_s: float = 30.0
    random_delay_s: float = 0.3
    mid_checkpoint: Callable[[int, random.Random], bool] = odd_attempts
    mid_checkpoint_wait_s: float = 2.0
    mid_checkpoint_required: bool = False
    mid_checkpoint_delay_s: float = 0.0

    def kill_moment(self, job: JobProcess, job_dir: Path, attempt: int, rng: random.Random) -> bool:
        """Wait for the moment to kill ``attempt`` (see the attributes); the caller kills.

        Returns:
            Whether the attempt is one to kill mid-checkpoint and a checkpoint is being
            written at this moment.
        """
        if not self.mid_checkpoint(attempt, rng):
            time.sleep(rng.uniform(0, self.random_delay_s))
            return False
        job.wait_for(lambda: checkpoint_in_progress(job_dir), f"attempt {attempt}: a checkpoint in progress",
                     self.mid_checkpoint_wait_s, required=self.mid_checkpoint_required, poll_s=0.001)
        if self.mid_checkpoint_delay_s:
            time.sleep(rng.uniform(0, self.mid_checkpoint_delay_s))
        return checkpoint_in_progress(job_dir)


@dataclass
class ChaosRun:
    """What a kill loop did.

    Attributes:
        restored: Per attempt, the latest complete checkpoint when it started (0: none), which
            it restored from.
        kills_mid_checkpoint: Kills of an attempt meant to die mid-checkpoint while a
            checkpoint was being written.
    """

    restored: list[int] = field(default_factory=list)
    kills_mid_checkpoint: int = 0

    def assert_progress(self) -> None:
        """Each attempt restored from a later checkpoint than the one before (the first from none)."""
        assert self.restored == sorted(self.restored) and len(set(self.restored)) == len(self.restored), self.restored


def kill_repeatedly(job_dir: Path, command: Callable[[int], Sequence[str]], plan: KillPlan, *, home: Path,
                    during: Callable[[JobProcess, int], None] | None = None) -> ChaosRun:
    """Start ``command(attempt)`` ``plan.attempts`` times, each SIGKILLed as ``plan`` says.

    Args:
        job_dir: The job's checkpoint directory (``<checkpoint-dir>/<job-id>``).
        command: The attempt's command line, built when it starts (so it can restore from
            ``job_dir``: :func:`restore_from`).
        plan: When to kill.
        home: STATEKIT_HOME of the processes (their job registry).
        during: Called once the attempt completed its checkpoints, before the kill moment.

    Returns:
        The checkpoints each attempt restored from, and the kills mid-checkpoint.
    """
    rng = random.Random(plan.seed)
    run = ChaosRun()
    for attempt in range(plan.attempts):
        start = latest_checkpoint(job_dir)
        run.restored.append(start)
        with JobProcess(command(attempt), home=home) as job:
            job.wait_for(lambda start=start: latest_checkpoint(job_dir) >= start + plan.checkpoints,
                         f"attempt {attempt}: {plan.checkpoints} checkpoint(s) of its own", plan.checkpoint_timeout_s)
            if during is not None:
                during(job, attempt)
            run.kills_mid_checkpoint += plan.kill_moment(job, job_dir, attempt, rng)
            job.kill()
    return run


# ---------------------------------------------------------------- inputs and the truth


def words(line: str) -> list[str]:
    """The words word count counts in ``line``: runs of letters of the lower-cased line."""
    return WORD.findall(line.lower())


@dataclass(frozen=True)
class WordInput:
    """Text files of random words, and their true word counts.

    Attributes:
        files: Files written (``part-<f>.txt``).
        lines: Lines per file.
        seed: Of the words.
        vocabulary: Random words of 2-6 letters a-p, then ``extra_words``.
        extra_words: Words added to the vocabulary (non-ASCII ones test the lower-casing).
        max_words: Words per line: 1..max_words.
        endings: One is appended to each line (punctuation, numbers); none: nothing.
        distinct_lines: When > 0, this many distinct lines are made and each file draws its
            lines from them (big inputs are written fast).
    """

    files: int
    lines: int
    seed: int
    vocabulary: int
    extra_words: tuple[str, ...] = ()
    max_words: int = 10
    endings: tuple[str, ...] = ()
    distinct_lines: int = 0

    def write(self, directory: Path) -> collections.Counter[str]:
        """Write the files into the new directory ``directory``; returns the true word counts."""
        rng = random.Random(self.seed)
        vocabulary = ["".join(rng.choice("abcdefghijklmnop") for _ in range(rng.randint(2, 6)))
                      for _ in range(self.vocabulary)]
        vocabulary += self.extra_words

        def line() -> str:
            text = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(1, self.max_words)))
            return text + rng.choice(self.endings) if self.endings else text

        pool = [line() for _ in range(self.distinct_lines)]
        directory.mkdir()
        uses: collections.Counter[str] = collections.Counter()
        for f in range(self.files):
            text = [pool[i] for i in rng.choices(range(len(pool)), k=self.lines)] if pool else \
                [line() for _ in range(self.lines)]
            uses.update(text)
            (directory / f"part-{f}.txt").write_text("\n".join(text) + "\n", encoding="utf-8")
        counts: collections.Counter[str] = collections.Counter()
        for text_line, n in uses.items():
            for word in words(text_line):
                counts[word] += n
        return counts


WINDOW_WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "Straße"]
WINDOW_MS, JITTER_MS = 10_000, 1_500  # windowed_counts.py --window 10s; jitter below --out-of-orderness 2s


def windowed_input(directory: Path, files: int, lines: int, seed: int = 5, first: int = 0) -> list[str]:
    """``EPOCH_MS<TAB>TEXT`` files of examples/windowed_counts.py covering consecutive time
    ranges; timestamps jitter by less than the out-of-orderness. ``first``: the number of files
    written before (their names and time ranges come first). Returns every line written."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    everything: list[str] = []
    t = first * lines * 37
    for f in range(first, first + files):
        rows = []
        for _ in range(lines):
            t += 37
            text = " ".join(rng.choice(WINDOW_WORDS) for _ in range(rng.randint(0, 5))) + rng.choice(["", "!", " 42"])
            rows.append(f"{t - rng.randint(0, JITTER_MS)}\t{text}")
        (directory / f"part-{f:02d}.txt").write_text("\n".join(rows) + "\n", encoding="utf-8")
        everything.extend(rows)
    return everything


def windowed_truth(lines: list[str]) -> collections.Counter[str]:
    """The ``WINDOW_START<TAB>WORD<TAB>COUNT`` lines windowed_counts.py writes for ``lines``."""
    counts: collections.Counter[tuple[int, str]] = collections.Counter()
    for line in lines:
        stamp, text = line.split("\t", 1)
        start = int(stamp) - int(stamp) % WINDOW_MS
        for word in re.findall(r"[^\W\d_]+", text.lower()):
            counts[(start, word)] += 1
    return collections.Counter(f"{s}\t{w}\t{n}" for (s, w), n in counts.items())


# ---------------------------------------------------------------- what the job wrote


def read_lines(output: Path) -> collections.Counter[str]:
    """The lines of the committed part files in ``output``; no pending or in-progress file
    (a dot file) may be visible."""
    names = os.listdir(output) if output.is_dir() else []
    assert not [n for n in names if n.startswith(".")], "pending or in-progress files are visible"
    got: collections.Counter[str] = collections.Counter()
    for name in names:
        got.update((output / name).read_text(encoding="utf-8").splitlines())
    return got


def read_counts(output: Path) -> dict[str, list[int]]:
    """Every count written per word (``word<TAB>count`` lines of :func:`read_lines`)."""
    got: dict[str, list[int]] = collections.defaultdict(list)
    for line, n in read_lines(output).items():
        word, count = line.split("\t")
        got[word].extend([int(count)] * n)
    return got


def assert_exactly_once(got: Mapping[str, Iterable[int]], expected: Mapping[str, int], what: str = "counts") -> None:
    """Each word's running counts are exactly 1..n, n its true count (none lost, none twice)."""
    counts = {w: sorted(c) for w, c in got.items()}
    assert set(counts) == set(expected)
    wrong = {w: (n, len(counts[w])) for w, n in expected.items() if counts[w] != list(range(1, n + 1))}
    assert not wrong, f"{len(wrong)} words with missing or duplicated {what}, e.g. {list(wrong.items())[:3]}"


def assert_at_least_once(got: Mapping[str, Iterable[int]], expected: Mapping[str, int]) -> None:
    """Each word's running counts are 1..m without gaps, m at least its true count (none lost)."""
    counts = {w: sorted(c) for w, c in got.items()}
    assert set(counts) == set(expected)
    lost = {w: n for w, n in expected.items() if counts[w] != list(range(1, len(counts[w]) + 1)) or len(counts[w]) < n}
    assert not lost, f"{len(lost)} words lost counts, e.g. {list(lost.items())[:3]}"
