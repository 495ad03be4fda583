"""Attacks on the serving load (:mod:`perfledger.kernels.serving.serving`) by the server under test:
each test runs the real client against a real hostile server on 127.0.0.1
(``serving_hostile.py``, aiohttp.web, in its own process) that tries to get better recorded
figures than it earns, or to hang the client, and checks that the record does not believe it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from serving_hostile import hostile

from perfledger.commands.workflow.serving_record import evidence_request
from perfledger.derive.serving_stats import analyze
from perfledger.errors import BadRequest
from perfledger.kernels.serving import serving as sv


def _requests(tmp_path: Path, n: int = 40, tokens: int = 8) -> tuple[list[Any], str]:
    path = tmp_path / "testset.jsonl"
    path.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": f"q{i}"}],
                        "max_tokens": tokens}) + "\n"
            for i in range(n)
        )
    )  # fmt: skip
    return sv.load_request_set(path)


def _config(**kw: Any) -> sv.LoadConfig:
    base: dict[str, Any] = dict(
        mode="closed", concurrency=2, steady_requests=4, warmup_requests=2, cooldown_requests=2,
        pairs=1,
    )  # fmt: skip
    return sv.LoadConfig(**{**base, **kw})


@pytest.mark.slow
def test_cheat_a_failing_answer_whose_body_never_ends_does_not_hold_the_client(
    tmp_path: Path,
) -> None:
    """An HTTP 500 whose body never ends: the client reads a bounded prefix of it and moves on,
    instead of buffering it without limit until the request's timeout."""
    requests, digest = _requests(tmp_path, n=4)
    config = _config(concurrency=1, steady_requests=2, warmup_requests=1, cooldown_requests=1,
                     timeout_s=20.0)  # fmt: skip
    with hostile() as url:
        t0 = time.monotonic()
        run = sv.run_serving(
            sv.Endpoint(f"{url}/honest/v1", "m"), sv.Endpoint(f"{url}/error_forever/v1", "m"),
            requests, digest, config,
        )  # fmt: skip
        elapsed_s = time.monotonic() - t0
    cand = [r for r in run.requests if r.subject == "cand"]
    assert all(not r.ok and r.error.startswith("http_500") for r in cand), cand  # type: ignore[union-attr]
    assert elapsed_s < 10.0  # not the 20 s timeout per request


@pytest.mark.slow
def test_cheat_more_content_chunks_than_max_tokens_without_usage_fails_the_request(
    tmp_path: Path,
) -> None:
    """A server that splits each token into two chunks and sends no usage would count twice
    the tokens it produced and halve its time per output token; more content chunks than
    ``max_tokens`` is impossible for an honest server (each chunk carries at least one token)."""
    requests, digest = _requests(tmp_path)
    with hostile() as url:
        run = sv.run_serving(
            sv.Endpoint(f"{url}/honest/v1", "m"), sv.Endpoint(f"{url}/split_no_usage/v1", "m"),
            requests, digest, _config(),
        )  # fmt: skip
    cand = [r for r in run.requests if r.subject == "cand"]
    assert cand and all(
        not r.ok and r.error.startswith("usage_mismatch") and r.tpot_s is None  # type: ignore[union-attr]
        for r in cand
    ), [(r.output_tokens, r.error) for r in cand]
    assert all(r.ok and r.output_tokens == 8 for r in run.requests if r.subject == "ref")


def test_cheat_a_candidate_that_redirects_to_another_server_is_not_measured_as_that_server(
    tmp_path: Path,
) -> None:
    """A redirect sends the request (the user's test set) to a server other than the one the
    record names, and records that server's figures under the candidate's URL."""
    requests, digest = _requests(tmp_path)
    with hostile() as url:
        run = sv.run_serving(
            sv.Endpoint(f"{url}/honest/v1", "m"), sv.Endpoint(f"{url}/redirect/v1", "m"),
            requests, digest, _config(),
        )  # fmt: skip
    cand = [r for r in run.requests if r.subject == "cand"]
    assert cand and all(not r.ok and r.error.startswith("http_307") for r in cand), cand  # type: ignore[union-attr]
    assert all(r.ok for r in run.requests if r.subject == "ref")


@pytest.mark.slow
def test_cheat_a_candidate_that_fails_a_request_in_its_slow_windows_gets_no_finding(
    tmp_path: Path,
) -> None:
    """A failed steady request leaves its window pair out of the comparison; a candidate that
    fails one request in each window where it is slow (10x the reference) and is fast (0.5x) in
    the others would be compared on its fast windows only and found faster. The pairs left out
    for failures make the finding inconclusive and are a limitation of the evidence."""
    requests, digest = _requests(tmp_path, n=32)
    with hostile() as url:
        run = sv.run_serving(
            sv.Endpoint(f"{url}/honest/v1", "m"), sv.Endpoint(f"{url}/selective/v1", "m"),
            requests, digest, _config(pairs=4),
        )  # fmt: skip
    failed = [r for r in run.requests if not r.ok]
    assert failed and {r.pair for r in failed} == {1, 3}, failed
    # the candidate's fast and slow windows differ by design: drift is not what is tested here
    report = analyze(run, min_effect=0.05, resamples=500, drift_threshold=100.0)
    ttft = report["summary"]["ttft_s"]["p50"]
    assert ttft["pairs"] == 2 and ttft["ratio"] < 0.8  # the fast windows alone
    assert ttft["finding"] == "inconclusive", ttft
    assert ttft["pairs_left_out"] == 2
    body = evidence_request(
        report, evidence_id="e1", target_id=None, applicability="diagnostic", description="",
        interference_windows=[], monitor_note="host",
    )  # fmt: skip
    assert any("failed" in x for x in body["limitations"]), body["limitations"]


@pytest.mark.slow
def test_cheat_a_tail_quantile_of_too_few_requests_is_not_recorded_as_evidence(
    tmp_path: Path,
) -> None:
    """A p99 of 4 steady requests a window is their largest, not a p99: recorded as evidence it
    would claim a tail the run never saw (R7, R12)."""
    requests, digest = _requests(tmp_path)
    with hostile() as url:
        endpoint = sv.Endpoint(f"{url}/honest/v1", "m")
        run = sv.run_serving(endpoint, endpoint, requests, digest, _config(pairs=2))
    report = analyze(run, resamples=200)
    assert report["summary"]["ttft_s"]["p99"]["finding"] == "too_few_requests"
    assert report["summary"]["ttft_s"]["p50"]["finding"] != "too_few_requests"
    body = evidence_request(
        report, evidence_id="e1", target_id=None,
        applicability="diagnostic", description="", interference_windows=[], monitor_note="host",
    )  # fmt: skip
    names = [f["name"] for f in body["facts"]]
    assert "ref.ttft.p50" in names and "cand_over_ref.ttft.p50" in names
    assert not [n for n in names if n.endswith((".p95", ".p99"))], names
    assert any(x.startswith("p95, p99 left out") for x in body["limitations"])


@pytest.mark.slow
def test_cheat_an_answer_that_ends_early_but_reports_full_usage_is_not_compared(
    tmp_path: Path,
) -> None:
    """A candidate that streams half the tokens and reports ``max_tokens`` in its usage passes
    the per-request count check (a chunk may carry several tokens) and the pair's token check,
    and ends sooner without being faster; the text it sent is half the reference's."""
    requests, digest = _requests(tmp_path)
    with hostile() as url:
        run = sv.run_serving(
            sv.Endpoint(f"{url}/honest/v1", "m"), sv.Endpoint(f"{url}/short_claims_full/v1", "m"),
            requests, digest, _config(pairs=2),
        )  # fmt: skip
    cand = [r for r in run.requests if r.subject == "cand"]
    assert all(r.ok and r.output_tokens == 8 for r in cand)  # the claim is believable alone
    report = analyze(run, resamples=200)
    assert report["usable_pairs"] == 0, [p["reasons"] for p in report["pairs"]]
    assert all(
        any(x.startswith("output_text_differs:") for x in p["reasons"]) for p in report["pairs"]
    )


def test_cheat_connection_set_up_does_not_land_in_the_steady_state(tmp_path: Path) -> None:
    """Closed loop, 8 workers: each worker's first request opens a connection to a server that
    is cold on it (300 ms to the first token, 20 ms after). With fewer warm-up requests than
    workers, some of those first requests were steady samples: a subject restarted or cold
    before its windows had its tail inflated. The warm-up is at least one request per worker
    (the default), and fewer is refused."""
    requests, digest = _requests(tmp_path, n=40)
    config = sv.LoadConfig(mode="closed", concurrency=8, steady_requests=16, pairs=1)
    with hostile() as url:
        run = sv.run_serving(
            sv.Endpoint(f"{url}/cold_connections/v1", "m"), None, requests, digest, config
        )
    # the server's answers on a new connection are "cold0 cold1 ...": 6 bytes a token, not 3
    first_on_connection = [r for r in run.requests if r.output_bytes == 8 * 6]
    assert len(first_on_connection) == 8  # one per worker
    assert all(r.phase == "warmup" for r in first_on_connection), first_on_connection
    with pytest.raises(BadRequest, match="warm-up"):
        sv.LoadConfig(mode="closed", concurrency=8, warmup_requests=5).check()
    with pytest.raises(BadRequest, match="cool-down"):
        sv.LoadConfig(mode="closed", concurrency=8, warmup_requests=8, cooldown_requests=5).check()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("behaviour", "error"),
    [
        ("choices_not_a_list", "bad_chunk"),
        ("deep_json", "bad_chunk"),
        ("long_line", "bad_stream"),
        ("error_object", "server_error"),
    ],
)
def test_cheat_a_malformed_chunk_fails_its_request_and_does_not_crash_the_run(
    tmp_path: Path, behaviour: str, error: str
) -> None:
    """A chunk whose ``choices`` is not a list, JSON nested deeper than the decoder's
    recursion, a line longer than the client reads, an error object in mid-stream (the answer
    so far would pass for a short one): the request fails and the run goes on (no traceback)."""
    requests, digest = _requests(tmp_path)
    with hostile() as url:
        run = sv.run_serving(
            sv.Endpoint(f"{url}/honest/v1", "m"), sv.Endpoint(f"{url}/{behaviour}/v1", "m"),
            requests, digest, _config(),
        )  # fmt: skip
    cand = [r for r in run.requests if r.subject == "cand"]
    assert cand and all(not r.ok and r.error.startswith(error) for r in cand), cand  # type: ignore[union-attr]
    assert all(r.ok for r in run.requests if r.subject == "ref")


@pytest.mark.slow
def test_cheat_a_server_that_never_answers_holds_a_window_for_one_timeout(
    tmp_path: Path,
) -> None:
    """A candidate that sends its headers and then nothing would hold the run for every
    request's timeout (here 6 requests a window, one at a time: 12 s a window); after the
    first timeout the window's other requests are not sent, and recorded failed."""
    requests, digest = _requests(tmp_path)
    config = _config(concurrency=1, steady_requests=4, warmup_requests=1, cooldown_requests=1,
                     pairs=2, timeout_s=2.0)  # fmt: skip
    with hostile() as url:
        t0 = time.monotonic()
        run = sv.run_serving(
            sv.Endpoint(f"{url}/honest/v1", "m"), sv.Endpoint(f"{url}/hang/v1", "m"),
            requests, digest, config,
        )  # fmt: skip
        elapsed_s = time.monotonic() - t0
    cand = [r for r in run.requests if r.subject == "cand"]
    assert cand and not any(r.ok for r in cand)
    assert all(r.error.startswith(("timeout", "abandoned")) for r in cand), cand  # type: ignore[union-attr]
    assert all(r.ok for r in run.requests if r.subject == "ref")
    assert elapsed_s < 12.0, elapsed_s  # two candidate windows of ~2 s, not of 12 s
    assert analyze(run, resamples=200)["usable_pairs"] == 0


@pytest.mark.slow
def test_cheat_a_server_that_remembers_answers_gains_nothing_from_repeated_requests(
    tmp_path: Path,
) -> None:
    """A candidate that answers a prompt it has seen from memory (2 ms to the first token, 40 ms
    for a new one; the reference takes 20 ms for every one) was found faster when the run cycled
    a 12-line set through 4 pairs of 8-request windows. A run that would send a subject one
    request twice is refused; over a set large enough, the candidate is found slower, as it is."""
    small, small_digest = _requests(tmp_path, n=12)
    with hostile() as url:
        ref, cand = sv.Endpoint(f"{url}/honest/v1", "m"), sv.Endpoint(f"{url}/memo/v1", "m")
        with pytest.raises(BadRequest, match="request set holds 12"):
            sv.run_serving(ref, cand, small, small_digest, _config(pairs=4))
        large, digest = _requests(tmp_path, n=32)
        run = sv.run_serving(ref, cand, large, digest, _config(pairs=4))
    report = analyze(run, min_effect=0.05, resamples=500, drift_threshold=100.0)
    assert report["summary"]["ttft_s"]["p50"]["finding"] == "higher", report["summary"]["ttft_s"]


@pytest.mark.slow
def test_cheat_a_second_choice_does_not_count_as_output(tmp_path: Path) -> None:
    """One answer was asked for (``n`` = 1); a server that streams half the tokens, each twice as
    choices 0 and 1, would show the token count and the text size of a full answer."""
    requests, digest = _requests(tmp_path)
    with hostile() as url:
        run = sv.run_serving(
            sv.Endpoint(f"{url}/honest/v1", "m"), sv.Endpoint(f"{url}/dup_choices/v1", "m"),
            requests, digest, _config(),
        )  # fmt: skip
    cand = [r for r in run.requests if r.subject == "cand"]
    assert cand and all(not r.ok and "choice" in r.error for r in cand), cand  # type: ignore[operator]
    assert analyze(run, resamples=200)["usable_pairs"] == 0


@pytest.mark.slow
def test_cheat_one_window_pair_gives_no_finding(tmp_path: Path) -> None:
    """With one usable window pair the summary's bootstrap cannot resample pairs: its CI is the
    spread of requests inside two windows, blind to how windows differ, and a difference of one
    pair would be reported (and recorded as evidence) as a finding."""
    requests, digest = _requests(tmp_path)
    with hostile() as url:
        run = sv.run_serving(
            sv.Endpoint(f"{url}/honest/v1", "m"), sv.Endpoint(f"{url}/fast/v1", "m"),
            requests, digest, _config(pairs=1),
        )  # fmt: skip
    ttft = analyze(run, min_effect=0.05, resamples=500)["summary"]["ttft_s"]["p50"]
    assert ttft["pairs"] == 1 and ttft["ratio"] < 0.5  # the fast server is ~10x faster
    assert ttft["finding"] == "too_few_pairs", ttft


@pytest.mark.slow
def test_cheat_a_candidate_that_drifts_where_slow_gets_no_finding(tmp_path: Path) -> None:
    """A window pair with a drifting window is left out; a candidate that is fast (0.5x the
    reference) in three windows and 15x slower in the fourth makes that window drift and would be
    compared on the other three (found faster, though over all four it is not). Any pair left
    out for drift makes the findings inconclusive."""
    requests, digest = _requests(tmp_path)
    with hostile() as url:
        run = sv.run_serving(
            sv.Endpoint(f"{url}/honest/v1", "m"), sv.Endpoint(f"{url}/drifts_where_slow/v1", "m"),
            requests, digest, _config(pairs=4, steady_requests=6),
        )  # fmt: skip
    report = analyze(run, min_effect=0.05, resamples=500)
    by_pair = {p["pair"]: p for p in report["pairs"]}
    assert "drift:cand" in by_pair[3]["reasons"], by_pair[3]
    ttft = report["summary"]["ttft_s"]["p50"]
    assert ttft["ratio"] < 0.8 and ttft["finding"] == "inconclusive", ttft
    assert ttft["pairs_left_out"] >= 1


@pytest.mark.slow
def test_cheat_a_formal_stage_is_not_recorded_on_the_pairs_left_after_drift(
    tmp_path: Path,
) -> None:
    """The candidate that drifts where it is slow, measured for a formal stage (target) through
    the CLI: recording the three pairs left would give a verdict on windows the candidate chose;
    the run is refused (R12) and nothing is recorded."""
    from test_serving_cli import _cli, _setup

    path = tmp_path / "testset.jsonl"
    path.write_text(
        "".join(
            json.dumps({"messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 6}) + "\n"
            for i in range(40)
        )
    )
    import blake3

    ledger_path = tmp_path / "ledger"
    # serving samples are measured (provenance perfledger, R5): no outside samples are allowed
    _setup(ledger_path, "blake3:" + blake3.blake3(path.read_bytes()).hexdigest())
    with hostile() as url:
        common = ["--concurrency", "2", "--warmup", "2", "--cooldown", "2", "--steady", "6",
                  "--pairs", "4", "--experiment", "e1", "--quiet", "--json"]  # fmt: skip
        screen = _cli(ledger_path, tmp_path, "measure", "serving", "--ref-url",
                      f"{url}/honest/v1", "--cand-url", f"{url}/fast/v1", "--requests",
                      str(path), *common, "--stage", "screen", "--no-monitor")  # fmt: skip
        assert screen.returncode == 0, screen.stdout + screen.stderr
        verdict = _cli(ledger_path, tmp_path, "verdict", "record", "--samples",
                       json.loads(screen.stdout)["samples_id"], "--json")  # fmt: skip
        assert verdict.returncode == 0, verdict.stdout + verdict.stderr
        proc = _cli(ledger_path, tmp_path, "measure", "serving", "--ref-url", f"{url}/honest/v1",
                    "--cand-url", f"{url}/drifts_where_slow/v1", "--requests", str(path),
                    "--concurrency", "2", "--warmup", "2", "--cooldown", "2", "--steady", "6",
                    "--pairs", "4", "--experiment", "e1", "--stage", "target", "--monitor",
                    "host", "--quiet",
                    "--json")  # fmt: skip
    assert proc.returncode == 3, proc.stdout + proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["rule"] == "R12" and "left out" in error["message"], error
