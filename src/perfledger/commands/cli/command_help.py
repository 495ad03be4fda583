"""The first paragraph of each lazily loaded command's help, so that ``perfledger --help``
lists the commands without importing their modules (a test checks them against the commands).
"""

#: command name -> the first paragraph of its help text
COMMAND_HELP: dict[str, str] = {
    "activity": (
        "Explain foreign activity in sample windows after the samples, before the verdict (R17)."
    ),
    "artifact": (
        "List or get the files attached to an event (raw sample tables, code snapshots, profiler "
        "reports); each is checked against its blake3 and size on the way out."
    ),
    "attest": (
        "Write an in-toto Statement v1 in a DSSE envelope for champion EXPERIMENT: its code "
        "snapshot's files as subjects, the ledger's case for it as predicate, signed with an "
        "ed25519 SSH key (docs/attestations.md). Exit 3 for an experiment that is not a "
        "champion, or a champion without a code snapshot or resting on samples measured outside "
        "perfledger."
    ),
    "audit": (
        "The auditor's replay, independent of the state cache: everything `verify` checks, "
        "every verdict re-derived from its samples, every request re-decided against the state "
        "before it; with --allowed-signers, every review's SSH signature. Events up to a head "
        "this clone audited clean before are not re-checked (the audit cache; --full: from "
        "zero). Exit 0 when clean, 5 with the findings (each naming its event and rule)."
    ),
    "baseline": (
        "Record a typed baseline, declared: it decides nothing (R4; `measure baseline` measures one)."
    ),
    "champion": ("Select or show the champion of a Target (R13)."),
    "checkpoint": (
        "Sign checkpoints of the ledger with SSH keys and co-sign them as a witness; git "
        "verify-tag checks each (docs/checkpoints.md)."
    ),
    "checkout": (
        "Write a recorded subject's files (SNAPSHOT: a tree digest or prefix, "
        "SAMPLES[:reference], TARGET:original, or an experiment id) into DIRECTORY, byte for byte"
        " (R11)."
    ),
    "claims": (
        "ROI claims vs outcomes: coverage, local speedup, stated and recomputed Amdahl bound, "
        "minimum effect, measured effect with its CI, prediction error, reconciliation (R7, R14)."
    ),
    "clone": (
        "Clone the ledger at URL into PATH (a new bare repository; default: the URL's last part),"
        " verifying every event before the ledger ref is written."
    ),
    "conflict": ("Resolve a conflict between concurrent decisions."),
    "env": (
        "Print the environment identity (GPU, driver, CUDA, CuPy, nvcc, ncu, host); missing items"
        " are listed as missing, never guessed (R2, R11)."
    ),
    "evidence": ("Record profiler or compiler evidence with its layer and applicability (R6)."),
    "experiment": ("Create an experiment with its opportunity claim (R7-R10); list or show them."),
    "final-audit": ("Record the final audit of the champion against the original (R13)."),
    "gc": (
        "Remove the garbage of killed writers and pulls (temporary objects and packs, a pack "
        "without its index, a pull's spooled pack), never a file a live writer is writing. Lock "
        "files are listed, never removed (a git process may hold one)."
    ),
    "handoff": (
        "Print the handoff of R18 derived from the state (Markdown by default, --json), or record"
        " it (`handoff record`)."
    ),
    "formal-run": ("formal-run commands."),
    "host-advice": ("Record host changes as advice; never applied (R16)."),
    "knowledge": ("Offline knowledge cards: query them against an environment (never decides)."),
    "local-result": ("Record a secondary-only gain with its scenario (R13)."),
    "loop": ("The NCU-guided kernel-iteration loop: setup, close-iter, finalize, state (R19-R25)."),
    "mcp": (
        "Serve perfledger over MCP on stdin/stdout (needs `pip install 'perfledger[mcp]'`): one "
        "tool per write operation (input schema: the request's JSON Schema; result: the CLI's "
        "JSON answer; a refusal is a tool error with its rule and hint), the read models (status,"
        " state, claims, champion, handoff, schema) and `cli` (any other command, e.g. measure "
        "workload) as tools. The ledger is --ledger, else $PERFLEDGER_DIR, else the enclosing "
        "repository."
    ),
    "measure": (
        "Measure under the protocol of docs/SPEC.md section 5 and record the samples (R4, R5, "
        "R11, R17)."
    ),
    "metric-audit": ("Record the audit of the primary metric's computation (R3)."),
    "pull": (
        "Fetch REMOTE's ledger (default origin), verify every new event, and join it: a "
        "fast-forward, or a merge commit that carries no event. A rewritten or tampered remote is"
        " refused and nothing changes locally. Exit 6 when the merge joined concurrent decisions "
        "the rules forbid together (e.g. two champion selections): the conflict is named with "
        "what it blocks and the `perfledger resolve` command."
    ),
    "push": (
        "Push the ledger to REMOTE (default origin); fast-forward only: pull first when the "
        "remote has events this ledger has not seen (exit 4). Never forces."
    ),
    "readiness": (
        "Record readiness: original, real test set, accuracy rule, driver, environment (R2)."
    ),
    "reconcile": (
        "Reconcile a contradicted prediction: corrected premise and model. Rules: R7 R14."
    ),
    "reject": ("Reject an experiment, stating what it closes. Rules: R15."),
    "rejected": ("Rejected directions, the scope each closed (R15) and why."),
    "remote": ("Manage the ledger's remotes (kept in the git config, as `git remote` does)."),
    "report": (
        "Write one self-contained HTML page (no network; plots inline): target and status, a "
        "timeline of decisions, claims vs outcomes, and plots made with matplotlib."
    ),
    "resolution": ("Record the measurement resolution from repeated original samples (R4)."),
    "resolve": (
        "Record which side of a conflict stands (`perfledger state` lists open conflicts); the "
        "same operation as `perfledger conflict resolve`."
    ),
    "resume": (
        "Print the handoff for the current head and the next decisions the rules allow: each one "
        "offered only if its decider, run dry on the head, accepts it."
    ),
    "review": (
        "Record a reviewer's challenge to a claim, rejection or stop, the response and whether "
        "dissent remains; list unresolved dissent. Recorded, never judged."
    ),
    "samples": ("Record paired samples of one stage (R5, R11, R17)."),
    "schema": (
        "Print the JSON Schema of OPERATION's request (e.g. ``experiment.create``), or with "
        "``--example`` a valid example request; without OPERATION, list the operations "
        '(``--json``: ``{"operations": [...]}``).'
    ),
    "skill": (
        "perfledger's Agent Skill (SKILL.md and references/): print it, or install it where an "
        "agent looks (e.g. `perfledger skill install ~/.claude/skills`)."
    ),
    "status": (
        "Where the session stands, on one screen: each current Target, its readiness chain, the "
        "champion and its final audit, open experiments and their stage, obligations "
        "(reconciliations owed, conflicts, stale results) and the next decisions the rules accept"
        " now (each run dry through its decider; nothing is appended)."
    ),
    "sync": (
        "Pull then push REMOTE (default origin); pulled again and pushed again when another "
        "machine pushed in between. Exit 6 when the pull joined concurrent decisions the rules "
        "forbid together: the conflict is named with what it blocks and the `perfledger resolve` "
        "command."
    ),
    "target": ("Freeze, supersede or show the optimization Target (R1)."),
    "triage": (
        "Hotspot triage of REPORT (a PyTorch profiler trace or an `nsys export --type sqlite` "
        "file): kernel, known-path and action tables, the action table's time shares being the "
        "coverage f a claim may cite (R6, R7)."
    ),
    "upstream-check": ("Record the check for an existing upstream equivalent (R10)."),
    "verdict": ("Derive and record a verdict from recorded samples (R12)."),
    "verify-attestation": (
        "Check the attestation FILE: its DSSE signature with a key of --signers, then that this "
        "ledger (a clone of the attested one) re-derives the same statement. Exit 5 naming what "
        "differs (the signature, a subject, a predicate field)."
    ),
}
