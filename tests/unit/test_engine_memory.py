"""The engines' working-memory budget (``--max-engine-memory-bytes``), apart from request bytes.

An execution's working memory is counted while it runs: one that alone passes the cap could never
run (413), one that does not fit beside those running waits for none of them (503, retry), and
what is released makes room again. Request bytes under ``--max-inflight-bytes`` do not take from
this budget, nor this from theirs: an OCR page enlarged for its detector is not refused because
ONNX Runtime's buffers were counted as if a client had sent them.
"""

from __future__ import annotations

import pytest

from ferry.api.admission import Admission
from ferry.errors import PayloadTooLarge, Unavailable

MIB = 2**20


def test_an_execution_past_the_cap_alone_is_413_and_counted_as_a_rejection() -> None:
    admission = Admission(max_bytes=256 * MIB, max_engine_bytes=384 * MIB)
    with admission.admit() as ticket, pytest.raises(PayloadTooLarge, match="--max-engine-memory-bytes"):
        ticket.hold_engine(385 * MIB)
    assert admission.rejected == 1
    assert admission.engine.bytes == 0


def test_engine_memory_beside_running_executions_is_503_until_they_release_it() -> None:
    admission = Admission(max_bytes=256 * MIB, max_engine_bytes=384 * MIB)
    with admission.admit() as first, admission.admit() as second:
        release = first.hold_engine(300 * MIB)  # more than --max-inflight-bytes: its own budget
        assert admission.bytes == 0  # request bytes untouched
        with pytest.raises(Unavailable, match="running executions hold 314572800 bytes"):
            second.hold_engine(100 * MIB)
        release()
        release()  # once only
        assert admission.engine.bytes == 0
        second.hold_engine(100 * MIB)()
    assert admission.rejected == 1


def test_no_cap_counts_without_refusing() -> None:
    admission = Admission()
    with admission.admit() as ticket:
        release = ticket.hold_engine(10 * 2**30)
        assert admission.engine.bytes == 10 * 2**30
        release()
    assert admission.engine.bytes == 0
