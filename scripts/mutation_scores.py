"""Each module's mutation score from `mutmut results --all true` on stdin (scripts/mutate prints it).

A mutant is named ``<module>.x_<function>__mutmut_<n>`` or ``<module>.xǁ<Class>ǁ<method>__mutmut_<n>``; its
score counts killed mutants (a timeout too: an endless loop) over the mutants checked.
"""
from __future__ import annotations

import collections
import re
import sys

NAME = re.compile(r"^(?P<module>[\w.]+?)\.x(?:_|ǁ).*__mutmut_\d+$")
NOT_CHECKED = "not checked"


def scores(lines: list[str]) -> dict[str, collections.Counter[str]]:
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in lines:
        name, _, status = line.strip().rpartition(": ")
        found = NAME.match(name)
        if found and status != NOT_CHECKED:
            counts[found["module"]][status] += 1
    return counts


def line(module: str, c: collections.Counter[str]) -> str:
    killed = c["killed"] + c["timeout"]
    checked = sum(c.values())
    return (f"{module}: {killed} of {checked} killed ({100 * killed / max(checked, 1):.1f}%); "
            f"{c['survived']} survived, {c['no tests']} reached by no test")


def main() -> None:
    counts = scores(sys.stdin.readlines())
    total: collections.Counter[str] = collections.Counter()
    for module in sorted(counts):
        total.update(counts[module])
        print(line(module, counts[module]))
    print(line("all", total))


if __name__ == "__main__":
    main()
