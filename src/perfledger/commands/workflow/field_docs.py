"""What every request field means, with its unit and range: the ``description`` of each property
in the requests' JSON Schemas (``perfledger schema OP``, the MCP tools' input schemas, the
committed ``schemas/``).

Kept as one table beside the models rather than a ``Meta(description=...)`` on each field, so
the closed models stay short to read; :func:`describe` fills in a schema's properties that the
model itself did not describe (a field's own ``Meta(description=...)`` wins). ``Model.field``
entries override the plain ``field`` entry where one name means different things.
"""

from __future__ import annotations

from typing import Any

#: field -> description (units and ranges in words).
#: What a workload driver does (SPEC.md section 5, "Workload worker protocol"): said where an
#: agent that never reads ``measure workload --help`` looks (the readiness schema, the MCP
#: server). The worker protocol is the default and the only one whose figures decide (R5).
DRIVER_CONTRACT = (
    "The driver is a worker (the default --protocol worker; the Target's primary is wall_time "
    "or cpu_time, which perfledger observes): a Python subject calls "
    "perfledger.subject.serve(setup, call), and call(state, case, seed, output) makes its "
    "inputs from the seed, does one unit of work and writes its output at the output path; "
    "perfledger times every call with its own clock, reads its CPU time from the kernel and "
    "judges every output. Any language may speak it: one JSON object a line on the pipes named "
    "by $PERFLEDGER_WORKER_FDS (ready, call, done, exit). By hand or with --protocol command, "
    "one call per process from $PERFLEDGER_CASE, $PERFLEDGER_SEED and $PERFLEDGER_OUTPUT. What "
    "a subject reports of itself is kept labelled reported and decides nothing; a failure, a "
    "timeout or an answer out of protocol is a failed call."
)
#: The ``{output}`` file formats and what exact/allclose compare (:mod:`perfledger.derive.outputs`).
OUTPUT_FORMATS = (
    "Each call writes its output to the {output} path as .npy (numpy.save), .npz "
    "(numpy.savez: same array names on both sides) or JSON; the measuring process compares "
    "the candidate's with the reference's of the same pair (same case and {seed}): exact = "
    "same shape, dtype and values; allclose = same shape, |cand - ref| <= atol + rtol * |ref| "
    "element-wise on numbers, everything else exactly; NaN never equal."
)
FIELDS: dict[str, str] = {
    # ids and hashes
    "target_id": "The Target's id (chosen at target.freeze): 1-128 characters of A-Z a-z 0-9 . _ : -.",
    "experiment_id": "The experiment's id (chosen at experiment.create).",
    "samples_id": "The samples' id (chosen at samples.record, or by measure --samples).",
    "evidence_id": "The evidence's id (chosen at evidence.add).",
    "check_id": "This upstream check's id (chosen here).",
    "advice_id": "This advice's id (chosen here).",
    "result_id": "This local result's id (chosen here).",
    "conflict_id": "The conflict's id (16 hex characters; `perfledger status` lists open ones).",
    "run_id": "The kernel-iteration run's id (chosen at loop.setup).",
    "upstream_check_id": "The upstream check (R10) this component was checked by.",
    "content_hash": "Content hash of the code, e.g. sha256:<hex> (8-200 characters).",
    "candidate_hash": "The candidate's content hash (the experiment's candidate.content_hash).",
    "original_hash": "The original's content hash, as recorded in readiness.",
    "test_set_hash": "The test set's hash, as recorded in readiness (R11).",
    "environment_id": "The environment identity recorded by readiness (`perfledger env`, "
    "environment_id); samples from another environment are refused (R11).",
    "report_hash": "Hash of the raw profiler report the facts were read from.",
    "kernel_hash": "Content hash of the profiled kernel's source.",
    "hash": "The test set's content hash (supplied by the user, never generated: R2).",
    "digest": "The snapshot's tree digest (blake3 hex), taken by perfledger.",
    "blake3": "blake3 hex digest of the file's bytes (64 hex characters).",
    # Target
    "title": "A short human title.",
    "primary": "The primary metric: name, unit, direction, statistic (R1).",
    "min_effect": "Minimum effect that counts as a gain, a ratio (0.05 = 5 %); > 0.",
    "guardrails": "Constraints: metrics that may regress at most allowed_regression (R1, R12).",
    "secondaries": "Pre-declared secondary metrics with their gain thresholds (R1, R13).",
    "scope": "Allowed modification scope: path globs relative to a subject directory "
    "(`*`, `?` within a directory, `**` across) (R1, R11).",
    "risk_boundary": "What may not change (numerics, APIs, ...), in words (R1).",
    "budget": "The budget: wall_s and gpu_s, seconds (R1, R18).",
    "host_advice_only": "Host changes are advice only, never applied by the tool (R16); default true.",
    "diagnostic": "A diagnostic Target binds existing reports only and never yields a "
    "workload-level claim (R2); default false.",
    "plausible_ratio": "The widest plausible candidate/reference ratio of the primary, either "
    "way (> 1; default 10): a case measured beyond it is flagged and blocks champion selection "
    "until another actor's review explains it (R12).",
    "new_target": "The new Target's full definition (a target.freeze request).",
    "reason": "Why, in words.",
    "name": "A name (1-200 characters).",
    "unit": "The unit of the values, e.g. ms, s, tokens/s, MB, ratio.",
    "direction": "lower_is_better or higher_is_better.",
    "statistic": "The statistic compared: mean, median (default), p95, p99 or throughput.",
    "metric": "The metric's name, as in the Target.",
    "allowed_regression": "Largest allowed regression of the guardrail metric, a ratio in "
    "[0, 100] (0.02 = 2 %).",
    "threshold": "Improvement that counts as a gain of this secondary, a ratio in (0, 100].",
    "wall_s": "Wall-clock time, seconds, in [0, 31622400] (366 days).",
    "gpu_s": "GPU time, seconds, in [0, 1e10].",
    # readiness
    "original": "The original: content hash, label, and subject (its code directory, "
    "snapshotted now, R11).",
    "test_set": "The real test set: hash, case count and case names, supplied by the user (R2).",
    "case_count": "Number of test cases (>= 1).",
    "cases": "The test cases' names.",
    "supplied_by": "Who supplied the test set: user (the tool never generates one, R2).",
    "accuracy_rule": "The accuracy rule a call must pass, in words (R2, R5).",
    "driver": "The driver command: argv with {subject} (code directory), {case}, {output} (where "
    "each call writes its output) and {seed} (a fresh seed per pair) places, environment "
    "variables, working directory (R2, R5, R11). " + DRIVER_CONTRACT,
    "argv": "The command's words; {subject} marks the code directory's place, {case} the test "
    "case's, {output} the path each call writes its output to, {seed} the pair's seed.",
    "env": "Environment variables set for the driver (name -> value).",
    "cwd": "Working directory of the driver (default: where perfledger runs).",
    "environment": "Environment identity: GPU, driver, CUDA, toolkit, container (from "
    "`perfledger env --json`, readiness_environment); unknown parts as null (R2).",
    "gpu": "GPU model, or null when unknown.",
    "cuda": "CUDA version, or null when unknown.",
    "toolkit": "Compiler toolkit version (nvcc ...), or null when unknown.",
    "container_base": "Container base image, or null when unknown.",
    "container_overlay": "Container overlay, or null when unknown.",
    "container_runtime": "Container runtime, or null when unknown.",
    "statistics": "Statistical requirements: min_pairs_per_case (>= 5), confidence, resamples.",
    "min_pairs_per_case": "Fewest valid pairs per test case for a verdict (>= 5, R12).",
    "confidence": "Confidence level of the bootstrap CI, a ratio in (0, 1) (default 0.95).",
    "resamples": "Bootstrap resamples, a count >= 1 (default 10,000).",
    "reports": "Existing reports a diagnostic Target binds (R2).",
    "label": "A human label (branch, path, tag).",
    "subject": "The code directory (a path) perfledger snapshots (R11).",
    "snapshot": "The snapshot perfledger took of the subject (R11); not typed by hand.",
    # metric audit, baseline, resolution
    "numerator": "What the metric's numerator measures, with its unit (R3).",
    "denominator": "What it is divided by (one request, one call, ...) (R3).",
    "source": "Where the figure comes from (a driver field, a profiler metric) (R3).",
    "reconstructed": "Whether the metric is reconstructed from other figures rather than read (R3).",
    "matches_target": "Whether the metric matches the Target's primary; false makes results "
    "diagnostic only (R3).",
    "notes": "Free notes.",
    "values": "Samples, in the metric's unit, finite.",
    "call_ids": "One id per value: the driver call it came from (optional).",
    "resolution": "Measured resolution, a ratio >= 0 (0.01 = 1 %): the largest distance of an "
    "A/A CI end from no change (R4).",
    "repeats": "How many A/A repeats the resolution comes from (>= 2).",
    "method": "How it was measured or chosen.",
    # evidence
    "layer": "The evidence's layer: kernel, workload or service (R6).",
    "applicability": "same_boundary, conservative_upper_bound or diagnostic (only the first two "
    "may enter a bound, R6).",
    "tool": "The tool that produced the facts: name and version (unknown versions are refused, "
    "R6).",
    "version": "Version string.",
    "facts": "Facts: name, value, unit (a ratio is 0-1), optional note.",
    "value": "The fact's value, a finite number in its unit.",
    "note": "A note on this fact.",
    "description": "A description in words.",
    "boundary": "The boundary the evidence measured: kernels, shapes, CUDA graph (R6).",
    "kernels": "Kernels measured: key, name, launches, grids, blocks, streams.",
    "key": "A kernel key: k and 1-6 digits.",
    "launches": "Number of launches (>= 0).",
    "grids": "Grid shapes.",
    "blocks": "Block shapes.",
    "streams": "CUDA streams.",
    "graph": "Whether the kernels ran in a CUDA graph (null: unknown).",
    "shapes": "The real shapes, in words.",
    "capture": "Where a parsed report came from (command, exit status, source file, hash).",
    "command": "The capture command's words.",
    "exit_status": "The capture command's exit status (-255..255).",
    "source_file": "The report file's path.",
    "source_hash": "The report's hash.",
    "layout": "The report's layout.",
    "grouping": "The digit grouping accepted.",
    "parser": "The parser's version.",
    "limitation": "A recorded limitation (e.g. ERR_NVGPUCTRPERM), never zero metrics (R16).",
    "limitations": "Recorded limitations (R16).",
    # upstream check
    "component": "The component checked, in words (R10).",
    "component_kind": "kernel, communication_primitive or backend_adapter (R10).",
    "sources": "Where was looked: name, url, version (R10).",
    "url": "A URL.",
    "equivalent_exists": "Whether an upstream equivalent exists (R10).",
    "equivalent": "The equivalent found, if any.",
    "blocker": "Why the equivalent cannot be reused, if one exists (R10).",
    # experiment and claim
    "candidate": "The candidate: content hash, label, changed paths (R11).",
    "changed_paths": "Paths the candidate changes, inside the Target's scope (R11; computed by "
    "measure from snapshots).",
    "approach": "new, reuse, backport or adapter (R10: reuse/backport/adapter where an upstream "
    "equivalent exists).",
    "new_component": "A new kernel, primitive or adapter this experiment adds, with its "
    "upstream check (R10).",
    "claim": "The opportunity claim (R7): evidence, scope, coverage f, local speedup s, added "
    "cost, expected improvement interval (R14).",
    "evidence": "Evidence cited: id, applicability, used_for (R6, R7).",
    "used_for": "What the evidence supports: coverage, local_speedup, added_cost or exposure.",
    "replaced_region": "The replaced region, in words.",
    "execution_form": "How it executes after lowering, graph capture, dispatch, fallback, overlap.",
    "replacement_boundary": "Where the candidate replaces the original, in words (R6).",
    "coverage": "f: share of the primary exposed on the critical path in the replaced "
    "component, a ratio in (0, 1] (R7).",
    "local_speedup": "s: expected local speedup of the component, a ratio in (0, 1e6] (2.0 = "
    "twice as fast; > 0 is R7's).",
    "added_cost": "c: added cost elsewhere as a share of the original's time, a ratio in "
    "[0, 100] (default 0; >= 0 is R7's).",
    "exposure": "For a tail (p95, p99) primary: affected share and critical path, instead of a "
    "bound (R7).",
    "affected_share": "Share of requests affected, a ratio in (0, 1].",
    "critical_path": "Why the region is on the critical path, in words.",
    "low": "Lower end of the expected end-to-end improvement, as the verdict measures it (R12): "
    "the fraction of time saved for a lower-is-better primary (0.1 = 1.11x), the relative gain "
    "for a higher-is-better one (0.1 = 1.1x); >= 0 when high > 0 (no loss inside a predicted "
    "gain), and the upper end's speedup at most 4 times the lower end's (R14).",
    "high": "Upper end of the expected end-to-end improvement, as the verdict measures it (R12, a "
    "ratio): at most the bound's, 1 - 1/bound for a lower-is-better primary (bound - 1 for a "
    "higher-is-better one) (R7, R14).",
    "preregistration": "What a failure would reject (R9).",
    "rejects": "implementation, integration or mechanism (R9).",
    "discriminating_evidence": "For mechanism: the evidence that would discriminate (R9, R15).",
    "serves_secondary": "A pre-declared secondary this experiment serves (R8).",
    "merge_plan": "An explicit merge plan, for a bound below the minimum effect (R8).",
    # samples
    "stage": "screen, target or final_audit (R11: in that order).",
    "reference": "What the candidate is compared with: the original or the current champion (R11).",
    "kind": "original or champion.",
    "units": "Metric name -> unit of its values.",
    "pairs": "Paired calls, one per test case and repetition (R11, R12).",
    "case": "The test case's name (one of readiness's cases).",
    "ref": "The reference's side of the pair.",
    "cand": "The candidate's side of the pair.",
    "call_id": "The driver call's id.",
    "correct": "Whether the call passed the accuracy rule (R5).",
    "same_process": "Whether both subjects ran in one driver call (default true).",
    "monitor": "The monitor's observations of the call's window (R17).",
    "observed": "Whether a monitor watched the window (formal stages need one, R17).",
    "foreign_activity": "Whether foreign activity overlapped the window (R17).",
    "explained": "Why foreign activity cannot affect the metric (R17), or null.",
    "flags": "The monitor's flags.",
    "identity": "Both subjects' snapshots, taken by `perfledger measure workload` or `measure "
    "kernel --ref DIR --cand DIR` (R11).",
    "files": "Path -> file entry (blake3, size, mode).",
    "size": "Size in bytes (>= 0).",
    "mode": "git file mode: 100644, 100755 or 120000.",
    "git": "The subject's git work tree: commit, dirty flag, path.",
    "commit": "HEAD's commit (40-64 hex), or null before any.",
    "dirty": "Whether anything under the subject is modified or untracked.",
    "path": "A path.",
    # verdicts and decisions
    "claimed_status": "The status you expect (pass, fail, inconclusive): refused when the "
    "derivation differs (optional).",
    "decision": "select (default) or restore_original (after a failed final audit, R13).",
    "expected_current": "The champion you saw: original or its experiment id (R13 "
    "compare-and-swap).",
    "closes": "What the rejection closes: implementation, integration or mechanism (R15).",
    "evidence_ids": "Evidence behind the rejection.",
    "samples_ids": "Samples behind the rejection.",
    "discriminating_evidence_ids": "The discriminating evidence obtained, to close a mechanism "
    "(R15).",
    "local_proxy": "Whether the rejection rests on a local proxy only (then it cannot close a "
    "mechanism, R15).",
    "premise": "The corrected premise: applicability, scope, coverage, exposure or cost (R14).",
    "corrected_model": "The corrected model: coverage, local speedup, added cost, affected share, "
    "description (R14).",
    "explanation": "The explanation, in words.",
    "scenario": "The scenario where the secondary gain holds (R13).",
    "category": "What the advice is about (driver, clocks, counters, power, services, runtime).",
    "advice": "The advice, in words (never applied by the tool, R16).",
    "applied": "Must stay false: perfledger never applies host changes (R16).",
    "keep": "Which side stands: one of the conflict's options.",
    "explained_by": "Who explains the activity (ActivityExplained schema 1 only; from schema 2 it "
    "is derived: the appender of the review cited, R17).",
    # handoff
    "primary_achieved": "Whether the current champion's own final audit passed (R18); leave it "
    "out: perfledger fills it, and a stated value must be the ledger's.",
    "champion": "The current champion: an experiment id or original.",
    "key_evidence": "Evidence and samples ids behind the champion (filled when left out; each "
    "must be recorded).",
    "gains": "What only you know about the gains, in words, without figures: the figures with "
    "their CIs are filled from the recorded verdicts (figures) (R18).",
    "local_results": "Local result ids (secondary-only gains, R13); leave it out: perfledger "
    "fills it, and a stated list must be the ledger's exactly.",
    "rejected": "Rejected directions with what each closed (R15).",
    "prediction_corrections": "Experiments whose predictions were reconciled (R14); leave it "
    "out: perfledger fills it, and a stated list must be the ledger's exactly.",
    "unresolved_questions": "Questions still open.",
    "stop_reason": "Why work stops.",
    "budget_used": "Budget used: wall_s and gpu_s, seconds.",
    "budget_left": "Budget left: wall_s and gpu_s, seconds; filled from the Target's budget "
    "and budget_used when left out.",
    "resume_needs": "What resuming needs (perfledger clone, head, artifacts); filled when left "
    "out.",
    "feedback": "Friction and feedback, or none.",
    # kernel-iteration loop (R19-R25)
    "subject_kind": "cuda (a kernel) or workload.",
    "baseline": "The baseline kernel's source.",
    "text": "The file's full text.",
    "entry": "The kernel's entry function.",
    "params": "The kernel's parameters: name, C type, integer or not.",
    "ctype": "The parameter's C type.",
    "integer": "Whether the parameter is a scalar integer.",
    "dims": "Problem dimensions: name -> integer.",
    "launch": "Launch configuration: name -> expression.",
    "iterations": "Iterations the run may take (1-100).",
    "ncu_num": "Nsight Compute profiles per iteration (1-50).",
    "sm_arch": "The device's SM architecture, e.g. sm_90 (R23).",
    "catalog_toml": "The method catalog (TOML) the run selects from (R19).",
    "baseline_check": "The baseline's correctness check.",
    "baseline_timing": "The baseline's timing.",
    "reference_timing": "The reference's timing, if measured.",
    "samples_ms": "Samples, milliseconds (> 0).",
    "ref_ms": "The current best's samples in this block, milliseconds (> 0).",
    "cand_ms": "The candidate's samples in this block, milliseconds (> 0).",
    "trials": "Number of correctness trials (>= 0).",
    "max_error": "Largest error seen, in the tolerance's unit.",
    "tolerance": "The tolerance applied, in the unit of max_error.",
    "detail": "Details, in words.",
    "iteration": "The iteration number (>= 1).",
    "attempt": "The attempt number within the iteration (R25: at most 3 retries).",
    "role": "input (the profile that chose the methods) or candidate.",
    "tool_version": "The profiler's version.",
    "metrics": "Metric name -> value.",
    "kernel": "The candidate kernel's source.",
    "selection": "Axis (compute, memory, latency) -> the chosen method and the skipped "
    "higher-priority ones (R19-R24).",
    "chosen": "The method chosen on this axis (R19).",
    "skipped": "Higher-priority methods not chosen, each with its reason (R24).",
    "reuse_metric": "When re-selecting a method recorded ineffective: the metric showing the "
    "bottleneck changed (R21).",
    "analysis": "The iteration's analysis (R24).",
    "correctness": "The candidate's correctness check (R25).",
}

#: ``Model.field`` -> description, where the plain field name means something else.
MODEL_FIELDS: dict[str, str] = {
    "Original.subject": "The original's code directory (a path), put in the driver's {subject} "
    "place: perfledger snapshots every file under it now and records original.snapshot (R11). "
    "Give this, never snapshot.",
    "Original.unsnapshotted": "Only where the driver cannot declare a {subject} place: why the "
    "code cannot be snapshotted. Results are then not bound to code (R11); the handoff says so. "
    "From readiness schema 3, a driver without the place needs this (unless outside samples are "
    "allowed).",
    "ReviewRecord.subject": "What the review challenges: claim, rejection, stop or other.",
    "SubjectSnapshot.coverage": "subject: the snapshot holds every file under the subject "
    "directory (readiness from schema 2 on); absent: only the files inside the Target's scope.",
    "Provenance.source": "perfledger (measured by perfledger measure, with its raw table) or "
    "outside (recorded from elsewhere) (R5).",
    "Statistics.aggregation": "How per-case ratios make the primary verdict (R12): geomean "
    "(geometric mean of per-case ratios, default), total (the test set's total time) or "
    "every_case (every case must pass).",
    "Statistics.allow_case_regression": "true: a case whose CI lies wholly on the losing side "
    "beyond the resolution does not block pass (R12); default false.",
    "Statistics.allow_outside_samples": "true: formal stages (target, final_audit) may use samples "
    "recorded from outside perfledger (R5); default false.",
    "Statistics.allow_explained_foreign_activity": "Ignored (R17, VerdictRecorded schema 11, "
    "FinalAuditRecorded 14): a value the agent types decides nothing and a readiness that sets it "
    "is recorded with a warning; foreign activity on more than 20 % of a formal stage's pairs is "
    "lifted only by a review of the samples by another actor. Default false.",
    "ResolutionRecord.per_case": "The A/A resolution of each test case: case -> ratio (R4).",
    "ReviewRecord.review_id": "This review's id (chosen here).",
    "ReviewRecord.reviewer": "Who reviewed (a person or an agent).",
    "ReviewRecord.model_family": "The reviewer's model family (e.g. another vendor's model), or "
    "human.",
    "ReviewRecord.subject_event": "The reviewed event's full id (64 hex characters).",
    "ReviewRecord.challenge": "The reviewer's challenge, in words.",
    "ReviewRecord.response": "The response to the challenge, in words.",
    "ReviewRecord.dissent_remains": "true while the reviewer still disagrees after the response.",
    "ReviewRecord.resolves": "Earlier reviews whose dissent this one settles (their review ids).",
    "ReviewRecord.explains": "The flags of the reviewed samples this review explains (R12): each "
    "{samples_id, flag: implausible, case} as the samples record it. Only a settled review by "
    "another actor naming a flag clears it; a review naming none clears nothing.",
    "ReviewRecord.signature": "The reviewer's armored SSH signature (namespace "
    "perfledger-review) over the review's canonical content (`perfledger review content`, or "
    "`review record --sign-with KEY`); an auditor checks the key against an allowed-signers "
    "file (`perfledger audit --allowed-signers FILE`).",
    "ReviewFlag.samples_id": "The flagged samples' id (the review's subject_event is their event).",
    "ReviewFlag.flag": "The flag's kind: implausible (a ratio beyond the plausible bound, R12).",
    "ReviewFlag.case": "The flagged test case, as the samples' implausible records it.",
    "SamplesRecord.provenance": "Where the samples come from (R5): set by perfledger measure; "
    "absent or outside for samples recorded from outside perfledger.",
    "Provenance.protocol": "The measuring protocol (e.g. workload_abba).",
    "ActivityExplain.review_id": "The review of the samples' event, dissent settled, by an actor "
    "other than the experiment's creator, the samples' recorder and you: the evidence (R17).",
    "FormalRunStart.protocol": "The protocol the run measures with, as its samples' provenance "
    "will name it (workload_abba, kernel_harness_abba, serving/v1; `outside` for samples "
    "recorded as outside) (R14).",
    "Provenance.settings": "The protocol's settings: name -> value.",
    "Provenance.raw_table": "The attached raw per-call table's artifact name (e.g. samples.json).",
    "ResolutionRecord.raw_table": "The attached A/A raw table (resolution.json, attached by "
    "`perfledger measure aa --record`) the figures are re-derived from (R4); empty: the "
    "resolution is recorded as declared and decides nothing.",
    "Reference.content_hash": "The reference's content hash: the original's or the champion's.",
    "Reference.experiment_id": "For a champion reference: its experiment id.",
    "Candidate.content_hash": "Leave it out where the Target is bound to code (its readiness "
    "driver declares {subject}): perfledger computes it from candidate.subject (blake3:<tree "
    "digest>), and a typed value must equal it. On a Target without a subject directory, the "
    "candidate's content hash you type (e.g. git:<commit>), recorded as declared; it must "
    "differ from the original's and the champion's (R11).",
    "Original.content_hash": "The original's content hash, e.g. sha256:<hex> of its source file "
    "or tree (your choice of hash, 8-200 characters; perfledger does not recompute it): it names "
    "the original. When subject is given, perfledger's own snapshot of that directory (a blake3 "
    "tree digest) is what binds the code every measurement runs (R11); the hash only names it.",
    "SamplesIdentity.candidate": "The candidate's snapshot.",
    "SamplesIdentity.reference": "The reference's snapshot.",
    "SamplesRecord.reference": "The reference: the original, or the current champion (R11).",
    "LoopSetup.reference": "The reference implementation's source (correctness oracle).",
    "LoopSetup.driver": "The driver's words.",
    "LoopSetup.environment": "Environment facts: name -> value (null: unknown).",
    "LoopSetup.min_effect": "Minimum effect, a ratio in (0, 1).",
    "Environment.driver": "GPU driver version, or null when unknown.",
    "SubjectSnapshot.driver": "The driver's files outside the subject: path -> entry.",
    "ReadinessRecord.driver": FIELDS["driver"],
    "HandoffRecord.rejected": "Rejected directions: experiment id and what each closed (R15).",
    "RejectedDirection.closes": "implementation, integration or mechanism (R15).",
    "CorrectedModel.description": "The corrected model, in words.",
    "EvidenceAdd.applicability": "Default applicability of these facts: same_boundary, "
    "conservative_upper_bound or diagnostic (R6).",
    "EvidenceAdd.target_id": "The Target it concerns (optional: evidence may precede a Target, "
    "R6).",
    "EvidenceAdd.tool": "The tool: name and version (unknown versions are refused, R6).",
    "LoopProfile.tool": "The profiler's name.",
    "LoopProfile.units": "Metric name -> unit.",
    "Fact.name": "The fact's name.",
    "Fact.unit": "The fact's unit (ratio for shares, 0-1).",
    "Tool.name": "The tool's name (ncu, nsys, cProfile, ...).",
    "Source.name": "The source's name.",
    "SourceText.name": "The file's name, e.g. kernel_v1.cu.",
    "KernelBoundary.name": "The kernel's name.",
    "ParamModel.name": "The parameter's name.",
    "Secondary.name": "The secondary metric's name.",
    "MetricSpec.name": "The metric's name, as the driver reports it (e.g. time_ms).",
    "MetricSpec.work_metric": "For a rate (unit <work>/s, e.g. tokens/s) or a time per unit "
    "of work (ms/token): the metric the "
    "command reports with every call counting the work the rate divides (e.g. tokens); the "
    "wall-clock check turns the rate into time with it and flags a pair whose calls count "
    "different work (R12). Empty: the rate is not checked against the wall clock.",
    "Guardrail.work_metric": "For a rate guardrail: the metric counting its work, as "
    "MetricSpec.work_metric.",
    "Secondary.work_metric": "For a rate secondary: the metric counting its work, as "
    "MetricSpec.work_metric.",
    "SkippedModel.reason": "Why it was not chosen: the reason code (R24).",
    "SkippedModel.method": "The method skipped.",
    "TimingModel.stop_reason": "Why sampling stopped.",
    "LoopFinalize.pairs": "Final paired blocks: baseline (ref_ms) against best (cand_ms), "
    "milliseconds; empty when the baseline is still best.",
    "LoopCloseIter.pairs": "Paired interleaved blocks: current best (ref_ms) against candidate "
    "(cand_ms), milliseconds.",
    "ActivityExplain.pairs": "Indices (0-based, >= 0) of the pairs whose activity is explained "
    "(R17).",
    "ActivityExplain.explanation": "Why the foreign activity cannot affect the metric (R17).",
    "Reconcile.explanation": "What was wrong in the prediction and why (R14).",
    "ResolutionRecord.method": "How the resolution was measured (default: an A/A comparison).",
    "ResolutionRecord.notes": "Notes on the A/A measurement.",
    "MetricAuditRecord.notes": "Notes on the audit.",
    "BaselineRecord.values": "The original's samples of the primary, in its unit (finite).",
    "BaselineRecord.raw_table": "The attached raw per-call table of the original (baseline.json, "
    "attached by `perfledger measure baseline`) the values are re-derived from (R4); empty: the "
    "baseline is recorded as declared and decides nothing.",
    "SubjectSample.values": "Metric name -> samples of this call, in the metric's unit (any "
    "finite number: how plausible it is, is R12's).",
    "SubjectSample.wall_s": "The workload driver's wall time of the call, seconds, in (0, 1e6].",
    "SubjectSample.environment_id": "The environment identity of the call (R11).",
    "SubjectSample.output": "How the measuring process judged the call's output (R5; written by "
    "measure workload where the readiness driver declares {output}); absent: judged by the "
    "subject only.",
    "ReadinessRecord.accuracy": "How the measuring process judges a workload's outputs (R5): "
    'compare exact or allclose (the driver needs an {output} place), or "self_reported" when '
    "outputs cannot be compared (the subject's own correct is all there is). " + OUTPUT_FORMATS,
    "Accuracy.compare": "exact (same shape, dtype and values), allclose (|cand - ref| <= atol + "
    "rtol * |ref| element-wise) or self_reported; NaN is never equal.",
    "Accuracy.rtol": "Relative tolerance of allclose, a ratio in [0, 1] (1e-5 = 0.001 %); "
    "0 for exact.",
    "Accuracy.atol": "Absolute tolerance of allclose, in the output values' own unit, >= 0; 0 "
    "for exact.",
    "OutputCheck.method": "The comparison rule's version (outputs_v2; outputs_v1 before allclose held dtypes).",
    "OutputCheck.compare": "exact or allclose, as the readiness's accuracy says.",
    "OutputCheck.self_correct": "What the subject's own accuracy check said (its JSON correct).",
    "OutputCheck.blake3": "blake3 hex of the output file (64 hex characters); null when the "
    "call wrote none or it was unreadable.",
    "OutputCheck.size": "The output file's size in bytes (>= 0); null when none was read.",
    "OutputCheck.ok": "The reference's output was usable; the candidate's matched the reference's "
    "output of the same pair. The call's correct is self_correct and ok.",
    "OutputCheck.reason": "Why not ok ('' when ok): the first differences, or why the output was "
    "unusable.",
    "FinalAuditRecord.samples_id": "The final-audit samples: the champion against the original "
    "(R13).",
    "LocalResultRecord.samples_id": "Target-stage samples showing the secondary-only gain.",
    "LocalResultRecord.metric": "The secondary metric that gained (R13).",
    "ChampionSelect.samples_id": "The target-stage samples whose verdict passed (R13); none for "
    "restore_original.",
    "ChampionSelect.reason": "Why (optional).",
    "TargetSupersede.reason": "Why the Target is superseded.",
    "ExperimentCreate.title": "What the candidate does, in words.",
    "HostAdviceRecord.reason": "Why the host change would help.",
    "ConflictResolve.reason": "Why this side stands.",
    "Reject.reason": "Why the experiment is rejected.",
    "Capture.command": "The capture command's words.",
    "Boundary.shapes": "The shapes measured, in words.",
    "CandidateScope.shapes": "The real shapes the candidate handles.",
    "OpportunityClaim.evidence": "Evidence cited: id, applicability, used_for (R6, R7).",
    "OpportunityClaim.scope": "The candidate's scope: replaced region, real shapes, execution "
    "form (R7).",
    "TargetFreeze.scope": FIELDS["scope"],
    "HandoffRecord.champion": "The champion handed off: an experiment id or original; leave it "
    "out: perfledger fills it, and a stated one must be the ledger's (R18).",
    "HandoffRecord.figures": "The champion's gain figures as you state them (samples id, "
    "estimate, CI): each must be its recorded verdict's (R18); leave them out: perfledger fills "
    "them.",
    "GainFigure.samples_id": "The samples whose verdict (or final audit) gave the figure.",
    "GainFigure.estimate": "The improvement, a ratio (0.2 = 20 %), as the verdict recorded it.",
    "GainFigure.ci_low": "The CI's lower end, a ratio, as the verdict recorded it.",
    "GainFigure.ci_high": "The CI's upper end, a ratio, as the verdict recorded it.",
    "Candidate.subject": "The candidate's code directory (a path), put in the readiness "
    "driver's {subject} place: perfledger snapshots every file under it now, computes the "
    "content hash and changed paths, and records candidate.snapshot (R11). Give this, never "
    "snapshot. Only for a Target whose readiness driver declares {subject}.",
    "Candidate.snapshot": "The snapshot perfledger took of candidate.subject (R11); not typed.",
    "HandoffRecord.target_id": "The Target handed off.",
    "Preregistration.rejects": "What a failure would reject: implementation, integration or "
    "mechanism (R9).",
}


def describe(schema: dict[str, Any]) -> dict[str, Any]:
    """Add a ``description`` to every property of ``schema`` (a request's JSON Schema, root and
    ``$defs``) that has none, from :data:`MODEL_FIELDS` then :data:`FIELDS`; returns ``schema``
    (changed in place). A field in neither table keeps no description (a test lists them)."""
    objects = [(schema.get("title", ""), schema)]
    objects += list(schema.get("$defs", {}).items())
    for model, node in objects:
        for field, prop in node.get("properties", {}).items():
            if "description" in prop:
                continue
            text = MODEL_FIELDS.get(f"{model}.{field}") or FIELDS.get(field)
            if text is not None:
                prop["description"] = text
    return schema
