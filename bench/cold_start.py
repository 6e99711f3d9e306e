"""Cold start of ``make serve``: a fresh tree (``git archive`` of a commit, no ``.venv``) to
the first ``/healthz`` answer, with pip's cache as it is on this machine.

Two variants, interleaved round by round so that load from elsewhere touches both:

- ``serve``: ``make serve`` as the README types it (what serving needs only);
- the baseline, ``dev``: ``make .venv/.installed`` then ``make serve``: the dev install (pip
  upgraded, every extra and test tool, bytecode compiled), which is what ``make serve`` did
  before it had a stamp of its own; or, with ``--base-rev REV``, ``make serve`` as it is in the
  tree of ``REV`` (``--base-rev af03d35``: the target before this round).

Prints each round's seconds and the ratio baseline/serve, then the medians. The server listens on
a free port (``IOBRIDGE_PORT``) and is stopped with SIGTERM once it answers.

    .venv/bin/python bench/cold_start.py [--rounds 3] [--rev HEAD] [--base-rev REV]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from _harness import free_port

ROOT = Path(__file__).resolve().parents[1]


def export_tree(rev: str, folder: Path) -> None:
    """The files of ``rev`` in ``folder``, as a fresh clone has them."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as answer:
            return bool(answer.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def cold_start(variant: str, rev: str, commands: list[str], timeout: float) -> float:
    """Seconds from nothing to a ``/healthz`` answer: ``commands`` run in a fresh tree of
    ``rev``, the last one serving."""
    with tempfile.TemporaryDirectory(prefix="iobridge-cold-") as scratch:
        folder = Path(scratch) / "iobridge"
        folder.mkdir()
        export_tree(rev, folder)
        port = free_port()
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("IOBRIDGE_", "VIRTUAL_ENV", "MAKE"))}
        env.update(IOBRIDGE_PORT=str(port), IOBRIDGE_LOG_LEVEL="warning")
        *setup, last = commands
        log = (Path(scratch) / "output.log").open("wb")  # pip's and make's, shown on failure
        started = time.monotonic()
        try:
            for command in setup:
                subprocess.run(command, shell=True, cwd=folder, env=env, check=True,
                               stdout=log, stderr=log, timeout=timeout)
            server = subprocess.Popen(last, shell=True, cwd=folder, env=env, stdout=log,
                                      stderr=log, start_new_session=True)
            try:
                while not healthy(port):
                    if server.poll() is not None:
                        raise RuntimeError(f"{variant}: {last!r} exited: {server.returncode}")
                    if time.monotonic() - started > timeout:
                        raise RuntimeError(f"{variant}: no /healthz within {timeout:g} s")
                    time.sleep(0.1)
                return time.monotonic() - started
            finally:
                os.killpg(server.pid, signal.SIGTERM)
                server.wait(timeout=60)
        except (RuntimeError, subprocess.SubprocessError):
            log.close()
            sys.stderr.write((Path(scratch) / "output.log").read_text(errors="replace")[-4000:])
            raise
        finally:
            log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rev", default="HEAD", help="the commit whose tree is started")
    parser.add_argument("--base-rev", help="baseline: make serve in this commit's tree "
                        "(default: the dev install of --rev)")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--quick", action="store_true", help="one round (make bench)")
    args = parser.parse_args()
    rounds = 1 if args.quick else args.rounds
    variants = {"serve": (args.rev, ["make serve"])}
    if args.base_rev:
        variants["baseline"] = (args.base_rev, ["make serve"])
    else:
        variants["baseline"] = (args.rev, ["make .venv/.installed", "make serve"])
    baseline = (f"make serve of {args.base_rev}" if args.base_rev
                else f"dev install of {args.rev}, then make serve")
    print(f"cold start of make serve of {args.rev} vs {baseline}; {rounds} round(s), "
          f"pip cache as found, {os.cpu_count()} cores")
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for number in range(1, rounds + 1):
        order = list(variants) if number % 2 else list(reversed(variants))
        for name in order:
            rev, commands = variants[name]
            seconds[name].append(cold_start(name, rev, commands, args.timeout))
        serve, base = seconds["serve"][-1], seconds["baseline"][-1]
        print(f"round {number}: serve {serve:.1f} s, baseline {base:.1f} s, "
              f"baseline/serve {base / serve:.2f}x")
    serve, base = statistics.median(seconds["serve"]), statistics.median(seconds["baseline"])
    print(f"median: serve {serve:.1f} s (target <= 60 s), baseline {base:.1f} s, "
          f"baseline/serve {base / serve:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
