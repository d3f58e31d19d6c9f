"""Kill rate from `mutmut results --all true` output (lines ``name: status``)."""

from __future__ import annotations

import collections
import re
import sys
from pathlib import Path


def main(path: str) -> int:
    counts: collections.Counter[str] = collections.Counter()
    by_module: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    survivors: list[str] = []
    for line in Path(path).read_text().splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if not sep or "__mutmut_" not in name:
            continue
        counts[status] += 1
        module = re.match(r"^(.*?)\.x[ǁ_]", name)
        by_module[module.group(1) if module else name][status] += 1
        if status in ("survived", "suspicious", "timeout", "no tests"):
            survivors.append(f"{name}: {status}")
    judged = counts["killed"] + counts["survived"] + counts["timeout"] + counts["suspicious"] + counts["no tests"]
    print(f"mutants: {sum(counts.values())} {dict(counts)}")
    for module, c in sorted(by_module.items()):
        j = c["killed"] + c["survived"] + c["timeout"] + c["suspicious"] + c["no tests"]
        print(f"  {module}: {c['killed']}/{j} killed ({100 * c['killed'] / max(j, 1):.1f} %)")
    print(f"kill rate: {counts['killed']}/{judged} = {100 * counts['killed'] / max(judged, 1):.1f} %")
    for s in survivors:
        print("  " + s)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
