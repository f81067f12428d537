"""What a reader's eye checks in a plain-text table: every row's cells start (left-aligned) or end
(right-aligned) at the same column as their heading, with a space before or after."""

from __future__ import annotations

from collections.abc import Sequence


def assert_aligned(
    header: str, rows: Sequence[str], left: Sequence[str] = (), right: Sequence[str] = ()
) -> None:
    """``left`` headings' cells start where the heading starts; ``right`` headings' cells end
    where it ends (figures); in every row."""
    for label in left:
        at = header.index(label)
        for row in rows:
            assert row[at] != " " and (at == 0 or row[at - 1] == " "), (label, header, row)
    for label in right:
        end = header.index(label) + len(label)
        for row in rows:
            assert row[end - 1] != " " and row[end : end + 1] in ("", " "), (label, header, row)
