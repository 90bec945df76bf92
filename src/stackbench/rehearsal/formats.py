"""Each engine's formats as the rehearsal's stand-in (standin.py) writes them, so that the engine's own parser
(its Adapter) reads the stand-in as it reads the engine. An engine's writers are an object of their own, its
Adapter's `formats` (None: the engine is not rehearsed): only the stand-in writes. They are defined in the engine's
module (engines/), beside the parser that reads each format, so a format is stated once per engine and no engine is
named outside engines/ (tests/unit/test_architecture.py); this module says what a writer has and finds an engine's.
"""

from __future__ import annotations

from typing import Protocol

from stackbench.engines import FORMATS, adapter_for
from stackbench.engines.base import RequestTrace, ServedCounts
from stackbench.serve.process import NotRunnable


class EngineFormats(Protocol):
    # The engine's own argument parser as (environment, Python source parsing sys.argv[1:]; None: the environment's
    # server binary, whose --help lists its arguments), or why none runs.
    flag_parser: tuple[str, str | None] | str

    def startup_log(self, facts: dict, name: str) -> list[str]:
        """The start-up lines parse_log reads (KV pool, weights, context, slots), sized from `facts`
        (launcher.engine_facts); `name` stands where the engine names itself."""

    def metrics_exposition(self, counts: ServedCounts, facts: dict, name: str) -> str:
        """/metrics as the engine serves it (the names spec_counters and facts_from_metrics read)."""

    def context_error(self, limit: int, asked: int) -> str:
        """The engine's 400 message for a request of `asked` tokens over `limit` (what context_limit reads)."""

    def tokenize_reply(self, ids: list[int], context_len: int) -> dict:
        """The reply of `tokenize_path` holding `ids` (what token_count reads)."""

    def final_chunk_fields(self, trace: RequestTrace) -> dict:
        """What the engine adds to a request's last streamed chunk (what server_timings reads)."""

    def info_routes(self, version: str, facts: dict, slots: int, context_len: int) -> dict[str, object]:
        """The JSON bodies of the GET routes besides health and metrics that self_report and version_path read."""


def formats_for(engine: str) -> EngineFormats:
    """The stand-in's writers of `engine` (an adapter's key); NotRunnable where it has none."""
    if engine not in FORMATS:
        raise NotRunnable(f"rehearsal: the stand-in speaks no {adapter_for(engine).engine_label} formats "
                          "(rehearsal/formats.py)")
    return FORMATS[engine]
