"""The CPU session: a complete optimization session on an embedded workload (row softmax in
NumPy, ``run.py``), driven through the ``perfledger`` CLI only, as an agent would drive it.

Steps (each one CLI call; what it records is printed as it goes):

1. ``init`` a ledger; ``env`` for the real environment identity.
2. Evidence before any Target: cProfile of the original (``evidence add``, R6).
3. ``target freeze`` (R1), ``readiness record`` with the real test set's hash and the
   environment identity from ``env`` (R2), ``metric-audit record`` (R3), ``measure baseline`` and
   ``measure aa --record`` (the A/A resolution, R4).
4. ``upstream-check record`` (R10): SciPy ships ``scipy.special.softmax``.
5. Experiment e1 (reuse SciPy's vectorized softmax), its opportunity claim built from the
   profile (R7: the bound is computed here and re-checked by the tool); a screen through
   ``measure workload --no-monitor`` and its verdict; a target stage under the host monitor
   (``--monitor host``, R17) and its derived verdict (R12); a reconciliation if the verdict
   contradicts the claim (R14); the champion (R13).
6. Experiment e2 (in place, fewer temporaries) against the champion: screen, then target or a
   rejection with its scope (R15), whichever the verdicts say. A target stage whose reference
   ran slower than its A/A by more than the bound (the reference watch, R11: on a shared host,
   often the host's load) cannot pass, whatever the candidate's figures: the experiment is
   rejected with that reason, and the session goes on with the next candidate. It does not
   measure the same code again: R14 allows one target stage per experiment, and the same code
   does not come back in a new experiment after a result that did not pass (optional stopping),
   so under load a session can end without a champion, and says so.
7. Experiment e3 (compute in float32): fails the accuracy rule on every call, so its samples mean
   nothing (R5) and it is rejected, closing the implementation only (R15).
8. Final audit of the champion against the original (R13); the champion's code snapshot
   (``champion show``) written back by ``checkout`` (R11); ``handoff record`` (R18),
   ``report --html``, then ``claims``, ``handoff --md`` and ``audit``, which must pass.

Every measurement runs under perfledger's worker protocol (the Target's primary ``cpu_time``
and secondary ``wall_time`` are observed, never reported by ``run.py``): each subject is a
worker process that imports its implementation once, and perfledger sends every call its case,
a fresh seed for its inputs and an output place, times it with its own clock and compares every
output with the reference's (docs/measurement.md, "Workload worker protocol").

Each version of the code is a directory (``WORKDIR/code/IMPL/softmax.py``, a copy of one of
``impls/``): the readiness driver declares its place (``run.py --code {subject}``), so every
measured subject is bound to a snapshot of its code and the reference is checked to be the
original's or the champion's (R11; docs/code-identity.md).

Formal stages (target, final audit) need the monitor over every sample window (R17). Without a
GPU the NVML monitor cannot run, so the formal stages of this CPU workload run under the host
monitor, which measures the CPU time other processes used in each window. On a shared machine
that is often non-zero. An explanation typed by the agent explains nothing (R17): a reviewer
(another actor, ``REVIEWER``) reviews the samples and states that the primary metric is the
worker's own CPU time (``cpu_time``, which perfledger reads from the kernel before and after
each call under its worker protocol), which excludes the time spent waiting for a core; the
session then explains those windows citing that review (``activity explain``). Whether that
explanation holds is for the auditor to judge: the foreign load of each window stays in the
pair's flags and in the samples artifact. The reviewer signs the review with its own SSH key
(a throwaway key this demo makes with ``ssh-keygen``, ``review record --sign-with KEY``), and
the final ``audit --allowed-signers FILE`` checks that key is listed under ``REVIEWER``: a
review appended under the reviewer's name without the key would fail that audit. In this demo
one program plays the agent, the reviewer and the auditor, so it writes that file itself; in
real use the file is the auditor's own, listing keys the agent does not hold (docs/SPEC.md
section 1, "where that stops"). A formal stage with foreign activity on more than 20 % of its
pairs passes only with that review, by an actor other than the experiment's, of that stage's
samples (R17, ``VerdictRecorded`` 11): nothing the agent declares lifts it. A baseline or
recorded A/A whose windows show more than 20 % foreign activity is refused, and nothing is
recorded: the demo measures it again, as the refusal's hint says, up to three times; after the
third refusal, run the demo on a quieter host.

Usage: ``python examples/cpu_session/session.py [--dir DIR] [--quiet]``; prints where the ledger
and the report are, writes ``DIR/session.json`` (champion, verdicts, timings), exits non-zero
if any step fails or the audit does not pass.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
RUN = HERE / "run.py"
TARGET = "t1"
ACTOR = "cpu-session-agent"
#: The Target's modification scope, relative to a code directory (a subject, R11): each version
#: of the code is a directory holding ``softmax.py`` (a copy of one of ``impls/``).
SCOPE = "softmax.py"
#: The readiness driver: ``{subject}`` is where a code directory goes (R11), ``{output}`` where
#: each call writes its output, which perfledger compares with the reference's (R5).
DRIVER = [sys.executable, "examples/cpu_session/run.py", "--code", "{subject}", "--out", "{output}"]
#: The reviewer who explains foreign activity (R17: an actor other than the session's agent).
REVIEWER = "cpu-session-reviewer"
EXPLAIN_FOREIGN = (
    "other processes on a shared host; the primary cpu_time is the kernel's accounting of the "
    "worker's own CPU time, which excludes time spent waiting for a core"
)
#: Pairs per case in each measured stage (R12: at least 5 valid pairs per case).
PAIRS = 5
#: How a verdict's note of the reference watch begins (R11: the reference ran slower than its
#: A/A or baseline by more than the bound, so the comparison cannot pass).
WATCH_NOTE = "R11: the comparison is invalid"


def invalid_by_reference_watch(verdict: dict[str, Any]) -> bool:
    """Whether the reference watch alone kept a target-stage ``verdict`` (its payload) from
    passing: the primary derived from the pairs passed, the watch's note is there and the
    verdict is not a pass (R11). A loaded host slows the reference as a side effect of the
    candidate would; the comparison then says nothing of the candidate, and the rejection says
    so. A verdict that failed or was inconclusive on its own figures is not."""
    return (
        verdict["status"] != "pass"
        and verdict["primary"]["status"] == "pass"
        and any(note.startswith(WATCH_NOTE) for note in verdict.get("notes", []))
    )


def _figure(value: float | None) -> str:
    """A ratio as printed beside its CI: 4 decimals, or ``n/a``."""
    return "n/a" if value is None else f"{value:.4f}"


class _RefusedR17(Exception):
    """A measurement refused for other processes' load on the host (R17); nothing recorded."""


class Session:
    """Drive one session; every decision goes through the ``perfledger`` CLI (a subprocess)."""

    def __init__(self, workdir: Path, quiet: bool) -> None:
        self.workdir = workdir
        self.ledger = workdir / "ledger"
        self.report = workdir / "report.html"
        #: the auditor's allowed-signers file: the reviewer's key (written with the key)
        self.allowed_signers = workdir / "allowed_signers"
        self.quiet = quiet
        self.calls = 0
        #: experiment id -> the implementation it measures (impls/IMPL.py)
        self.impls: dict[str, str] = {}
        #: experiments whose target-stage comparison the reference watch alone made invalid
        self.watched: list[str] = []
        self.env = {**os.environ, "PERFLEDGER_ACTOR": ACTOR, "PYTHONUNBUFFERED": "1"}
        self.env.pop("PERFLEDGER_DIR", None)

    # -- plumbing ----------------------------------------------------------------------------

    def say(self, text: str) -> None:
        """Print one narration line."""
        print(text, flush=True)

    def cli(
        self, *args: str, request: dict[str, Any] | None = None, json_out: bool = True,
        r17_tries: int = 1,
    ) -> Any:  # fmt: skip
        """Run ``perfledger --ledger LEDGER ARGS [--json]`` (``request`` on stdin as
        ``--request -``); returns the parsed JSON answer (or the text). Exits on failure.
        ``r17_tries``: a baseline or A/A refused for other processes' load (R17: nothing was
        recorded; its hint says to measure again) is measured again, up to this many tries."""
        for _ in range(r17_tries - 1):
            try:
                return self._cli(args, request, json_out, quiet_r17=True)
            except _RefusedR17 as refused:
                self.say(f"  refused (R17), measuring again: {refused}")
        return self._cli(args, request, json_out, quiet_r17=False)

    def _cli(
        self, args: tuple[str, ...], request: dict[str, Any] | None, json_out: bool,
        quiet_r17: bool,
    ) -> Any:  # fmt: skip
        """One run of :meth:`cli`; raises _RefusedR17 for an R17 refusal where ``quiet_r17``."""
        argv = [sys.executable, "-m", "perfledger", "--ledger", str(self.ledger), *args]
        if request is not None:
            argv += ["--request", "-"]
        if json_out:
            argv.append("--json")
        shown = " ".join(shlex.quote(a) for a in args)
        self.say(f"$ perfledger {shown}{' --request -' if request is not None else ''}")
        self.calls += 1
        done = subprocess.run(
            argv,
            input=json.dumps(request) if request is not None else None,
            capture_output=True,
            text=True,
            env=self.env,
            cwd=REPO,
            check=False,
        )
        if done.returncode == 3 and quiet_r17 and '"rule":"R17"' in done.stdout:
            raise _RefusedR17(json.loads(done.stdout)["error"]["message"][:160])
        if done.returncode != 0:
            print(done.stdout.rstrip(), file=sys.stderr)
            print(done.stderr.rstrip(), file=sys.stderr)
            raise SystemExit(f"step failed (exit {done.returncode}): perfledger {shown}")
        if not json_out:
            return done.stdout
        return json.loads(done.stdout)

    def workload(self, *args: str) -> dict[str, Any]:
        """Run ``run.py ARGS`` directly (test-set hash, content hashes, profiles) and parse it."""
        done = subprocess.run(
            [sys.executable, str(RUN), *args], capture_output=True, text=True, check=True
        )
        return json.loads(done.stdout)

    def subject(self, impl: str) -> Path:
        """The code directory of one implementation: ``WORKDIR/code/IMPL/softmax.py``, a copy
        of ``impls/IMPL.py`` (what a worktree per candidate would hold)."""
        directory = self.workdir / "code" / impl
        if not directory.is_dir():
            directory.mkdir(parents=True)
            (directory / "softmax.py").write_bytes((HERE / "impls" / f"{impl}.py").read_bytes())
        return directory

    def cmd(self, impl: str) -> str:
        """The driver command of one implementation (a subject of ``measure``): the readiness
        driver with the implementation's code directory in its ``{subject}`` place (R11)."""
        argv = [word.replace("{subject}", str(self.subject(impl))) for word in DRIVER]
        return " ".join(shlex.quote(word) for word in argv)

    def measure(self, experiment: str, stage: str, ref: str, cand: str) -> dict[str, Any]:
        """``measure workload`` of one stage: screens without a monitor, formal stages under the
        host monitor (R17)."""
        args = ["measure", "workload", "--experiment", experiment, "--stage", stage,
                "--ref", self.cmd(ref), "--cand", self.cmd(cand), "--pairs", str(PAIRS),
                "--samples", f"{experiment}-{stage}", "--quiet"]  # fmt: skip
        if stage == "screen":
            args += ["--no-monitor", "--warmup", "0"]
        else:
            args += ["--monitor", "host"]
        answer = self.cli(*args)
        if stage != "screen":
            self.explain_foreign(answer)
        self.say(
            f"  {answer['pairs_recorded']} pairs recorded as {answer['samples_id']} "
            f"({answer['protocol']}: perfledger's clock, the kernel's CPU time, every output "
            "judged)"
        )
        for line in answer.get("findings", []):
            self.say(f"  {line}")
        return answer

    def explain_foreign(self, answer: dict[str, Any]) -> None:
        """R17: the windows of a formal stage where other processes used the CPU are explained
        by a review of another actor (``REVIEWER``), which the session cites; nothing when the
        monitor saw none."""
        samples_id, event_id = answer["samples_id"], answer["event_id"]
        pairs = self.cli("show", event_id)["event"]["payload"]["pairs"]
        foreign = [
            i for i, p in enumerate(pairs) if (p.get("monitor") or {}).get("foreign_activity")
        ]
        if not foreign:
            return
        review_id = f"rv-{samples_id}"
        self.cli("review", "record", "--actor", REVIEWER, *self._sign_with(), request={
            "review_id": review_id, "reviewer": REVIEWER, "model_family": "human",
            "subject": "other", "subject_event": event_id,
            "challenge": f"foreign CPU activity in {len(foreign)} window(s) of {samples_id}",
            "response": EXPLAIN_FOREIGN, "dissent_remains": False,
        })  # fmt: skip
        self.cli("activity", "explain", request={
            "samples_id": samples_id, "pairs": foreign, "explanation": EXPLAIN_FOREIGN,
            "review_id": review_id,
        })  # fmt: skip

    def _sign_with(self) -> tuple[str, ...]:
        """``--sign-with KEY``: the reviewer's throwaway SSH key (made on first use, with the
        auditor's allowed-signers file listing it under ``REVIEWER``); () without ssh-keygen."""
        key = self.workdir / "reviewer-key"
        if not key.exists():
            if shutil.which("ssh-keygen") is None:
                return ()
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", REVIEWER,
                            "-f", str(key)], check=True, capture_output=True)  # fmt: skip
            public = Path(f"{key}.pub").read_text().split()
            self.allowed_signers.write_text(f"{REVIEWER} {public[0]} {public[1]}\n")
        return ("--sign-with", str(key))

    def create(self, impl: str, request: dict[str, Any]) -> dict[str, Any]:
        """``experiment create`` of ``request`` (its candidate: ``impls/IMPL.py``'s
        directory)."""
        self.impls[request["experiment_id"]] = impl
        return self.cli("experiment", "create", request=request)

    def target_stage(self, exp: str, ref_impl: str, verdicts: dict[str, str]) -> dict[str, Any]:
        """The target stage of ``exp`` against ``ref_impl`` and its verdict (reconciled where
        it contradicts the claim, R14). One per experiment (R14): measuring it again until it
        passes would be optional stopping, and so would the same code in a new experiment
        after a result that did not pass, so a comparison the reference watch made invalid
        (:func:`invalid_by_reference_watch`: the reference ran slower than its A/A, as on a
        loaded host) is recorded as such and the session goes on with the next candidate."""
        self.measure(exp, "target", ref_impl, self.impls[exp])
        v = self.verdict(f"{exp}-target")
        verdicts[f"{exp}-target"] = v["status"]
        if v.get("contradicts_claim"):
            self.reconcile(exp, v)
        if invalid_by_reference_watch(v):
            self.watched.append(exp)
            self.say(f"  the reference watch made {exp}'s comparison invalid (R11: the reference "
                     "ran slower than its A/A, as on a loaded host; the candidate's own figures "
                     "passed): no champion from it, and R14 keeps its code from coming back")  # fmt: skip
        return v

    def rejection_reason(self, exp: str, v: dict[str, Any]) -> str:
        """Why ``exp`` is rejected after its target-stage verdict ``v`` (R15)."""
        if exp in self.watched:
            return ("the reference watch (R11) made the target-stage comparison invalid: the "
                    "reference ran slower than its A/A by more than the bound (a loaded host), "
                    "though the candidate's own figures passed; R14 keeps the same code from "
                    "coming back in a new experiment")  # fmt: skip
        return f"target-stage verdict {v['status']} against the champion"

    def verdict(self, samples_id: str) -> dict[str, Any]:
        """``verdict record`` (derived, R12); prints the estimate and CI."""
        v = self.cli("verdict", "record", request={"samples_id": samples_id})
        return self._print_verdict(v["payload"])

    def _print_verdict(self, p: dict[str, Any]) -> dict[str, Any]:
        primary = p["primary"]
        ci = (
            f"[{primary['ci_low']:.4f}, {primary['ci_high']:.4f}]"
            if primary.get("ci_low") is not None
            else "(no CI)"
        )
        self.say(
            f"  verdict {p['status']}: improvement {_figure(primary.get('estimate'))} CI {ci}, "
            f"{primary['n_pairs']} valid pairs, {primary['n_excluded']} excluded"
            + ("; contradicts the claim" if p.get("contradicts_claim") else "")
        )
        return p

    # -- the session -------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Run every step; returns the summary written to ``session.json``."""
        started = time.monotonic()
        summary: dict[str, Any] = {"ledger": str(self.ledger), "report": str(self.report)}
        self.say(f"# CPU session in {self.workdir}")
        self.cli("init", str(self.ledger), "--actor", ACTOR)
        env = self.cli("env")
        self.say(f"  environment {env['environment_id'][:16]}; missing: {len(env['missing'])}")

        # -- evidence before the Target (R6): where the original spends its time
        prof = self.workload("--profile", "loop")
        self.cli("evidence", "add", request={
            "evidence_id": "ev-prof-loop", "layer": "workload",
            "tool": prof["tool"],
            "description": "cProfile of the original, one call per case",
            "facts": [
                {"name": "softmax_share", "value": prof["softmax_share"], "unit": "ratio",
                 "note": "share of the profiled time inside softmax (the replaced region)"},
                {"name": "python_frames_share", "value": prof["python_frames_share"],
                 "unit": "ratio", "note": "time in Python frames: per-row interpreter dispatch"},
                {"name": "calls_per_row", "value": prof["calls_per_row"], "unit": "1"},
            ],
        })  # fmt: skip
        self.say(
            f"  softmax share {prof['softmax_share']:.4f}, Python frames "
            f"{prof['python_frames_share']:.3f}, {prof['calls_per_row']:.1f} calls per row"
        )

        # -- Target, readiness, metric audit, baseline, resolution (R1-R4)
        test_set = self.workload("--test-set")
        original = self.workload("--hash", "loop")["content_hash"]
        self.cli("target", "freeze", request={
            "target_id": TARGET,
            "title": "row softmax CPU time (NumPy, embedded workload)",
            # observed by perfledger (worker protocol): the kernel's CPU accounting of the
            # subject's processes over each call, and perfledger's own clock of it
            "primary": {"name": "cpu_time", "unit": "ms", "direction": "lower_is_better",
                        "statistic": "median"},
            "min_effect": 0.10,
            "secondaries": [{"name": "wall_time", "unit": "ms", "direction": "lower_is_better",
                             "threshold": 0.10}],
            "scope": [SCOPE],
            "risk_boundary": "results within 1e-12 relative of the extended-precision reference",
            "budget": {"wall_s": 600.0, "gpu_s": 0.0},
            # R12: a Python loop replaced by NumPy is expected to run tens of times faster on
            # the large case; declared with the Target, before any data (default 10x)
            "plausible_ratio": 100.0,
        })  # fmt: skip
        self.cli("readiness", "record", request={
            "target_id": TARGET,
            "original": {"content_hash": original, "label": "impls/loop.py",
                         "subject": str(self.subject("loop"))},
            "test_set": {"hash": test_set["hash"], "case_count": test_set["case_count"],
                         "cases": test_set["cases"]},
            "accuracy_rule": "all outputs finite; max relative error <= 1e-12 against a "
                             "numpy.longdouble reference; inputs unchanged",
            "driver": {"argv": DRIVER,
                       "env": {"OMP_NUM_THREADS": "1"}},
            # perfledger compares each candidate output with the original's (R5): both are
            # within 1e-12 of the extended-precision reference, so within 2e-12 of each other
            "accuracy": {"compare": "allclose", "rtol": 1e-11, "atol": 0.0},
            "environment": env["readiness_environment"],
            "statistics": {"min_pairs_per_case": PAIRS},
        })  # fmt: skip
        self.cli("metric-audit", "record", request={
            "target_id": TARGET, "metric": "cpu_time",
            "numerator": "CPU time of the worker's processes across one call (ms): softmax "
                         "and saving its output",
            "denominator": "one call on one case's whole input, drawn from perfledger's seed",
            "unit": "ms", "source": "perfledger's worker protocol: the kernel's CPU clock of "
                                    "the subject's processes, read before and after each call",
            "reconstructed": False, "matches_target": True,
        })  # fmt: skip
        base = self.cli("measure", "baseline", "--target", TARGET, "--cmd", self.cmd("loop"),
                        "--calls", "3", "--quiet", r17_tries=3)  # fmt: skip
        self.say(f"  baseline: {base['values']} calls, median per case {base['per_case_median']}")
        # --accept-resolution: on a loaded machine the A/A can reach the 10 % minimum effect
        # (R4 refuses it otherwise); the verdicts then also need their CI above the resolution
        aa = self.cli("measure", "aa", "--target", TARGET, "--cmd", self.cmd("loop"),
                      "--runs", str(PAIRS), "--record", "--accept-resolution", "--quiet",
                      r17_tries=3)  # fmt: skip
        self.say(f"  resolution {aa['resolution']:.4f} from {aa['repeats']} A/A pairs")
        summary["resolution"] = aa["resolution"]

        # -- upstream check (R10)
        import_scipy = subprocess.run(
            [sys.executable, "-c", "import scipy; print(scipy.__version__)"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        scipy_version = import_scipy.stdout.strip()
        self.cli("upstream-check", "record", request={
            "check_id": "up-softmax", "target_id": TARGET,
            "component": "row softmax over a 2-D float64 array",
            "component_kind": "kernel",
            "sources": [{"name": "scipy.special.softmax",
                         "url": "https://docs.scipy.org/doc/scipy/reference/generated/"
                                "scipy.special.softmax.html",
                         "version": scipy_version}],
            "equivalent_exists": True,
            "equivalent": "scipy.special.softmax(x, axis=1)",
            "blocker": "for an in-place variant: SciPy's allocates full-size temporaries "
                       "(tracemalloc peak about twice the output)",
        })  # fmt: skip

        verdicts: dict[str, str] = {}
        rejected: dict[str, str] = {}
        champion = "original"

        # -- e1: reuse SciPy's vectorized softmax (R7 claim from the profile)
        f = min(round(prof["softmax_share"], 6), 1.0)
        s = round(1.0 / (1.0 - prof["python_frames_share"]), 6)
        bound = 1.0 / ((1.0 - f) + f / s)
        self.say(f"  e1 claim: f={f}, s={s} (Python frames removed), Amdahl bound {bound:.4f}")
        e1 = self.create("scipy_reuse", {
            "experiment_id": "e1", "target_id": TARGET,
            "title": "reuse scipy.special.softmax along the rows (one vectorized call)",
            "candidate": {"subject": str(self.subject("scipy_reuse")),
                          "label": "impls/scipy_reuse.py"},
            "approach": "reuse",
            "new_component": {"component_kind": "kernel",
                              "description": "vectorized row softmax",
                              "upstream_check_id": "up-softmax"},
            "claim": {
                "evidence": [
                    {"evidence_id": "ev-prof-loop", "applicability": "same_boundary",
                     "used_for": "coverage"},
                    {"evidence_id": "ev-prof-loop", "applicability": "conservative_upper_bound",
                     "used_for": "local_speedup"},
                ],
                "scope": {"replaced_region": "softmax() of impls/loop.py",
                          "shapes": ["narrow 1000x32", "wide 64x4096"],
                          "execution_form": "one NumPy call per reduction over the whole array"},
                "replacement_boundary": "the softmax call timed by run.py",
                "coverage": f, "local_speedup": s, "added_cost": 0.0, "stated_bound": bound,
                # R14: in the verdict's units (the fraction of time saved), up to the bound's
                # 1 - 1/bound, the widest interval accepted: an upper speedup at most 4x the
                # lower, no loss inside a predicted gain
                "expected_improvement": {"low": max(0.0, 1.0 - 4.0 / bound),
                                         "high": 1.0 - 1.0 / bound},
            },
            "preregistration": {"rejects": "implementation"},
        })  # fmt: skip
        self.say(f"  e1 needs local speedup {e1['payload'].get('figures', {}).get('s_min')} to "
                 "cross the minimum effect")  # fmt: skip
        self.measure("e1", "screen", "loop", "scipy_reuse")
        verdicts["e1-screen"] = self.verdict("e1-screen")["status"]
        reason = "e1 did not pass its target stage"
        if verdicts["e1-screen"] == "fail":
            reason = "the screen's verdict failed against the original"
        else:
            v = self.target_stage("e1", "loop", verdicts)
            if v["status"] == "pass":
                self.cli("champion", "select", request={
                    "target_id": TARGET, "samples_id": "e1-target", "expected_current": champion,
                    "reason": "target-stage verdict passed, CI above the minimum effect",
                })  # fmt: skip
                champion = "e1"
                self.say("  champion: e1")
            elif "e1" in self.watched:
                reason = self.rejection_reason("e1", v)
        if champion == "original" and "e1" not in rejected:
            self.reject("e1", "implementation", reason,
                        [k for k in verdicts if k.startswith("e1-")])  # fmt: skip
            rejected["e1"] = "implementation"

        # -- e2: in place, fewer temporaries, against the champion
        ref_impl = self.impls.get(champion, "loop")
        mem_ref = self.workload("--memory", ref_impl)
        mem_cand = self.workload("--memory", "inplace")
        self.cli("evidence", "add", request={
            "evidence_id": "ev-mem", "layer": "workload", "tool": mem_ref["tool"],
            "target_id": TARGET,
            "description": f"tracemalloc peak bytes of one call per case: {ref_impl} vs inplace",
            "facts": [
                {"name": f"{ref_impl}_peak_wide", "value": float(mem_ref["peak_bytes"]["wide"]),
                 "unit": "byte"},
                {"name": "inplace_peak_wide", "value": float(mem_cand["peak_bytes"]["wide"]),
                 "unit": "byte"},
                {"name": "output_wide", "value": float(mem_cand["output_bytes"]["wide"]),
                 "unit": "byte"},
            ],
        })  # fmt: skip
        if ref_impl == "loop":
            # no champion (e1 lost): in place also removes the loop's Python frames, e1's
            # mechanism, so the loop's profile bounds it as it bounded e1
            s2, speed_evidence, proxy = s, "ev-prof-loop", "Python frames removed"
        else:
            s2 = round(mem_ref["peak_bytes"]["wide"] / mem_cand["peak_bytes"]["wide"], 6)
            speed_evidence, proxy = "ev-mem", "peak bytes ratio"
        prof2 = self.workload("--profile", ref_impl)
        f2 = min(round(prof2["softmax_share"], 6), 1.0)
        bound2 = 1.0 / ((1.0 - f2) + f2 / s2)
        # predicted: time follows the removed work, as the fraction of the whole time saved
        # (the verdict's units): at most f2 (1 - 1/s2) = 1 - 1/bound2, at least half of it and
        # at least a quarter of its speedup (R14's span)
        high2 = math.floor(f2 * (1 - 1 / s2) * 1e6) / 1e6  # never above the bound (R7)
        low2 = math.ceil(max(0.5 * high2, 1 - 4 * (1 - high2)) * 1e6) / 1e6
        self.say(f"  e2 claim: f={f2}, s={s2} ({proxy}), bound {bound2:.4f}, "
                 f"expected improvement [{low2}, {high2}]")  # fmt: skip
        self.create("inplace", {
            "experiment_id": "e2", "target_id": TARGET,
            "title": "in place: one output buffer, no full-size temporaries",
            "candidate": {"subject": str(self.subject("inplace")),
                          "label": "impls/inplace.py"},
            "approach": "new",
            "new_component": {"component_kind": "kernel",
                              "description": "in-place vectorized row softmax",
                              "upstream_check_id": "up-softmax"},
            "claim": {
                "evidence": [
                    {"evidence_id": "ev-prof-loop", "applicability": "same_boundary",
                     "used_for": "coverage"},
                    {"evidence_id": speed_evidence,
                     "applicability": "conservative_upper_bound", "used_for": "local_speedup"},
                ],
                "scope": {"replaced_region": f"softmax() of impls/{ref_impl}.py",
                          "shapes": ["narrow 1000x32", "wide 64x4096"],
                          "execution_form": "NumPy ufuncs with out=, one allocation"},
                "replacement_boundary": "the softmax call timed by run.py",
                "coverage": f2, "local_speedup": s2, "added_cost": 0.0, "stated_bound": bound2,
                "expected_improvement": {"low": low2, "high": high2},
            },
            "preregistration": {"rejects": "implementation"},
        })  # fmt: skip
        self.staged("e2", ref_impl, verdicts, rejected, champion)
        champion = self.current_champion()

        # -- e3: float32 (fewer bytes, lower precision): fails the accuracy rule (R5, R15)
        ref_impl = self.impls.get(champion, "loop")
        self.create("float32", {
            "experiment_id": "e3", "target_id": TARGET,
            "title": "compute in float32 (half the bytes), cast back to float64",
            "candidate": {"subject": str(self.subject("float32")),
                          "label": "impls/float32.py"},
            "claim": {
                "evidence": [
                    {"evidence_id": "ev-prof-loop", "applicability": "same_boundary",
                     "used_for": "coverage"},
                    {"evidence_id": "ev-mem", "applicability": "conservative_upper_bound",
                     "used_for": "local_speedup"},
                ],
                "scope": {"replaced_region": f"softmax() of impls/{ref_impl}.py",
                          "shapes": ["narrow 1000x32", "wide 64x4096"],
                          "execution_form": "NumPy ufuncs on a float32 copy"},
                "replacement_boundary": "the softmax call timed by run.py",
                "coverage": f2, "local_speedup": 2.0, "added_cost": 0.0,
                "stated_bound": 1.0 / ((1.0 - f2) + f2 / 2.0),
                "expected_improvement": {"low": 0.0, "high": f2 / 2.0},  # 1 - 1/bound
            },
            "preregistration": {"rejects": "implementation"},
        })  # fmt: skip
        self.staged("e3", ref_impl, verdicts, rejected, champion)

        # -- final audit of the champion against the original (R13)
        champion = self.current_champion()
        if champion != "original":
            self.measure(champion, "final_audit", "loop", self.impls[champion])
            fa = self.cli("final-audit", "record", request={
                "target_id": TARGET, "samples_id": f"{champion}-final_audit"})  # fmt: skip
            fa_payload = fa["payload"]
            summary["final_audit"] = fa_payload["status"]
            self.say(f"  final audit {fa_payload['status']} against the original")

        # -- the champion's code (R11): its snapshot, written back by `checkout`
        if champion != "original":
            snapshot = self.cli("champion", "show", TARGET)["snapshot"]
            out = self.workdir / "champion-code"
            done = self.cli("checkout", snapshot["digest"], str(out))
            summary["champion_snapshot"] = snapshot["digest"]
            summary["champion_code"] = str(out)
            self.say(f"  champion's code: snapshot {snapshot['digest'][:16]}, {done['files']} "
                     f"file(s) written to {out}")  # fmt: skip

        # -- handoff (R18), report, read models, audit
        wall = time.monotonic() - started
        self.cli("handoff", "record", "--target", TARGET,
                 "--stop-reason", "the planned directions were measured",
                 "--wall-used", f"{wall:.1f}", "--gpu-used", "0",
                 "--question", "does the gain hold for rows longer than 4096?",
                 "--feedback", "none")  # fmt: skip
        report = self.cli("report", "--html", str(self.report))
        self.say(f"  report: {report['path']} ({report['plots']} plots)")
        claims = self.cli("claims", json_out=False)
        handoff = self.cli("handoff", "--md", json_out=False)
        signers = ("--allowed-signers", str(self.allowed_signers))
        audit = self.cli("audit", *(signers if self.allowed_signers.exists() else ()))
        summary.update(
            champion=champion,
            champion_impl=self.impls.get(champion),
            verdicts=verdicts,
            rejected=rejected,
            reference_watch=self.watched,
            audit_ok=audit.get("ok"),
            state_hash=audit.get("state_hash"),
            events=audit.get("events"),
            cli_calls=self.calls,
            wall_s=round(time.monotonic() - started, 1),
        )
        (self.workdir / "session.json").write_text(json.dumps(summary, indent=2) + "\n")
        if not self.quiet:
            self.say("\n## perfledger claims\n" + claims.rstrip())
            self.say("\n## perfledger handoff --md\n" + handoff.rstrip())
        self.say(
            f"\naudit: {'passed' if audit.get('ok') else 'FAILED'} ({audit.get('events')} events, "
            f"{audit.get('decisions')} decisions re-decided), state_hash {audit.get('state_hash')}"
        )
        self.say(f"champion: {champion}; session took {summary['wall_s']} s, "
                 f"{self.calls} perfledger calls")  # fmt: skip
        if self.watched:
            self.say(f"the reference watch fired on {', '.join(self.watched)} (R11: the "
                     "reference ran slower than its A/A, as on a loaded host): rejected with "
                     "that reason; " + ("no champion this run" if champion == "original" else
                                         f"{champion} is the champion"))  # fmt: skip
        self.say(f"ledger: {self.ledger}\nreport: {self.report}")
        script = Path(sys.executable).with_name("perfledger")
        command = str(script) if script.exists() else "perfledger"
        self.say(f"try:    {command} --ledger {self.ledger} handoff --md   (or claims, state, log)")
        if not audit.get("ok"):
            raise SystemExit("the audit did not pass")
        return summary

    def staged(self, exp: str, ref_impl: str, verdicts: dict[str, str],
               rejected: dict[str, str], champion: str) -> None:  # fmt: skip
        """Screen ``exp``; then its target stage (a champion if it passes, :meth:`target_stage`)
        or a rejection."""
        self.measure(exp, "screen", ref_impl, self.impls[exp])
        v = self.verdict(f"{exp}-screen")
        verdicts[f"{exp}-screen"] = v["status"]
        if v["primary"]["n_pairs"] == 0:
            reason = (
                "every call failed the accuracy rule (max relative error above 1e-12): its "
                "samples have no performance meaning (R5); this closes the implementation only, "
                "the mechanism (fewer bytes moved) is not tested"
            )
            self.reject(exp, "implementation", reason, [f"{exp}-screen"])
            rejected[exp] = "implementation"
            return
        if v["status"] == "fail":
            self.reject(exp, "implementation", "the screen's CI lies wholly below the minimum "
                        "effect against the champion", [f"{exp}-screen"])  # fmt: skip
            rejected[exp] = "implementation"
            return
        v = self.target_stage(exp, ref_impl, verdicts)
        if v["status"] == "pass":
            self.cli("champion", "select", request={
                "target_id": TARGET, "samples_id": f"{exp}-target", "expected_current": champion,
                "reason": "target-stage verdict passed against the current champion",
            })  # fmt: skip
            self.say(f"  champion: {exp}")
        else:
            self.reject(exp, "implementation", self.rejection_reason(exp, v),
                        [f"{exp}-screen", f"{exp}-target"])  # fmt: skip
            rejected[exp] = "implementation"

    def reconcile(self, exp: str, verdict: dict[str, Any]) -> None:
        """R14: the target result fell outside the claim's predicted interval."""
        primary = verdict["primary"]
        self.cli("reconcile", request={
            "experiment_id": exp, "premise": "cost",
            "corrected_model": {
                "description": f"measured improvement {primary['estimate']:.4f} (CI "
                               f"[{primary['ci_low']:.4f}, {primary['ci_high']:.4f}]); the "
                               "claim's local speedup came from a proxy (Python frames or bytes "
                               "allocated) that does not track CPU time one to one",
            },
            "explanation": "the predicted interval was derived from a proxy of the cost; the "
                           "next claims use measured local speedups",
        })  # fmt: skip

    def reject(self, exp: str, closes: str, reason: str, samples_ids: list[str]) -> None:
        """R15: reject ``exp``, stating the scope it closes."""
        self.cli("reject", request={
            "experiment_id": exp, "closes": closes, "reason": reason, "samples_ids": samples_ids,
        })  # fmt: skip
        self.say(f"  rejected {exp}: closes {closes}")

    def current_champion(self) -> str:
        """The Target's champion from ``champion show``."""
        shown = self.cli("champion", "show")
        for row in shown["champions"]:
            if row.get("target_id") == TARGET:
                return row.get("champion") or "original"
        return "original"


def main() -> int:
    """Parse the arguments and run the session."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", help="work directory (default: a new temporary directory)")
    parser.add_argument("--quiet", action="store_true", help="do not print claims and handoff")
    args = parser.parse_args()
    workdir = Path(args.dir or tempfile.mkdtemp(prefix="perfledger-cpu-session-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    if (workdir / "ledger").exists():
        print(f"{workdir / 'ledger'} exists: pass a new --dir", file=sys.stderr)
        return 2
    Session(workdir, args.quiet).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
