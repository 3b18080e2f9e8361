"""The table of `make mutation`: mutants per module, killed, survived, and survivors judged equivalent.

Reads what ``mutmut run`` left in ``mutants/`` (run from the repository root, after it). A surviving
mutant counts as equivalent only when ``scripts/mutation_equivalents.toml`` lists its diff with the
reason it cannot change behaviour; every other survivor is printed with its diff. The score of a
module is killed / (generated - equivalent); the exit status is 1 when a module scores below
``--min`` percent, or when a listed equivalent no longer survives (the list is stale: review it).

    python scripts/mutation_report.py [--min 85] [--markdown] [--verbose]
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import os
import re
import sys
import tokenize
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENTS = ROOT / "scripts" / "mutation_equivalents.toml"

#: the modules of the issue, and the files each covers
MODULES: dict[str, list[str]] = {
    "broker": ["src/hitl_mcp/broker/broker.py", "src/hitl_mcp/core/outcomes.py"],
    "results": ["src/hitl_mcp/core/results.py"],
    "audit": ["src/hitl_mcp/core/audit.py"],
    "outbox": ["src/hitl_mcp/broker/outbox.py", "src/hitl_mcp/core/retry.py"],
    "hosts": ["src/hitl_mcp/mcp/hosts.py"],
    "store": ["src/hitl_mcp/store/sqlite.py", "src/hitl_mcp/core/store.py"],
    "quorum": ["src/hitl_mcp/core/quorum.py"],
    "rules": ["src/hitl_mcp/core/rules.py"],
    "delegation": ["src/hitl_mcp/core/delegation.py"],
    "escalation": ["src/hitl_mcp/core/escalation.py"],
    "settle": ["src/hitl_mcp/core/settle.py"],
    "digests": ["src/hitl_mcp/broker/digests.py"],
    "gate policy": ["src/hitl_mcp/gate/policy.py", "src/hitl_mcp/gate/paths.py"],
}

#: a failing test, pytest's internal error, a timeout, or a test process that crashed (SIGSEGV, SIGABRT:
#: mutmut's "segfault"; e.g. a connection used by a thread after it was closed)
KILLED = {1, 3, 36, 24, -24, 152, 255, -11, -6}
SURVIVED = {0, 5, 33}  # the tests passed, or no test reached the mutant


@dataclass
class Tally:
    generated: int = 0
    killed: int = 0
    survived: int = 0
    equivalent: int = 0
    unchecked: int = 0
    by_rule: int = 0
    """Of the equivalent: judged by the SQL letter-case rule (``sql_case_only``), not listed one by one."""
    unexplained: list[tuple[str, str]] = field(default_factory=list)

    @property
    def score(self) -> float:
        judged = self.generated - self.equivalent - self.unchecked
        return 100.0 * self.killed / judged if judged else 100.0


def function_of(mutant: str) -> str:
    return re.sub(r"__mutmut_\d+$", "", mutant)


def changed_lines(diff: str) -> str:
    lines = [line for line in diff.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    return "\n".join(line[0] + line[1:].strip() for line in lines)


SQL = re.compile(
    r"\b(SELECT|INSERT|UPDATE|DELETE|BEGIN|COMMIT|ROLLBACK|PRAGMA|FROM|WHERE|VALUES|SET|AND|OR|ORDER BY|"
    r"LIMIT|JOIN|RETURNING|COALESCE|INDEXED BY)\b|\w+ = \?"
)
#: the rule below is applied to the store's engines only, whose string literals are SQL or messages
SQL_FILES = ("src/hitl_mcp/store/",)
SQL_CASE = (
    "changes only the letter case of SQL outside its quoted literals (SQLite's keywords, identifiers and "
    "pragma values are case-insensitive), or of a column name looked up in a sqlite3.Row (whose keys are "
    "case-insensitive too)"
)
ROW_KEY = r"""\b(?:row|r|state)\[\s*(["'])(?P<name>[a-z_]+)\1\s*\]"""


def _strings(line: str) -> list[str] | None:
    """The string literals of one line of code (which may open or close a bracket of its statement)."""
    found: list[str] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(line.strip() + "\n").readline):
            if token.type == tokenize.STRING:
                found.append(token.string)
    except tokenize.TokenError:
        pass  # an unclosed bracket at the end of the line: the literals before it are read
    except (IndentationError, SyntaxError):
        return None
    return found


def _fold_sql(text: str) -> str:
    """SQL with everything outside single-quoted literals in lower case."""
    return "".join(part if i % 2 else part.lower() for i, part in enumerate(text.split("'")))


def sql_case_only(diff: str) -> bool:
    """Whether the mutant only changes letter case: of one SQL string literal outside its quotes, or of
    a column name looked up in a sqlite3.Row."""
    removed = [line[1:] for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = [line[1:] for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    if len(removed) != 1 or len(added) != 1:
        return False
    old_line, new_line = removed[0], added[0]
    if old_line == new_line or old_line.lower() != new_line.lower():
        return False
    # a Row key: the case changes only inside row["..."] (or r[...], state[...]), also within an f-string
    first = next(i for i, (a, b) in enumerate(zip(old_line, new_line, strict=True)) if a != b)
    last = max(i for i, (a, b) in enumerate(zip(old_line, new_line, strict=True)) if a != b)
    for key in re.finditer(ROW_KEY, old_line):
        if key.start("name") <= first and last < key.end("name"):
            return True
    before, after = _strings(old_line), _strings(new_line)
    if before is None or after is None or len(before) != len(after):
        return False
    changed = [(b, a) for b, a in zip(before, after, strict=True) if b != a]
    if len(changed) != 1:
        return False
    try:
        old, new = (ast.literal_eval(s) for s in changed[0])
    except ValueError:  # an f-string: not judged here
        return False
    return bool(SQL.search(old.upper())) and _fold_sql(old) == _fold_sql(new)


def load_equivalents() -> dict[tuple[str, str], str]:
    data = tomllib.loads(EQUIVALENTS.read_text()) if EQUIVALENTS.exists() else {}
    return {(e["function"], changed_lines(e["diff"])): e["why"] for e in data.get("equivalent", [])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--min", type=float, default=85.0, help="the lowest score a module may have (percent)"
    )
    parser.add_argument("--markdown", action="store_true", help="also print the table in Markdown")
    parser.add_argument("--verbose", action="store_true", help="list the mutants judged by the SQL rule")
    args = parser.parse_args()

    os.chdir(ROOT)  # mutmut reads its config and mutants/ from here
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    equivalents = load_equivalents()
    used: set[tuple[str, str]] = set()
    tallies: dict[str, Tally] = {}
    for module, paths in MODULES.items():
        tally = tallies[module] = Tally()
        for path in paths:
            meta = ROOT / "mutants" / f"{path}.meta"
            if not meta.exists():
                continue  # not in this run (`make mutation MUTATION_MODULES=...`): the module is "not run"
            codes: dict[str, int | None] = json.loads(meta.read_text())["exit_code_by_key"]
            for mutant, code in sorted(codes.items()):
                tally.generated += 1
                if code in KILLED:
                    tally.killed += 1
                    continue
                if code not in SURVIVED:
                    tally.unchecked += 1  # not run (yet), or skipped, suspicious, crashed
                    tally.unexplained.append((mutant, f"status: exit code {code}"))
                    continue
                tally.survived += 1
                diff = get_diff_for_mutant(mutant, path=path)
                key = (function_of(mutant), changed_lines(diff))
                if key in equivalents:
                    tally.equivalent += 1
                    used.add(key)
                elif path.startswith(SQL_FILES) and sql_case_only(diff):
                    tally.equivalent += 1
                    tally.by_rule += 1
                    if args.verbose:
                        print(f"{mutant}: SQL letter case only\n{changed_lines(diff)}")
                else:
                    tally.unexplained.append((mutant, diff))

    rules = sum(t.by_rule for t in tallies.values())
    ran = {module: t for module, t in tallies.items() if t.unchecked < t.generated}
    header = f"{'module':<8} {'generated':>9} {'killed':>7} {'survived':>9} {'equivalent':>11} {'score':>7}"
    print(header)
    for module, t in tallies.items():
        if module not in ran:
            print(f"{module:<8} {t.generated:>9}   (not run)")
            continue
        print(
            f"{module:<8} {t.generated:>9} {t.killed:>7} {t.survived:>9} {t.equivalent:>11} {t.score:>6.1f}%"
        )
    if rules:
        print(f"({rules} of the equivalent: a string mutant that {SQL_CASE})")
    if args.markdown:
        print("\n| module | generated | killed | survived | equivalent | score |")
        print("|---|---:|---:|---:|---:|---:|")
        for module, t in ran.items():
            print(
                f"| {module} | {t.generated} | {t.killed} | {t.survived} | {t.equivalent} | {t.score:.1f} % |"
            )

    failed = False
    for module, t in ran.items():
        for mutant, diff in t.unexplained:
            print(f"\n{module}: {mutant} survived, not judged equivalent\n{diff}")
        if t.score < args.min or t.unchecked:
            print(f"\n{module}: {t.score:.1f}% (below {args.min:.0f}%, or mutants left unchecked)")
            failed = True
    dotted = {
        module: [p[len("src/") : -len(".py")].replace("/", ".") + "." for p in paths]
        for module, paths in MODULES.items()
    }
    checked = [prefix for module in ran if not tallies[module].unchecked for prefix in dotted[module]]
    stale = [key for key in equivalents if key not in used and key[0].startswith(tuple(checked))]
    for function, lines in stale:
        print(f"\nlisted as equivalent but no longer survives (review the list): {function}\n{lines}")
    return 1 if failed or stale else 0


if __name__ == "__main__":
    sys.exit(main())
