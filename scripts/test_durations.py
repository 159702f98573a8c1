"""Write tests/durations.json: each test's wall time from pytest's JUnit XML, for `tests/conftest.py` to
start the longest work first (under `--dist loadgroup` a worker that starts a two-minute test last is
the suite's tail).

    python -m pytest -n 14 --dist loadgroup -m 'not quiet' --junitxml=/tmp/busy.xml
    python -m pytest -n 4 --dist loadgroup -m quiet --junitxml=/tmp/quiet.xml
    python scripts/test_durations.py /tmp/busy.xml /tmp/quiet.xml

Measure beside two `python -c "while True: pass"` processes, as the README's time is stated. Only tests
of at least `MIN_S` are kept (the others are given a default by their `slow` mark); a test missing from
the file (new, renamed) only loses its place in the order, never its run.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "durations.json"
MIN_S = 1.0


def node_id(classname: str, name: str, root: Path = REPO) -> str | None:
    """pytest's node id for a JUnit `classname` (`tests.runtime.test_x` or `tests.runtime.test_x.TestY`)
    and `name`: the longest dotted prefix that is a file, the rest its classes. None if no file."""
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        path = Path(*parts[:cut]).with_suffix(".py")
        if (root / path).is_file():
            # the group goes last, whatever it holds ("@tests/capacity::deployments" was split at its "::")
            return strip_group("::".join([path.as_posix(), *parts[cut:], name]))
    return None


def strip_group(name: str) -> str:
    """A test's node id without the `@group` pytest-xdist appends under `--dist loadgroup`."""
    at = name.rfind("@")
    return name[:at] if at > name.rfind("]") else name


def read(paths: list[Path]) -> dict[str, float]:
    seconds: dict[str, float] = {}
    for path in paths:
        for case in ET.parse(path).getroot().iter("testcase"):
            if case.find("skipped") is not None:
                continue
            nodeid = node_id(case.get("classname", ""), case.get("name", ""))
            if nodeid is not None:
                seconds[nodeid] = float(case.get("time", "0"))
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("junit", nargs="+", type=Path, help="pytest --junitxml files")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.junit if not p.is_file()]
    if missing:
        print(f"test_durations: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    seconds = read(args.junit)
    kept = {k: round(v, 1) for k, v in sorted(seconds.items(), key=lambda kv: (-kv[1], kv[0])) if v >= MIN_S}
    args.out.write_text(json.dumps(kept, indent=0) + "\n", encoding="utf-8")
    print(f"{args.out}: {len(kept)} of {len(seconds)} tests took {MIN_S:g} s or more "
          f"({sum(kept.values()):.0f} s of {sum(seconds.values()):.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
