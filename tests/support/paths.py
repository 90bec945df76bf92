"""Where the tests find the repository, their fixtures and the test doubles, wherever a test file sits."""

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent  # the test doubles and helpers (on pytest's pythonpath)
TESTS = SUPPORT.parent
ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"
STANDIN_SETS = FIXTURES / "promptsets-standin"  # stand-ins of the fetched prompt sets (models/promptsets.py), not the public sets
