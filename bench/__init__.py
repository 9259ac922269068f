"""Benchmarks that print figures (``tox -e bench``, ``make bench``). Never assertions."""
