"""Benchmarks of the engine, run from the repository root as ``python -m benchmarks.NAME``;
not part of the installed package."""


def replace_section(doc: str, start: str, end: str, text: str, what: str) -> str:
    """``doc`` with the lines between the markers ``start`` and ``end`` replaced by ``text``
    (the generated sections of the documentation).

    Raises
    ------
    ValueError
        ``doc`` lacks either marker, or has them out of order; ``what`` names the section.
    """
    first, last = doc.find(start), doc.find(end)
    if first < 0 or last < 0 or last < first:
        raise ValueError(f"the document has no {what} section: add a line {start} and a "
                         f"line {end} where the table belongs")
    return f"{doc[:first]}{start}\n{text}\n{doc[last:]}"
